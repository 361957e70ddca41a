//! What every connection of the data plane shares: configuration, the quota kernel, the bridge
//! to Python, the registry of connections, the broker address map (listeners opened through
//! `listen`), counters and the request log.

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quota_core::QuotaKernel;
use tokio::runtime::Handle;
use tokio::sync::Notify;

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

/// A connection as the rest of the data plane (and Python) reaches it.
pub trait Registered: Send + Sync {
    /// Ends the connection (idempotent); Python is told.
    fn close(&self, reason: Option<String>);
    /// Wakes its waiting loops (the proxy stops).
    fn wake(&self);
    /// The answer of a slot (prefixed frame or none); `throttle` mutes after it.
    fn settle(&self, slot: u64, data: Option<Vec<u8>>, throttle: i32);
    /// Sends the request of a Python slot (frame without prefix) to the broker.
    fn python_forward(&self, slot: u64, frame: &[u8]) -> Result<(), String>;
    /// The principal used by the native quota paths.
    fn set_user(&self, user: &str);
}

/// Opens a listener's accept loop on the runtime (`listen::spawn_accept`).
pub type SpawnAccept = fn(&Arc<Shared>, StdListener, i32) -> std::io::Result<()>;

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
    pub conns: Mutex<HashMap<u64, Arc<dyn Registered>>>,
    pub accepted: Mutex<HashMap<i32, u64>>,
    pub counters: Counters,
    pub log: Mutex<Vec<LogRow>>,
    pub next_conn: AtomicU64,
    pub stopping: AtomicBool,
    /// Wakes every connection's request reader when the proxy stops.
    pub stop: Notify,
    pub listeners: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    spawn_accept: SpawnAccept,
}

pub fn bind(host: &str, port: u16) -> std::io::Result<StdListener> {
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
        spawn_accept: SpawnAccept,
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
            spawn_accept,
        })
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
        (self.spawn_accept)(self, l, node)?;
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

    /// The broker a listener's connections go to (`-1`: the bootstrap).
    pub fn upstream(&self, node: i32) -> Option<(String, u16)> {
        if node < 0 {
            return Some(self.cfg.bootstrap.clone());
        }
        self.brokers
            .lock()
            .unwrap()
            .get(&node)
            .map(|e| e.upstream.clone())
    }

    pub fn conn(&self, id: u64) -> Option<Arc<dyn Registered>> {
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
        let conns: Vec<Arc<dyn Registered>> = self.conns.lock().unwrap().values().cloned().collect();
        for conn in conns {
            conn.close(None);
        }
    }
}
