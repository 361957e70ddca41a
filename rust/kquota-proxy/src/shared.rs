//! What every connection of the data plane shares ([`Shared`]): the configuration, the quota
//! kernel, the bridge to Python, the broker map, the counters and the request log (each in its
//! own module), the registry of open connections, and the proxy's stop.

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use quota_core::QuotaKernel;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::bridge::{Bridge, Registered};
use crate::brokers::Brokers;
use crate::config::ProxyConfig;
use crate::counters::Counters;
use crate::preauth::Authentication;
use crate::producer_gate::ProducerGates;
use crate::request_log::{LogRow, LogValues, RequestLog};

/// Opens a listener's accept loop on the runtime (`listen::spawn_accept`).
pub type SpawnAccept = fn(&Arc<Shared>, StdListener, i32) -> std::io::Result<()>;

pub struct Shared {
    pub cfg: ProxyConfig,
    pub kernel: Arc<QuotaKernel>,
    pub bridge: Arc<dyn Bridge>,
    pub rt: Handle,
    pub brokers: Brokers,
    /// The registry of open connections, by id.
    pub conns: Mutex<HashMap<u64, Arc<dyn Registered>>>,
    /// The authentication state of each session of a SASL listener, by connection id (added
    /// and removed by the session; Python completes it).
    pub authentications: Mutex<HashMap<u64, Arc<Authentication>>>,
    /// Connections accepted, by listener (`-1`: the bootstrap).
    pub accepted: Mutex<HashMap<i32, u64>>,
    pub counters: Counters,
    /// Each producer's mute and one-at-a-time token, shared by its connections.
    pub producers: ProducerGates,
    pub log: RequestLog,
    pub next_conn: AtomicU64,
    pub stopping: AtomicBool,
    /// Wakes every connection's request reader when the proxy stops.
    pub stop: Notify,
    pub listeners: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    spawn_accept: SpawnAccept,
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
            brokers: Brokers::default(),
            conns: Mutex::default(),
            authentications: Mutex::default(),
            accepted: Mutex::default(),
            counters: Counters::default(),
            producers: ProducerGates::default(),
            log: RequestLog::default(),
            next_conn: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            stop: Notify::new(),
            listeners: Mutex::default(),
            spawn_accept,
        })
    }

    /// The proxy port standing for broker `node` now at `host:port` (`Brokers::port`; its
    /// listener's accept loop started here).
    pub fn broker_port(self: &Arc<Self>, node: i32, host: &str, port: u16) -> std::io::Result<u16> {
        self.brokers.port(&self.cfg, node, host, port, |l| {
            (self.spawn_accept)(self, l, node)
        })
    }

    /// The proxy's (host, port) for a broker named in a response (`Brokers::resolve`).
    pub fn resolve(self: &Arc<Self>, node: i32, host: &str, port: i32) -> Result<(String, i32), String> {
        self.brokers.resolve(&self.cfg, node, host, port, |l| {
            (self.spawn_accept)(self, l, node)
        })
    }

    pub fn conn(&self, id: u64) -> Option<Arc<dyn Registered>> {
        self.conns.lock().unwrap().get(&id).cloned()
    }

    /// Python saw connection `id` complete an authentication: its frames are no longer
    /// bounded by `preauth` (a closed connection's is gone: nothing to do).
    pub fn authenticated(&self, id: u64) {
        if let Some(a) = self.authentications.lock().unwrap().get(&id) {
            a.complete();
        }
    }

    /// Adds a row stamped `ts` to the request log, if the proxy keeps one (a full log counts it
    /// dropped).
    pub fn log_request(&self, ts: i64, user: &Arc<str>, client_id: &str, values: LogValues) {
        self.log_row(ts, user, client_id, values, None);
    }

    /// Adds a row (`topic`: `None` for a request's own row, else the topic of a topic row) to
    /// the request log, if the proxy keeps one (a full log counts it dropped).
    pub fn log_row(&self, ts: i64, user: &Arc<str>, client_id: &str, values: LogValues, topic: Option<&str>) {
        if self.cfg.request_log && !self.log.add(ts, user, client_id, values, topic) {
            self.counters.log_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The request-log rows since the last call.
    pub fn take_log(&self) -> Vec<LogRow> {
        self.log.take()
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
