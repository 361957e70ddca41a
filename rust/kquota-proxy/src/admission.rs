//! Connection quotas at accept (KIP-612), in the order of Kafka's `Acceptor` and
//! `ConnectionQuotas.inc`: the broker-wide and listener rate hold the accept loop, then the
//! broker-wide and listener `max.connections` until a slot is free ([`hold_accept`]); then, per connection and off the accept loop, the client's address (the
//! peer's, or the PROXY protocol header's where the listener takes it and the peer is a trusted
//! balancer: any other peer is closed unread), the per-IP rate (a
//! throttled connection is held, then closed, never served) and count (refused at once), and
//! the release of a counted connection when it ends ([`admit_and_serve`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use quota_core::ip_address::canonical_ip;
use quota_core::Admission;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::proxy_protocol::{self, ProxiedAddress, ProxyHeaderError, MAX_HEADER_BYTES};
use crate::shared::Shared;

/// How often a listener at `max.connections` looks for a free slot (Kafka waits on a condition
/// signalled by `dec`; a short poll keeps the kernel free of async wakers).
const SLOT_POLL: Duration = Duration::from_millis(5);
/// Bytes peeked at a time while reading a PROXY header (a v2 header may be 64 KiB).
const PEEK_CHUNK: usize = 4096;

/// Step 1, on the accept loop: records the connection into the broker-wide and listener rates
/// and holds the loop for the delay (as Kafka blocks its acceptor thread), then while the
/// listener or the proxy is at the kernel's `max.connections` (Kafka's acceptor waits there
/// too: nothing is refused here). The slot found is held for the connection until the kernel
/// counts it; `None` when the proxy stops while waiting.
pub async fn hold_accept(shared: &Arc<Shared>) -> Option<Slot> {
    let listener = shared.cfg.listener_name();
    let delay = shared
        .kernel
        .connections
        .record_accept(listener, None)
        .unwrap_or(0);
    if delay > 0 {
        shared.counters.accept_delayed.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(delay as u64)).await;
    }
    loop {
        if shared.stopping.load(Ordering::Acquire) {
            return None;
        }
        // A clock the kernel refuses (never the system's) holds no slot and waits no longer.
        match shared.kernel.connections.take_slot(listener, None) {
            Ok(true) => {
                return Some(Slot {
                    shared: Arc::clone(shared),
                    held: true,
                })
            }
            Ok(false) => tokio::time::sleep(SLOT_POLL).await,
            Err(_) => return None,
        }
    }
}

/// A `max.connections` slot held for an accepted connection whose address is not read yet:
/// given back when dropped unless `Slot::admit` handed it to the kernel's count.
pub struct Slot {
    shared: Arc<Shared>,
    held: bool,
}

impl Slot {
    fn admit(mut self, ip: IpAddr) -> Result<Admission, quota_core::QuotaError> {
        self.held = false;
        let listener = self.shared.cfg.listener_name();
        self.shared.kernel.connections.admit_held(ip, listener, None)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.held {
            self.shared.kernel.connections.return_slot(self.shared.cfg.listener_name());
        }
    }
}

/// A connection the kernel counted for `ip`: counted down when dropped, however the session ends.
struct Counted {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let listener = self.shared.cfg.listener_name();
        self.shared.kernel.connections.release(self.ip, listener);
    }
}

/// An accepted connection not yet handed to its session (`Counters::pending_admission`, which
/// the accept loop counts against `max_client_sockets`): counted down when dropped.
pub struct Admitting {
    shared: Arc<Shared>,
    started: bool,
}

impl Admitting {
    pub fn new(shared: &Arc<Shared>) -> Self {
        shared.counters.pending_admission.fetch_add(1, Ordering::AcqRel);
        shared.counters.admission_unstarted.fetch_add(1, Ordering::AcqRel);
        Admitting {
            shared: Arc::clone(shared),
            started: false,
        }
    }

