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

/// Runs shorter than this are copied, not spliced (a splice costs two system calls per
/// pipe-full): a relayed run, or a held frame's run kept in the pipe.
pub const SPLICE_MIN: usize = 32 << 10;

/// A held frame's bytes in order: read into the proxy, or waiting in the relay's pipe.
pub enum Held {
    Read(Vec<u8>),
    Piped(usize),
}

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

    /// The most bytes of a frame arriving on `src` the relay's pipe can hold while the frame is
    /// walked before it is answered ([`Relay::hold`]): the pipe's size, made on first use; 0
    /// where nothing can be spliced (TLS on either side, not Linux), or the pipe cannot be made.
    /// It often holds fewer: a pipe is a number of buffers, each a page at most, and each of
    /// the socket's segments spliced in takes its own, often part of a page.
    pub fn hold_room(&mut self, src: &Reader) -> usize {
        #[cfg(target_os = "linux")]
        if let (Some(dst_fd), Some(_)) = (self.dst_fd, src.get_ref().tcp()) {
            if self.splicer.is_none() {
                self.splicer = linux::splicer(dst_fd).ok();
            }
            return self.splicer.as_ref().map_or(0, |sp| sp.size);
        }
        let _ = src;
        0
    }

    /// Moves the next `n` bytes of `src` (none of them read ahead into `src`'s buffer) into the
    /// pipe, where they wait for [`Relay::release`] or [`Relay::discard`], until the pipe is
    /// full; returns how many it moved. Fewer than `n` once the pipe is full: the rest is still
    /// readable from `src`, and must be read from it (no new readiness would announce it).
    pub async fn hold(&mut self, src: &mut Reader, n: usize) -> Result<usize, String> {
        #[cfg(target_os = "linux")]
        if let Some(sp) = self.splicer.as_ref() {
            return linux::fill_pipe(sp, src, n).await;
        }
        let _ = (src, n);
        Err("nothing can be held: no pipe".into())
    }

    /// Sends a held frame's bytes in order behind everything queued in `out` (the frame is the
    /// connection's next answer).
    pub async fn release(&mut self, held: Vec<Held>, out: &Outbox) -> Result<(), String> {
        for piece in held {
            match piece {
                Held::Read(bytes) => out.send(bytes),
                Held::Piped(n) => {
                    out.wait_below(0).await;
                    if out.failed() {
                        return Err("a socket write failed".into());
                    }
                    #[cfg(target_os = "linux")]
                    if let Some(sp) = self.splicer.as_ref() {
                        linux::drain_pipe(sp, n).await?;
                        continue;
                    }
                    return Err(format!("{n} held bytes without a pipe"));
                }
            }
        }
        Ok(())
    }

    /// Drops what the pipe holds (the frame is answered without it). The pipe is emptied into
    /// /dev/null, which takes its buffers without copying them, and kept for the next frame
    /// (cheaper than closing it and making another); closed if it cannot be emptied.
    pub fn discard(&mut self) {
        #[cfg(target_os = "linux")]
        if self.splicer.as_ref().is_some_and(|sp| linux::empty_pipe(sp).is_err()) {
            self.splicer = None;
        }
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
    use std::sync::OnceLock;

    use tokio::io::unix::AsyncFd;
    use tokio::io::{AsyncBufRead, Interest};

    use super::Relay;
    use crate::io::Reader;
    use crate::outbox::Outbox;

    /// The pipe's size asked for: bytes moved per splice, and the most a held frame keeps in it.
    const PIPE: usize = 1 << 20;

    pub struct Splicer {
        /// The pipe's size: what it holds at most.
        pub size: usize,
        pub(super) pipe_r: OwnedFd,
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

    pub fn splicer(dst_fd: RawFd) -> io::Result<Splicer> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
        // SAFETY: pipe2 succeeded, so both are fresh descriptors we own.
        let (pipe_r, pipe_w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A larger pipe moves more per call; the default (64 KiB) still works if refused.
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE as libc::c_int) };
        // SAFETY: as above; the size it has (the larger one may have been refused).
        let size = cvt(unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_GETPIPE_SZ) })? as usize;
        // SAFETY: `dst_fd` is open (its writer outlives the relay); dup gives our own copy.
        let dup = cvt(unsafe { libc::fcntl(dst_fd, libc::F_DUPFD_CLOEXEC, 0) })?;
        // SAFETY: a fresh descriptor from fcntl, owned by the OwnedFd, which the AsyncFd owns:
        // it stays open and the same for the AsyncFd's whole life.
        let dst = unsafe { AsyncFd::register_with_interest(OwnedFd::from_raw_fd(dup), Interest::WRITABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Splicer {
            size,
            pipe_r,
            pipe_w,
            dst,
        })
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
        let (Some(dst_fd), Some(_)) = (relay.dst_fd, src.get_ref().tcp()) else {
            return Err("splice between sockets that are not both plain".into());
        };
        if relay.splicer.is_none() {
            relay.splicer = Some(splicer(dst_fd).map_err(failed("cannot set up splice"))?);
        }
        let sp = relay.splicer.as_ref().expect("set above");
        while n > 0 {
            // What has arrived goes on at once (cut-through), a pipe-full at most. The pipe is
            // empty here, so it cannot be full.
            let moved = fill_some(sp, src, n.min(sp.size)).await?;
            if moved == 0 {
                return Err("the relay's pipe is full while empty".into());
            }
            drain_pipe(sp, moved).await?;
            n -= moved;
        }
        Ok(())
    }

    /// Whether the pipe has no free buffer (a pipe polls writable while it has one).
    fn pipe_full(sp: &Splicer) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: sp.pipe_w.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one pollfd of ours, no wait.
        cvt(unsafe { libc::poll(&mut p, 1, 0) })?;
        Ok(p.revents & libc::POLLOUT == 0)
    }

    /// Moves what has arrived on `src`'s socket into the pipe, waiting for something: between 1
    /// and `max` bytes, or 0 when the pipe is full.
    async fn fill_some(sp: &Splicer, src: &Reader, max: usize) -> Result<usize, String> {
        let Some(stream) = src.get_ref().tcp() else {
            return Err("splice from a socket that is not plain".into());
        };
        let src_fd = stream.as_raw_fd();
        loop {
            stream.readable().await.map_err(|e| format!("read failed: {e}"))?;
            // A splice into a full pipe fails as one from an empty socket does (EAGAIN). Only
            // the latter may clear the socket's readiness (try_io does on WouldBlock): cleared
            // while bytes wait on the socket, it waits for an edge that never comes. A full
            // pipe is told apart by polling it (nothing else fills or drains it meanwhile).
            let spliced = stream.try_io(Interest::READABLE, || {
                let r = splice(src_fd, sp.pipe_w.as_raw_fd(), max);
                let stopped = match &r {
                    Ok(k) => *k == 0,
                    Err(e) => e.kind() == io::ErrorKind::WouldBlock,
                };
                if stopped && pipe_full(sp)? {
                    return Ok(None);
                }
                r.map(Some)
            });
            match spliced {
                Ok(None) => return Ok(0),
                Ok(Some(0)) => return Err("connection closed inside a frame".into()),
                Ok(Some(k)) => return Ok(k),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    }

    /// Moves `n` bytes from `src`'s socket into the pipe, or fewer if the pipe fills first;
    /// returns how many.
    pub async fn fill_pipe(sp: &Splicer, src: &Reader, n: usize) -> Result<usize, String> {
        let mut moved = 0;
        while moved < n {
            match fill_some(sp, src, n - moved).await? {
                0 => break,
                k => moved += k,
            }
        }
        Ok(moved)
    }

    /// /dev/null, opened once for the process: where a dropped frame's held bytes go.
    fn dev_null() -> io::Result<RawFd> {
        static NULL: OnceLock<Option<OwnedFd>> = OnceLock::new();
        let null = NULL.get_or_init(|| {
            // SAFETY: a constant NUL-terminated path; the descriptor is owned below.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
            // SAFETY: a fresh descriptor from open, owned from here on.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        });
        null.as_ref()
            .map(AsRawFd::as_raw_fd)
            .ok_or_else(|| io::Error::other("/dev/null cannot be opened"))
    }

    /// Empties the pipe into /dev/null (its pages released, not copied).
    pub fn empty_pipe(sp: &Splicer) -> io::Result<()> {
        let null = dev_null()?;
        loop {
            match splice(sp.pipe_r.as_raw_fd(), null, sp.size) {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                // Empty (its write end is open, so it would wait for more).
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes exactly `n` bytes from the pipe to the destination socket (the outbox idle).
    pub async fn drain_pipe(sp: &Splicer, mut n: usize) -> Result<(), String> {
        let failed = |what: &'static str| move |e: io::Error| format!("{what}: {e}");
        while n > 0 {
            let mut ready = sp.dst.writable().await.map_err(failed("write failed"))?;
            match ready.try_io(|fd| splice(sp.pipe_r.as_raw_fd(), fd.as_raw_fd(), n)) {
                Ok(Ok(k)) => n -= k,
                Ok(Err(e)) => return Err(format!("write failed: {e}")),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::AsRawFd;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::io::tests::pair;

    /// The pipe's identity (its inode): the same pipe, or a new one.
    fn pipe_id(relay: &Relay) -> u64 {
        let fd = relay.splicer.as_ref().expect("a pipe").pipe_r.as_raw_fd();
        // SAFETY: `st` is written by fstat on an open descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        st.st_ino
    }

    /// A held frame answered without its records (a throttled Fetch) leaves the pipe empty for
    /// the next one, and the same pipe: none is made per dropped frame.
    #[tokio::test]
    async fn a_discarded_hold_leaves_the_same_pipe_empty() {
        let (mut broker, mut rd, _rd_wr) = pair().await;
        let (mut client, _client_rd, wr) = pair().await;
        let mut relay = Relay::new(&wr);
        let (out, writer) = Outbox::new(wr, Arc::new(tokio::sync::Notify::new()));
        tokio::spawn(writer);
        let run = 64 << 10;
        broker.write_all(&vec![1u8; run]).await.unwrap();
        broker.write_all(&vec![2u8; run]).await.unwrap();
        assert!(relay.hold_room(&rd) >= run);
        let pipe = pipe_id(&relay);
        relay.hold(&mut rd, run).await.unwrap();
        relay.discard();
        assert!(relay.hold_room(&rd) >= run);
        assert_eq!(pipe_id(&relay), pipe, "a new pipe after a discard");
        relay.hold(&mut rd, run).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), relay.release(vec![Held::Piped(run)], &out))
            .await
            .expect("release stalled")
            .unwrap();
        let mut got = vec![0u8; run];
        client.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|&b| b == 2), "the discarded run was sent");
    }
}
