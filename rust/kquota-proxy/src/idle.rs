//! `connections.max.idle.ms`: a client connection with no bytes in either direction for that
//! long is closed, as Kafka's `Selector` expires idle connections. The clock is the client
//! socket's own (Linux `TCP_INFO`: the time since data was last received and last sent), so
//! every byte counts however it moved: read by a reader, spliced by a relay, or inside TLS.
//! Before a session exists the same bound caps the PROXY header's and the TLS handshake's waits
//! (`admission`, `secure`).

use std::time::Duration;

/// Kafka's `connections.max.idle.ms` default (10 minutes).
pub const DEFAULT_CONNECTIONS_MAX_IDLE: Duration = Duration::from_millis(600_000);

/// The socket a watchdog reads its idle time from.
#[cfg(target_os = "linux")]
pub type SocketId = std::os::fd::RawFd;
#[cfg(not(target_os = "linux"))]
pub type SocketId = ();

/// The client socket's id (taken before TLS wraps it; it lives as long as the session).
#[cfg(target_os = "linux")]
pub fn socket_id(sock: &tokio::net::TcpStream) -> SocketId {
    use std::os::fd::AsRawFd;
    sock.as_raw_fd()
}
#[cfg(not(target_os = "linux"))]
pub fn socket_id(_sock: &tokio::net::TcpStream) -> SocketId {}

/// How long the socket has moved no data either way (`None`: the kernel does not say).
#[cfg(target_os = "linux")]
pub fn socket_idle(fd: SocketId) -> Option<Duration> {
    // The head of Linux's `struct tcp_info` (include/uapi/linux/tcp.h), ABI-stable: eight u8
    // fields, then u32s of which the 10th is tcpi_last_data_sent and the 12th
    // tcpi_last_data_recv (milliseconds). The kernel copies as much as the caller asks for.
    #[repr(C)]
    #[derive(Default)]
    struct TcpInfoHead {
        bytes: [u8; 8],
        words: [u32; 13],
    }
    let mut info = TcpInfoHead::default();
    let mut len = std::mem::size_of::<TcpInfoHead>() as libc::socklen_t;
    // SAFETY: `info` is a plain C struct of `len` bytes, written by the kernel only.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut TcpInfoHead).cast(),
            &mut len,
        )
    };
    if rc != 0 || (len as usize) < std::mem::size_of::<TcpInfoHead>() {
        return None;
    }
    let (sent, received) = (info.words[9], info.words[11]);
    Some(Duration::from_millis(sent.min(received) as u64))
}
#[cfg(not(target_os = "linux"))]
pub fn socket_idle(_fd: SocketId) -> Option<Duration> {
    None
}

/// Returns once the socket has been idle for `limit` (never where the kernel cannot say: the
/// readers' own deadlines bound such a connection's waits then).
pub async fn expired(fd: SocketId, limit: Duration) -> Duration {
    let mut wait = limit;
    loop {
        tokio::time::sleep(wait).await;
        let Some(idle) = socket_idle(fd) else {
            std::future::pending::<()>().await;
            unreachable!()
        };
        if idle >= limit {
            return idle;
        }
        // Next look when the socket would reach the limit if nothing moves meanwhile.
        wait = limit - idle;
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_silent_socket_expires_and_bytes_reset_its_clock() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut server, _) = l.accept().await.unwrap();
        let fd = socket_id(&server);
        let limit = Duration::from_millis(300);
        // Bytes arriving every 100 ms keep it alive past the limit.
        let watch = expired(fd, limit);
        tokio::pin!(watch);
        for _ in 0..6 {
            tokio::select! {
                _ = &mut watch => panic!("expired while bytes were arriving"),
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            client.write_all(b"x").await.unwrap();
            let mut b = [0u8; 1];
            server.read_exact(&mut b).await.unwrap();
        }
        // Then silence: expired after about the limit.
        let t0 = std::time::Instant::now();
        let idle = expired(fd, limit).await;
        assert!(idle >= limit, "{idle:?}");
        assert!(t0.elapsed() >= Duration::from_millis(250), "{:?}", t0.elapsed());
        // Writes count too (data sent by the proxy to a client that is reading).
        assert!(socket_idle(fd).unwrap() >= limit);
        server.write_all(b"y").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(socket_idle(fd).unwrap() < limit);
    }
}
