//! The broker map: each broker the cluster names (by node id), the address it is at and the
//! proxy port standing for it, whose listener is opened the first time the broker is named.
//! Every broker address a response carries (Metadata, FindCoordinator and DescribeCluster in
//! Python, NodeEndpoints in `endpoints`) becomes the proxy's through it.

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::sync::{LockResult, Mutex, MutexGuard};

use crate::config::ProxyConfig;

#[derive(Debug, Clone)]
pub struct BrokerEntry {
    pub upstream: (String, u16),
    pub port: u16,
}

/// Node id -> [`BrokerEntry`].
#[derive(Default)]
pub struct Brokers {
    map: Mutex<HashMap<i32, BrokerEntry>>,
}

/// A non-blocking listener on `host:port` (port 0: any free port).
pub fn bind(host: &str, port: u16) -> std::io::Result<StdListener> {
    let l = StdListener::bind((host, port))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

impl Brokers {
    /// The map, locked.
    pub fn lock(&self) -> LockResult<MutexGuard<'_, HashMap<i32, BrokerEntry>>> {
        self.map.lock()
    }

    /// The proxy port standing for broker `node` now at `host:port`: its listener bound once
    /// (the listen port + 1 + node when the listen port is fixed and that port is free, any
    /// port otherwise) and handed to `open`; a later address replaces the upstream.
    pub fn port(
        &self,
        cfg: &ProxyConfig,
        node: i32,
        host: &str,
        port: u16,
        open: impl FnOnce(StdListener) -> std::io::Result<()>,
    ) -> std::io::Result<u16> {
        let mut brokers = self.map.lock().unwrap();
        if let Some(entry) = brokers.get_mut(&node) {
            entry.upstream = (host.to_owned(), port);
            return Ok(entry.port);
        }
        let wanted = if cfg.listen_port == 0 {
            0
        } else {
            u16::try_from(u32::from(cfg.listen_port) + 1 + node.max(0) as u32).unwrap_or(0)
        };
        let l = match bind(&cfg.listen_host, wanted) {
            Ok(l) => l,
            Err(_) if wanted != 0 => bind(&cfg.listen_host, 0)?,
            Err(e) => return Err(e),
        };
        let bound = l.local_addr()?.port();
        open(l)?;
        brokers.insert(
            node,
            BrokerEntry {
                upstream: (host.to_owned(), port),
                port: bound,
            },
        );
        Ok(bound)
    }

    /// The proxy's (host, port) for a broker named in a response (see [`Brokers::port`]).
    pub fn resolve(
        &self,
        cfg: &ProxyConfig,
        node: i32,
        host: &str,
        port: i32,
        open: impl FnOnce(StdListener) -> std::io::Result<()>,
    ) -> Result<(String, i32), String> {
        let port = u16::try_from(port).map_err(|_| format!("broker {node}: port {port} out of range"))?;
        let bound = self
            .port(cfg, node, host, port, open)
            .map_err(|e| format!("broker {node}: cannot listen: {e}"))?;
        Ok((cfg.advertised_host.clone(), i32::from(bound)))
    }

    /// The broker a listener's connections go to (`-1`: the bootstrap).
    pub fn upstream(&self, cfg: &ProxyConfig, node: i32) -> Option<(String, u16)> {
        if node < 0 {
            return Some(cfg.bootstrap.clone());
        }
        self.map.lock().unwrap().get(&node).map(|e| e.upstream.clone())
    }
}
