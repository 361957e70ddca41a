//! A connection's socket, plain or TLS, and its two halves as the readers and the outboxes use
//! them. An enum rather than a trait object so that a PLAINTEXT connection pays one branch per
//! read or write and keeps its raw socket for `splice(2)` (relay.rs); a TLS connection's bytes
//! go through rustls (tokio-rustls), bounded by the same read-ahead and outbox limits.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;

/// A TLS connection over TCP, client side (to a broker) or server side (from a client).
pub type Tls = TlsStream<TcpStream>;

/// One connection's socket.
pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<Tls>),
}

/// The reading half of a [`Stream`].
pub enum ReadSide {
    Tcp(OwnedReadHalf),
    Tls(ReadHalf<Box<Tls>>),
}

/// The writing half of a [`Stream`].
pub enum WriteSide {
    Tcp(OwnedWriteHalf),
    Tls(WriteHalf<Box<Tls>>),
}

impl Stream {
    /// The two halves (a TLS stream's halves share its session through tokio's split lock).
    pub fn split(self) -> (ReadSide, WriteSide) {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (ReadSide::Tcp(r), WriteSide::Tcp(w))
            }
            Stream::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (ReadSide::Tls(r), WriteSide::Tls(w))
            }
        }
    }
}

impl ReadSide {
    /// The raw socket when the bytes on it are the frames themselves (PLAINTEXT): splicing
    /// from it is possible.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ReadSide::Tcp(r) => Some(r.as_ref()),
            ReadSide::Tls(_) => None,
        }
    }
}

impl WriteSide {
    /// The raw socket when plain (a splice destination).
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            WriteSide::Tcp(w) => Some(w.as_ref()),
            WriteSide::Tls(_) => None,
        }
    }
}

impl AsyncRead for ReadSide {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadSide::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            ReadSide::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteSide {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteSide::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            WriteSide::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteSide::Tcp(w) => Pin::new(w).poll_flush(cx),
            WriteSide::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteSide::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            WriteSide::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteSide::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            WriteSide::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            WriteSide::Tcp(w) => w.is_write_vectored(),
            WriteSide::Tls(w) => w.is_write_vectored(),
        }
    }
}
