//! The data plane: listeners (bootstrap + one port per broker), the registry of connections,
//! the broker address map, counters and the request log; Python reaches it through
//! `kquota._kquota.ProxyDataPlane`.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quota_core::QuotaKernel;
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::conn::Conn;
use crate::tables::ApiTables;

/// What the data plane asks of Python. Called from the runtime's threads: implementations only
/// hand the work to Python's event loop.
pub trait Bridge: Send + Sync + 'static {
    /// A request of an API Python handles (whole, without size prefix); the connection reads
    /// nothing more until Python forwards or settles `slot`.
    /// An `Err` closes the connection.
    fn on_request(&self, conn: u64, slot: u64, node: i32, frame: &[u8], ns: u64) -> Result<(), String>;
    /// The broker's response to a slot Python forwarded.
    fn on_response(&self, conn: u64, slot: u64, frame: &[u8]) -> Result<(), String>;
    /// The connection is gone; `reason` says why when it was not a clean close.
    fn on_close(&self, conn: u64, reason: Option<String>);
}

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub tables: ApiTables,
    pub bootstrap: (String, u16),
    pub listen_host: String,
    pub listen_port: u16,
    pub advertised_host: String,
    pub max_frame_bytes: usize,
    pub max_connections: usize,
    pub max_inflight: usize,
    pub quota_window_ms: u64,
    pub request_log: bool,
    /// How long a closing connection may take to send the answers it owes.
    pub drain: Duration,
}

/// One request-log row: (ts_ms, user, client id, quota type, value).
pub type LogRow = (i64, Arc<str>, String, u8, f64);
/// Rows kept between two drains at most (beyond, rows are counted as dropped).
const MAX_LOG_ROWS: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct BrokerEntry {
    pub upstream: (String, u16),
    pub port: u16,
}

#[derive(Default)]
pub struct Counters {
    pub refused: AtomicU64,
    pub streamed_requests: AtomicU64,
    pub streamed_responses: AtomicU64,
    pub log_dropped: AtomicU64,
}

pub struct Shared {
    pub cfg: ProxyConfig,
    pub kernel: Arc<QuotaKernel>,
    pub bridge: Arc<dyn Bridge>,
    pub rt: Handle,
    pub brokers: Mutex<HashMap<i32, BrokerEntry>>,
    pub conns: Mutex<HashMap<u64, Arc<Conn>>>,
    pub accepted: Mutex<HashMap<i32, u64>>,
    pub counters: Counters,
    pub log: Mutex<Vec<LogRow>>,
    next_conn: AtomicU64,
    pub stopping: AtomicBool,
    /// Wakes every connection's request reader when the proxy stops.
    pub stop: Notify,
    listeners: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

fn bind(host: &str, port: u16) -> std::io::Result<StdListener> {
    let l = StdListener::bind((host, port))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

impl Shared {
    pub fn new(
        cfg: ProxyConfig,
        kernel: Arc<QuotaKernel>,
        bridge: Arc<dyn Bridge>,
        rt: Handle,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            cfg,
            kernel,
            bridge,
            rt,
            brokers: Mutex::default(),
            conns: Mutex::default(),
            accepted: Mutex::default(),
            counters: Counters::default(),
            log: Mutex::default(),
            next_conn: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            stop: Notify::new(),
            listeners: Mutex::default(),
        })
    }

    /// Opens the bootstrap listener; returns its port.
    pub fn listen_bootstrap(self: &Arc<Self>) -> std::io::Result<u16> {
        let l = bind(&self.cfg.listen_host, self.cfg.listen_port)?;
        let port = l.local_addr()?.port();
        self.spawn_accept(l, -1)?;
        Ok(port)
    }

    fn spawn_accept(self: &Arc<Self>, l: StdListener, node: i32) -> std::io::Result<()> {
        let _guard = self.rt.enter();
        let listener = TcpListener::from_std(l)?;
        let me = Arc::clone(self);
        let task = self.rt.spawn(async move { me.accept_loop(listener, node).await });
        self.listeners.lock().unwrap().push(task);
        Ok(())
    }

