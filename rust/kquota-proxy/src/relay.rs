//! Relaying the bytes of a frame the proxy does not inspect (a large Produce request's
//! batches, a Fetch response's records), in order behind whatever the outbox already holds.
//!
//! On Linux they are spliced (socket -> pipe -> socket, `splice(2)`): the kernel moves pages
//! between the sockets and the proxy never copies the data into or out of its own memory, which
//! is most of what a proxy costs per byte. Elsewhere, or for short runs, they are copied in
//! chunks through the outbox. Through TLS (either side) splicing is impossible: the bytes are
//! decrypted and encrypted in the proxy, copied in `CHUNK`s under the same `BACKLOG` bound.

use tokio::io::AsyncReadExt;

use crate::io::{io_err, Reader, BACKLOG, CHUNK};
use crate::outbox::Outbox;
use crate::stream::WriteSide;

/// Runs shorter than this are copied (a splice costs two system calls per pipe-full).
#[cfg(target_os = "linux")]
const SPLICE_MIN: usize = 32 << 10;

/// One direction's relay: the destination socket (its outbox's; none through TLS) and, once
/// used, a pipe.
pub struct Relay {
    #[cfg(target_os = "linux")]
    dst_fd: Option<std::os::fd::RawFd>,
    #[cfg(target_os = "linux")]
    splicer: Option<linux::Splicer>,
}

impl Relay {
    /// `dst` is the socket `out` writes to (it outlives the relay: the writer owns it).
    pub fn new(dst: &WriteSide) -> Relay {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            Relay {
                dst_fd: dst.tcp().map(AsRawFd::as_raw_fd),
                splicer: None,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = dst;
            Relay {}
        }
    }

    /// Relays the next `n` bytes of `src` after everything queued in `out`.
    pub async fn relay(&mut self, src: &mut Reader, out: &Outbox, n: usize) -> Result<(), String> {
        #[cfg(target_os = "linux")]
        if n >= SPLICE_MIN && self.dst_fd.is_some() && src.get_ref().tcp().is_some() {
            return linux::splice_relay(self, src, out, n).await;
        }
        copy(src, out, n).await
    }
}

/// Copies `n` bytes in chunks, as the peer takes them.
async fn copy(src: &mut Reader, out: &Outbox, mut n: usize) -> Result<(), String> {
    while n > 0 {
        out.wait_below(BACKLOG).await;
        if out.failed() {
            return Err("a socket write failed".into());
        }
        let k = n.min(CHUNK);
        let mut chunk = Vec::with_capacity(k);
        while chunk.len() < k {
            let got = (&mut *src)
                .take((k - chunk.len()) as u64)
                .read_buf(&mut chunk)
                .await
                .map_err(io_err("connection closed inside a frame"))?;
            if got == 0 {
                return Err("connection closed inside a frame".into());
            }
        }
        out.send(chunk);
        n -= k;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    use tokio::io::unix::AsyncFd;
    use tokio::io::{AsyncBufRead, Interest};

    use super::Relay;
    use crate::io::Reader;
    use crate::outbox::Outbox;

    /// Bytes moved per splice (the pipe's size).
    const PIPE: usize = 1 << 20;

    pub struct Splicer {
        pipe_r: OwnedFd,
        pipe_w: OwnedFd,
        /// A duplicate of the destination socket, registered for writability.
        dst: AsyncFd<OwnedFd>,
    }

    fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    fn splicer(dst_fd: RawFd) -> io::Result<Splicer> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
        // SAFETY: pipe2 succeeded, so both are fresh descriptors we own.
        let (pipe_r, pipe_w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A larger pipe moves more per call; the default (64 KiB) still works if refused.
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE as libc::c_int) };
        // SAFETY: `dst_fd` is open (its writer outlives the relay); dup gives our own copy.
        let dup = cvt(unsafe { libc::fcntl(dst_fd, libc::F_DUPFD_CLOEXEC, 0) })?;
        // SAFETY: a fresh descriptor from fcntl, owned by the OwnedFd, which the AsyncFd owns:
        // it stays open and the same for the AsyncFd's whole life.
        let dst = unsafe { AsyncFd::register_with_interest(OwnedFd::from_raw_fd(dup), Interest::WRITABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Splicer { pipe_r, pipe_w, dst })
    }

    fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
        // SAFETY: null offsets (both ends are a socket or a pipe); the kernel checks the fds.
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    pub async fn splice_relay(
        relay: &mut Relay,
        src: &mut Reader,
        out: &Outbox,
        mut n: usize,
    ) -> Result<(), String> {
        let failed = |what: &'static str| move |e: io::Error| format!("{what}: {e}");
        // Bytes already read ahead go first, through the outbox.
        let ahead = src.buffer().len().min(n);
        if ahead > 0 {
            out.send(src.buffer()[..ahead].to_vec());
            std::pin::Pin::new(&mut *src).consume(ahead);
            n -= ahead;
        }
        if n == 0 {
            return Ok(());
        }
        // Once the outbox is empty its writer is idle, and nothing else is queued for this
        // socket until the frame is done (the frame is the connection's head): the socket is
        // the relay's meanwhile.
        out.wait_below(0).await;
        if out.failed() {
            return Err("a socket write failed".into());
        }
        let (Some(dst_fd), Some(stream)) = (relay.dst_fd, src.get_ref().tcp()) else {
            return Err("splice between sockets that are not both plain".into());
        };
        if relay.splicer.is_none() {
            relay.splicer = Some(splicer(dst_fd).map_err(failed("cannot set up splice"))?);
        }
        let sp = relay.splicer.as_ref().expect("set above");
        let src_fd = stream.as_raw_fd();
        while n > 0 {
            let want = n.min(PIPE);
            let moved = loop {
                stream.readable().await.map_err(failed("read failed"))?;
                match stream.try_io(Interest::READABLE, || splice(src_fd, sp.pipe_w.as_raw_fd(), want)) {
                    Ok(0) => return Err("connection closed inside a frame".into()),
                    Ok(k) => break k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(format!("read failed: {e}")),
                }
            };
            let mut left = moved;
            while left > 0 {
                let mut ready = sp.dst.writable().await.map_err(failed("write failed"))?;
                match ready.try_io(|fd| splice(sp.pipe_r.as_raw_fd(), fd.as_raw_fd(), left)) {
                    Ok(Ok(k)) => left -= k,
                    Ok(Err(e)) => return Err(format!("write failed: {e}")),
                    Err(_would_block) => continue,
                }
            }
            n -= moved;
        }
        Ok(())
    }
}
