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