    /// The proxy port standing for broker `node` now at `host:port` (its listener opened once;
    /// a later address replaces the upstream).
    pub fn broker_port(self: &Arc<Self>, node: i32, host: &str, port: u16) -> std::io::Result<u16> {
        let mut brokers = self.brokers.lock().unwrap();
        if let Some(entry) = brokers.get_mut(&node) {
            entry.upstream = (host.to_owned(), port);
            return Ok(entry.port);
        }
        let wanted = if self.cfg.listen_port == 0 {
            0
        } else {
            u16::try_from(u32::from(self.cfg.listen_port) + 1 + node.max(0) as u32).unwrap_or(0)
        };
        let l = match bind(&self.cfg.listen_host, wanted) {
            Ok(l) => l,
            Err(_) if wanted != 0 => bind(&self.cfg.listen_host, 0)?,
            Err(e) => return Err(e),
        };
        let bound = l.local_addr()?.port();
        self.spawn_accept(l, node)?;
        brokers.insert(
            node,
            BrokerEntry {
                upstream: (host.to_owned(), port),
                port: bound,
            },
        );
        Ok(bound)
    }

    /// The proxy's (host, port) for a broker named in a response.
    pub fn resolve(self: &Arc<Self>, node: i32, host: &str, port: i32) -> Result<(String, i32), String> {
        let port = u16::try_from(port).map_err(|_| format!("broker {node}: port {port} out of range"))?;
        let bound = self
            .broker_port(node, host, port)
            .map_err(|e| format!("broker {node}: cannot listen: {e}"))?;
        Ok((self.cfg.advertised_host.clone(), i32::from(bound)))
    }

    fn upstream(&self, node: i32) -> Option<(String, u16)> {
        if node < 0 {
            return Some(self.cfg.bootstrap.clone());
        }
        self.brokers
            .lock()
            .unwrap()
            .get(&node)
            .map(|e| e.upstream.clone())
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener, node: i32) {
        loop {
            let (sock, _peer): (tokio::net::TcpStream, SocketAddr) = match listener.accept().await {
                Ok(x) => x,
                Err(_) => {
                    // Out of descriptors, say: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if self.stopping.load(Ordering::Acquire) {
                return;
            }
            if self.conns.lock().unwrap().len() >= self.cfg.max_connections {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                drop(sock);
                continue;
            }
            *self.accepted.lock().unwrap().entry(node).or_insert(0) += 1;
            let Some(upstream) = self.upstream(node) else {
                continue;
            };
            let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
            let me = Arc::clone(&self);
            tokio::spawn(crate::conn::serve(me, id, node, sock, upstream));
        }
    }

    pub fn conn(&self, id: u64) -> Option<Arc<Conn>> {
        self.conns.lock().unwrap().get(&id).cloned()
    }

    pub fn log_request(&self, user: &Arc<str>, client_id: &str, quota_type: u8, value: f64) {
        if !self.cfg.request_log {
            return;
        }
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut log = self.log.lock().unwrap();
        if log.len() >= MAX_LOG_ROWS {
            self.counters.log_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        log.push((ts, Arc::clone(user), client_id.to_owned(), quota_type, value));
    }

    pub fn take_log(&self) -> Vec<LogRow> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    /// Stops accepting and reading new requests; answers owed still go out.
    pub fn begin_stop(&self) {
        self.stopping.store(true, Ordering::Release);
        for task in self.listeners.lock().unwrap().drain(..) {
            task.abort();
        }
        self.stop.notify_waiters();
        for conn in self.conns.lock().unwrap().values() {
            conn.wake();
        }
    }

    /// Closes every connection still open.
    pub fn close_all(&self) {
        let conns: Vec<Arc<Conn>> = self.conns.lock().unwrap().values().cloned().collect();
        for conn in conns {
            conn.close(None);
        }
    }
}