    /// Its task runs (`Counters::admission_unstarted`).
    fn start(&mut self) {
        if !std::mem::replace(&mut self.started, true) {
            self.shared.counters.admission_unstarted.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Admitting {
    fn drop(&mut self) {
        self.start();
        self.shared
            .counters
            .pending_admission
            .fetch_sub(1, Ordering::AcqRel);
    }
}

/// Steps 2 and 3 for one accepted socket, then its session: the client's address, the per-IP
/// rate and count, and the release when the session ends.
pub async fn admit_and_serve(
    mut admitting: Admitting,
    slot: Slot,
    id: u64,
    node: i32,
    mut sock: TcpStream,
    peer: SocketAddr,
    upstream: (String, u16),
) {
    admitting.start();
    let shared = Arc::clone(&admitting.shared);
    if shared.cfg.proxy_protocol && !shared.cfg.proxy_protocol_trusted.trusts(peer.ip()) {
        // A header names whatever address its sender likes: only a trusted balancer's is read.
        shared
            .counters
            .proxy_protocol_untrusted
            .fetch_add(1, Ordering::Relaxed);
        shared.bridge.on_close(
            id,
            Some(format!(
                "connection from {peer} refused: not a trusted PROXY protocol source \
                 (kquota.proxy.protocol.trusted.sources)"
            )),
        );
        return;
    }
    let ip = match client_address(&shared, &mut sock, peer).await {
        Ok(ip) => ip,
        Err(why) => {
            shared
                .counters
                .proxy_header_refused
                .fetch_add(1, Ordering::Relaxed);
            shared
                .bridge
                .on_close(id, Some(format!("connection from {peer} refused: {why}")));
            return;
        }
    };
    match slot.admit(ip) {
        Ok(Admission::Accepted) => {
            let _counted = Counted {
                shared: Arc::clone(&shared),
                ip,
            };
            drop(admitting);
            crate::session::serve(shared, id, node, sock, upstream).await;
        }
        Ok(Admission::Throttled { throttle_ms }) => {
            // Kafka's ConnectionThrottledException: the socket is held for the throttle, then
            // closed unserved, so a reconnect storm is slowed by its own closes.
            shared.bridge.on_close(
                id,
                Some(format!("connection from {ip} throttled {throttle_ms} ms by its connection_creation_rate, then closed")),
            );
            tokio::time::sleep(Duration::from_millis(throttle_ms as u64)).await;
        }
        Ok(Admission::TooManyConnections { max }) => {
            shared.bridge.on_close(
                id,
                Some(format!("too many connections from {ip} (maximum = {max})")),
            );
        }
        Err(e) => shared
            .bridge
            .on_close(id, Some(format!("connection from {ip} not admitted: {e}"))),
    }
}

/// The address the IP quotas, the log and the metrics use: the peer's, or on a listener taking
/// the PROXY protocol the client's from the header (read within the configured deadline).
async fn client_address(shared: &Shared, sock: &mut TcpStream, peer: SocketAddr) -> Result<IpAddr, String> {
    if !shared.cfg.proxy_protocol {
        return Ok(canonical_ip(peer.ip()));
    }
    // A balancer silent for connections.max.idle.ms is idle too.
    let limit = shared.cfg.proxy_protocol_timeout.min(shared.cfg.max_idle);
    match tokio::time::timeout(limit, read_proxy_header(sock)).await {
        Err(_) => Err(format!(
            "no complete PROXY protocol header within {} ms",
            limit.as_millis()
        )),
        Ok(Err(why)) => Err(why),
        Ok(Ok(ProxiedAddress::Proxied { source, .. })) => Ok(canonical_ip(source.ip())),
        // LOCAL / UNKNOWN: the balancer speaking for itself; its own address stands.
        Ok(Ok(ProxiedAddress::Local)) => Ok(canonical_ip(peer.ip())),
    }
}

/// Reads exactly the PROXY header off `sock`, leaving the Kafka bytes after it unread: bytes are
/// peeked, and consumed only once the parser has placed them inside the header (every byte of
/// an incomplete header is the header's, so consuming them is safe).
pub async fn read_proxy_header(sock: &mut TcpStream) -> Result<ProxiedAddress, String> {
    let mut got: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; PEEK_CHUNK];
    loop {
        let room = (MAX_HEADER_BYTES - got.len()).min(PEEK_CHUNK);
        let n = sock
            .peek(&mut chunk[..room])
            .await
            .map_err(|e| format!("reading the PROXY protocol header: {e}"))?;
        if n == 0 {
            return Err(if got.is_empty() {
                "closed before a PROXY protocol header".into()
            } else {
                format!("PROXY protocol header truncated after {} bytes", got.len())
            });
        }
        let before = got.len();
        got.extend_from_slice(&chunk[..n]);
        match proxy_protocol::parse(&got) {
            Ok(header) => {
                let rest = header.length - before;
                sock.read_exact(&mut chunk[..rest])
                    .await
                    .map_err(|e| e.to_string())?;
                return Ok(header.address);
            }
            Err(ProxyHeaderError::Incomplete) if got.len() < MAX_HEADER_BYTES => {
                sock.read_exact(&mut chunk[..n])
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Err(ProxyHeaderError::Incomplete) => {
                return Err(format!(
                    "PROXY protocol header longer than {MAX_HEADER_BYTES} bytes"
                ))
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}
