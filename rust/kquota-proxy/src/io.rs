//! Reading frames from a socket: size prefixes, whole frames, skipping, and the sizes that
//! bound what a connection holds.

use tokio::io::{AsyncReadExt, BufReader};

use crate::stream::ReadSide;

/// Frames at least this long are relayed cut-through (Produce requests, Fetch responses).
pub const STREAM_MIN: usize = 64 << 10;
/// The head of a streamed frame read before deciding.
pub const HEAD: usize = 8 << 10;
/// Bytes relayed per write while streaming.
pub const CHUNK: usize = 256 << 10;
/// A reader stops while its peer has this much queued.
pub const BACKLOG: usize = 4 << 20;
/// The smallest step by which a frame's buffer grows while it is read (`read_rest`).
pub const READ_STEP: usize = 64 << 10;
/// Read-ahead per socket.
pub const READ_BUFFER: usize = 64 << 10;

pub type Reader = BufReader<ReadSide>;

pub fn io_err(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Reads a size prefix; `false` at a clean end of stream.
pub async fn read_prefix(rd: &mut Reader, prefix: &mut [u8; 4]) -> Result<bool, String> {
    read_prefix_io(rd, prefix).await.map_err(io_err("read failed"))
}

/// [`read_prefix`], with the I/O error as it came (a TLS alert inside it, say).
pub async fn read_prefix_io(rd: &mut Reader, prefix: &mut [u8; 4]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < 4 {
        let n = rd.read(&mut prefix[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed inside a size prefix",
            ));
        }
        got += n;
    }
    Ok(true)
}

/// Reads the `rest` of a frame into `buf`. The buffer grows as the bytes arrive, never to the
/// size the frame declares: each step is at most half again what it holds (and at least
/// [`READ_STEP`]), so a client that declares a large frame and sends little of it holds little.
pub async fn read_rest(rd: &mut Reader, buf: &mut Vec<u8>, rest: &mut usize) -> Result<(), String> {
    while *rest > 0 {
        let step = (*rest).min(READ_STEP.max(buf.len() / 2));
        let at = buf.len();
        buf.reserve_exact(step);
        buf.resize(at + step, 0);
        rd.read_exact(&mut buf[at..])
            .await
            .map_err(io_err("connection closed inside a frame"))?;
        *rest -= step;
    }
    Ok(())
}

/// The most [`read_response_rest`] sizes a buffer for at once.
pub const RESPONSE_EXACT_MAX: usize = 64 << 20;

/// Reads the `rest` of a broker's response into `buf`, sized for it once (up to
/// [`RESPONSE_EXACT_MAX`], growing past that) and read into its spare capacity, never
/// zero-filled: a response held whole costs one copy in. The broker answers what the proxy asked
/// (a Fetch's max bytes capped), so unlike a client's frame ([`read_rest`]) its size is believed,
/// up to the bound.
pub async fn read_response_rest(rd: &mut Reader, buf: &mut Vec<u8>, rest: usize) -> Result<(), String> {
    read_appended(rd, buf, rest)
        .await
        .map_err(io_err("broker connection closed inside a frame"))
}

/// Appends the next `n` bytes of `rd` to `buf` as [`read_response_rest`] reads them: room for
/// `n` reserved up to [`RESPONSE_EXACT_MAX`], more only as bytes arrive; an error if the
/// stream ends first.
pub async fn read_appended(rd: &mut Reader, buf: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    buf.reserve_exact(n.min(RESPONSE_EXACT_MAX));
    let got = (&mut *rd).take(n as u64).read_to_end(buf).await?;
    if got < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Reads and drops `n` bytes.
pub async fn skip(rd: &mut Reader, mut n: usize) -> Result<(), String> {
    let mut scratch = vec![0u8; n.min(CHUNK)];
    while n > 0 {
        let k = n.min(scratch.len());
        rd.read_exact(&mut scratch[..k])
            .await
            .map_err(io_err("connection closed inside a frame"))?;
        n -= k;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A client socket and the reader of its accepted end (with that end's write half, which
    /// keeps the socket open while held).
    pub(crate) async fn pair() -> (tokio::net::TcpStream, Reader, crate::stream::WriteSide) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let (rd, wr) = crate::stream::Stream::Tcp(server).split();
        (client, BufReader::with_capacity(READ_BUFFER, rd), wr)
    }

    #[tokio::test]
    async fn a_declared_frame_holds_only_what_has_arrived() {
        let (mut client, mut rd, _wr) = pair().await;
        // 100 MB declared, 16 KB sent, then silence: the buffer holds about one step.
        client.write_all(&[7u8; 16 << 10]).await.unwrap();
        let mut buf = vec![0u8; 4 + HEAD];
        let mut rest: usize = 100 << 20;
        let read = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            read_rest(&mut rd, &mut buf, &mut rest),
        )
        .await;
        assert!(read.is_err(), "the frame cannot be complete");
        assert!(buf.capacity() <= 4 + HEAD + READ_STEP, "{} bytes held", buf.capacity());
    }

    #[tokio::test]
    async fn a_whole_frame_is_read_exactly_with_bounded_slack() {
        let (mut client, mut rd, _wr) = pair().await;
        let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = body.clone();
        let writer = tokio::spawn(async move { client.write_all(&sent).await.unwrap() });
        let mut buf = body[..HEAD].to_vec();
        rd.read_exact(&mut vec![0u8; HEAD]).await.unwrap();
        let mut rest = body.len() - HEAD;
        read_rest(&mut rd, &mut buf, &mut rest).await.unwrap();
        writer.await.unwrap();
        assert_eq!(rest, 0);
        assert_eq!(buf, body);
        // Grown in steps of at most half again: never more than 1.5x what arrived.
        assert!(buf.capacity() <= body.len() * 3 / 2, "{}", buf.capacity());
    }

    #[tokio::test]
    async fn a_response_is_read_exactly_into_one_buffer_and_a_short_one_is_an_error() {
        let (mut client, mut rd, _wr) = pair().await;
        let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let sent = body.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client.write_all(b"next frame").await.unwrap();
            client
        });
        let mut buf = body[..HEAD].to_vec();
        rd.read_exact(&mut vec![0u8; HEAD]).await.unwrap();
        read_response_rest(&mut rd, &mut buf, body.len() - HEAD).await.unwrap();
        assert_eq!(buf, body);
        assert_eq!(buf.capacity(), body.len(), "sized once");
        // What follows the frame is the next frame's, unread.
        let mut next = [0u8; 10];
        rd.read_exact(&mut next).await.unwrap();
        assert_eq!(&next, b"next frame");
        // A response cut short (the broker went away) is an error, not a short frame.
        let mut client = writer.await.unwrap();
        client.write_all(&[1u8; 100]).await.unwrap();
        drop(client);
        let mut buf = Vec::new();
        assert!(read_response_rest(&mut rd, &mut buf, 1000).await.is_err());
    }
}
