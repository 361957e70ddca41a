//! `kquota._kquota.ProxyDataPlane`: the proxy's native data plane (`kquota-proxy`, on its own
//! tokio runtime) driven from `kquota.proxy.server`. Python is reached through a bridge object
//! whose methods only hand work to its event loop; every blocking call here releases the GIL,
//! since the runtime's threads take it to call the bridge.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kquota_proxy::trusted_sources::TrustedSources;
use kquota_proxy::{ProxyConfig, Registered, Shared};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{invalid_argument, PyQuotaResult};
use crate::kernel::PyQuotaKernel;
use crate::proxy_bridge::PyBridge;
use crate::proxy_rows::{log_tuples, shadow_kernel, shadow_tuples, LogTuple, ShadowTuple};

/// Client TLS handshakes under way at most, unless `max_client_sockets` is larger.
const DEFAULT_MAX_HANDSHAKES: usize = 1024;

struct Running {
    rt: tokio::runtime::Runtime,
    shared: Arc<Shared>,
}

/// The proxy's native data plane: sockets, frames, ordering, muting and the Produce/Fetch
/// quota paths on a tokio runtime; Python handles the APIs listed in ``python_keys``.
#[pyclass(frozen, module = "kquota._kquota", name = "ProxyDataPlane")]
pub struct PyProxyDataPlane {
    cfg: ProxyConfig,
    threads: usize,
    kernel: Arc<quota_core::QuotaKernel>,
    bridge: Arc<PyBridge>,
    running: Mutex<Option<Running>>,
}

fn positive(v: i64, what: &str) -> PyQuotaResult<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| invalid_argument(format!("{what} must be positive, got {v}")))
}

impl PyProxyDataPlane {
    fn shared(&self) -> Option<Arc<Shared>> {
        self.running
            .lock()
            .unwrap()
            .as_ref()
            .map(|r| Arc::clone(&r.shared))
    }

    fn conn(&self, conn_id: u64) -> Option<Arc<dyn Registered>> {
        self.shared()?.conn(conn_id)
    }
}

#[pymethods]
impl PyProxyDataPlane {
    #[new]
    #[pyo3(signature = (
        kernel, bridge, *, bootstrap, listen_host, listen_port, advertised_host, flexible_from,
        throttle_first, python_keys, exempt_keys, max_frame_bytes, max_client_sockets, max_inflight,
        quota_window_ms, request_log, threads=1, drain_seconds=5.0, proxy_protocol=false,
        proxy_protocol_timeout_ms=10000, listener_tls=None, upstream_tls=None, max_tls_handshakes=None,
        proxy_protocol_trusted_sources=None, sasl_listener=false, sasl_max_receive_size=524288,
        max_inspected_request_bytes=1048576, connections_max_idle_ms=600000, shadow=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        kernel: &Bound<'_, PyQuotaKernel>,
        bridge: Py<PyAny>,
        bootstrap: (String, u16),
        listen_host: String,
        listen_port: u16,
        advertised_host: String,
        flexible_from: Vec<i64>,
        throttle_first: Vec<i64>,
        python_keys: Vec<i64>,
        exempt_keys: Vec<i64>,
        max_frame_bytes: i64,
        max_client_sockets: i64,
        max_inflight: i64,
        quota_window_ms: i64,
        request_log: bool,
        threads: i64,
        drain_seconds: f64,
        proxy_protocol: bool,
        proxy_protocol_timeout_ms: i64,
        listener_tls: Option<HashMap<String, String>>,
        upstream_tls: Option<HashMap<String, String>>,
        max_tls_handshakes: Option<i64>,
        proxy_protocol_trusted_sources: Option<String>,
        sasl_listener: bool,
        sasl_max_receive_size: i64,
        max_inspected_request_bytes: i64,
        connections_max_idle_ms: i64,
        shadow: Option<&Bound<'_, PyQuotaKernel>>,
    ) -> PyQuotaResult<Self> {
        if !(drain_seconds.is_finite() && drain_seconds >= 0.0) {
            return Err(invalid_argument(format!(
                "drain_seconds must be >= 0, got {drain_seconds}"
            )));
        }
        let threads = positive(threads, "threads")?;
        if threads > 64 {
            return Err(invalid_argument(format!(
                "threads must be at most 64, got {threads}"
            )));
        }
        let tables = crate::proxy_tables::api_tables(
            &flexible_from,
            &throttle_first,
            &python_keys,
            &exempt_keys,
        )?;
        let max_client_sockets = positive(max_client_sockets, "kquota.proxy.max.client.sockets")?;
        // Handshakes under way are bounded apart from the client sockets (they take no place of
        // the descriptor guard, so clients that never finish one cannot take the places of others).
        let max_handshakes = match max_tls_handshakes {
            Some(n) => positive(n, "max_tls_handshakes")?,
            None => max_client_sockets.max(DEFAULT_MAX_HANDSHAKES),
        };
        let security = crate::tls::security(listener_tls, upstream_tls, max_handshakes)?;
        let trusted = match proxy_protocol_trusted_sources.as_deref().map(str::trim) {
            None | Some("") if proxy_protocol => {
                return Err(invalid_argument(
                    "kquota.proxy.protocol.enable=true needs kquota.proxy.protocol.trusted.sources \
                     (the CIDR blocks of the balancers whose PROXY headers are believed)",
                ))
            }
            None | Some("") => TrustedSources::default(),
            Some(text) => TrustedSources::parse(text)
                .map_err(|e| invalid_argument(format!("kquota.proxy.protocol.trusted.sources: {e}")))?,
        };
        let cfg = ProxyConfig {
            tables,
            bootstrap,
            listen_host,
            listen_port,
            advertised_host,
            max_frame_bytes: positive(max_frame_bytes, "max_frame_bytes")?,
            max_client_sockets,
            max_inflight: positive(max_inflight, "max_inflight")?,
            quota_window_ms: positive(quota_window_ms, "quota_window_ms")? as u64,
            request_log,
            drain: Duration::from_secs_f64(drain_seconds),
            proxy_protocol,
            proxy_protocol_timeout: Duration::from_millis(positive(
                proxy_protocol_timeout_ms,
                "proxy_protocol_timeout_ms",
            )? as u64),
            security,
            own_topics: Arc::default(),
            topic_names: Arc::default(),
            proxy_protocol_trusted: trusted,
            sasl_listener,
            sasl_max_receive_bytes: positive(sasl_max_receive_size, "sasl.server.max.receive.size")?,
            python_max_frame_bytes: positive(
                max_inspected_request_bytes,
                "kquota.proxy.inspected.request.max.bytes",
            )?,
            max_idle: Duration::from_millis(positive(connections_max_idle_ms, "connections.max.idle.ms")? as u64),
            shadow: shadow_kernel(&kernel.get().kernel, shadow.map(|s| &s.get().kernel))?,
        };
        Ok(PyProxyDataPlane {
            cfg,
            threads,
            kernel: Arc::clone(&kernel.get().kernel),
            bridge: Arc::new(PyBridge { obj: bridge }),
            running: Mutex::new(None),
        })
    }

    /// Binds the bootstrap listener and starts the runtime; returns the bound port.
    fn start(&self, py: Python<'_>) -> PyResult<u16> {
        let mut running = self.running.lock().unwrap();
        if running.is_some() {
            return Err(invalid_argument("the data plane is already started").into());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.threads)
            .thread_name("kquota-proxy")
            .enable_all()
            .build()
            .map_err(|e| PyOSError::new_err(format!("cannot start the proxy runtime: {e}")))?;
        let cfg = self.cfg.clone();
        let (kernel, bridge, handle) = (Arc::clone(&self.kernel), self.bridge.clone(), rt.handle().clone());
        let (shared, port) = py
            .detach(|| kquota_proxy::listen::start(cfg, kernel, bridge, handle))
            .map_err(|e| {
                PyOSError::new_err(format!(
                    "cannot listen on {}:{}: {e}",
                    self.cfg.listen_host, self.cfg.listen_port
                ))
            })?;
        *running = Some(Running { rt, shared });
        Ok(port)
    }

    /// The proxy port standing for broker ``node_id`` now at ``host:port`` (listener opened once).
    fn broker_port(&self, py: Python<'_>, node_id: i32, host: String, port: u16) -> PyResult<u16> {
        let shared = self
            .shared()
            .ok_or_else(|| invalid_argument("the data plane is not running"))?;
        py.detach(|| shared.broker_port(node_id, &host, port))
            .map_err(|e| PyOSError::new_err(format!("broker {node_id}: cannot listen: {e}")))
    }

    /// Sends the request of a Python slot to the broker; its response comes to ``on_response``.
    fn forward(&self, conn_id: u64, slot: u64, frame: &[u8]) -> PyQuotaResult<()> {
        if let Some(conn) = self.conn(conn_id) {
            conn.python_forward(slot, frame).map_err(invalid_argument)?;
        }
        Ok(())
    }

    /// Closes the proxy's own topics to clients: ``names`` (given once; the same names again
    /// change nothing) and the topic ``ids`` learned so far (16 bytes each; more may be added
    /// at any time, before or after ``start``).
    #[pyo3(signature = (names, ids=Vec::new()))]
    fn protect_topics(&self, names: Vec<String>, ids: Vec<Vec<u8>>) -> PyQuotaResult<()> {
        let own = &self.cfg.own_topics;
        own.set_names(&names).map_err(invalid_argument)?;
        for id in &ids {
            own.add_id(id).map_err(invalid_argument)?;
        }
        Ok(())
    }

    /// Teaches the Fetch topic quotas each ``(topic id, name)`` of a Metadata response (bounded,
    /// see kquota-proxy's topic_names.rs); returns how many ids are known now.
    fn learn_topic_ids(&self, pairs: Vec<(Vec<u8>, String)>) -> usize {
        let names = &self.cfg.topic_names;
        pairs.iter().for_each(|(id, name)| {
            names.learn(id, name);
        });
        names.len()
    }

    /// The response ``frame`` (size prefix included) with its ``ThrottleTimeMs`` raised to
    /// ``throttle_ms`` if lower, as the native plane raises the responses it relays: only a
    /// response version beginning with the field is changed. ``ValueError`` for a frame too
    /// short to hold its header and the field.
    fn raise_throttle<'py>(
        &self,
        py: Python<'py>,
        frame: &[u8],
        api_key: i16,
        api_version: i16,
        throttle_ms: i32,
    ) -> PyQuotaResult<Bound<'py, PyBytes>> {
        let mut out = frame.to_vec();
        let tables = &self.cfg.tables;
        kquota_proxy::header::raise_response_throttle(&mut out, tables, api_key, api_version, throttle_ms)
            .map_err(|e| invalid_argument(e.to_string()))?;
        Ok(PyBytes::new(py, &out))
    }

    /// The answer of a slot (a prefixed frame, or ``None``); ``throttle_ms`` mutes after it.
    #[pyo3(signature = (conn_id, slot, data, throttle_ms))]
    fn settle(&self, conn_id: u64, slot: u64, data: Option<&[u8]>, throttle_ms: i32) {
        if let Some(conn) = self.conn(conn_id) {
            conn.settle(slot, data.map(<[u8]>::to_vec), throttle_ms);
        }
    }

    /// The principal of a connection once the broker has completed its SASL exchange, used by
    /// the native quota paths; on a SASL listener this also ends the connection's
    /// pre-authentication bounds (call it before the exchange's last answer is settled).
    fn set_user(&self, conn_id: u64, user: &str) -> PyQuotaResult<()> {
        quota_core::check_name("user", user)?;
        if let Some(shared) = self.shared() {
            if let Some(conn) = shared.conn(conn_id) {
                conn.set_user(user);
            }
            shared.authenticated(conn_id);
        }
        Ok(())
    }

    /// The principal of a connection now (a TLS client's mapped certificate subject, SASL's
    /// user once authenticated, else ``ANONYMOUS``); ``None`` once closed.
    fn user(&self, conn_id: u64) -> Option<String> {
        self.conn(conn_id).map(|c| c.user())
    }

    /// Closes one connection (e.g. a frame Python could not parse).
    #[pyo3(signature = (conn_id, reason=None))]
    fn close_connection(&self, py: Python<'_>, conn_id: u64, reason: Option<String>) {
        if let Some(conn) = self.conn(conn_id) {
            py.detach(|| conn.close(reason));
        }
    }

    /// Stops accepting connections and reading requests; owed answers still go out.
    fn stop_reading(&self, py: Python<'_>) {
        if let Some(shared) = self.shared() {
            py.detach(|| shared.begin_stop());
        }
    }

    /// Stops: owed answers get up to ``drain_seconds``, then every connection is closed.
    fn close(&self, py: Python<'_>, drain_seconds: f64) -> PyQuotaResult<()> {
        if !(drain_seconds.is_finite() && drain_seconds >= 0.0) {
            return Err(invalid_argument(format!(
                "drain_seconds must be >= 0, got {drain_seconds}"
            )));
        }
        let Some(running) = self.running.lock().unwrap().take() else {
            return Ok(());
        };
        py.detach(move || {
            let shared = running.shared;
            shared.begin_stop();
            let deadline = Instant::now() + Duration::from_secs_f64(drain_seconds);
            while !shared.conns.lock().unwrap().is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            shared.close_all();
            running.rt.shutdown_timeout(Duration::from_secs(1));
        });
        Ok(())
    }

    /// Counters and maps: connections, refused_client_sockets, streamed_requests,
    /// streamed_responses, accepted, broker_ports, brokers, request_log_dropped,
    /// proxy_header_refused, proxy_protocol_untrusted, idle_closed, preauth_refused,
    /// accept_delayed, producer_waits, and TLS: client_tls_failures and
    /// broker_tls_failures (cause -> count), refused_tls_handshakes.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        use std::sync::atomic::Ordering::Relaxed;
        let d = PyDict::new(py);
        let accepted = PyDict::new(py);
        let ports = PyDict::new(py);
        let brokers = PyDict::new(py);
        let shared = self.shared();
        let (mut conns, mut refused, mut sreq, mut sresp, mut dropped) = (0usize, 0u64, 0u64, 0u64, 0u64);
        let (mut header_refused, mut delayed, mut producer_waits) = (0u64, 0u64, 0u64);
        let (mut untrusted, mut idle_closed, mut preauth_refused) = (0u64, 0u64, 0u64);
        if let Some(s) = &shared {
            conns = s.conns.lock().unwrap().len();
            refused = s.counters.sockets_refused.load(Relaxed);
            sreq = s.counters.streamed_requests.load(Relaxed);
            sresp = s.counters.streamed_responses.load(Relaxed);
            dropped = s.counters.log_dropped.load(Relaxed);
            header_refused = s.counters.proxy_header_refused.load(Relaxed);
            delayed = s.counters.accept_delayed.load(Relaxed);
            producer_waits = s.counters.producer_waits.load(Relaxed);
            untrusted = s.counters.proxy_protocol_untrusted.load(Relaxed);
            idle_closed = s.counters.idle_closed.load(Relaxed);
            preauth_refused = s.counters.preauth_refused.load(Relaxed);
            for (node, n) in s.accepted.lock().unwrap().iter() {
                accepted.set_item(node, n)?;
            }
            for (node, e) in s.brokers.lock().unwrap().iter() {
                ports.set_item(node, e.port)?;
                brokers.set_item(node, (e.upstream.0.as_str(), e.upstream.1))?;
            }
        }
        d.set_item("connections", conns)?;
        d.set_item("refused_client_sockets", refused)?;
        d.set_item("streamed_requests", sreq)?;
        d.set_item("streamed_responses", sresp)?;
        d.set_item("accepted", accepted)?;
        d.set_item("broker_ports", ports)?;
        d.set_item("brokers", brokers)?;
        d.set_item("request_log_dropped", dropped)?;
        d.set_item("proxy_header_refused", header_refused)?;
        d.set_item("accept_delayed", delayed)?;
        d.set_item("producer_waits", producer_waits)?;
        d.set_item("proxy_protocol_untrusted", untrusted)?;
        d.set_item("idle_closed", idle_closed)?;
        d.set_item("preauth_refused", preauth_refused)?;
        let security = &self.cfg.security;
        let client_failures = PyDict::new(py);
        let broker_failures = PyDict::new(py);
        for (cause, n) in security.client_failures.counts() {
            client_failures.set_item(cause, n)?;
        }
        for (cause, n) in security.broker_failures.counts() {
            broker_failures.set_item(cause, n)?;
        }
        d.set_item("client_tls_failures", client_failures)?;
        d.set_item("broker_tls_failures", broker_failures)?;
        d.set_item("refused_tls_handshakes", security.refused_handshakes.load(Relaxed))?;
        Ok(d)
    }

    /// Request-log rows of the native paths since the last call: ``(ts_ms, user, client_id,
    /// quota_type value, value, throttle_time_ms, shadow_throttle_time_ms, shadow_delayed_bytes,
    /// topic)``, the shadow's ``None`` without a shadow configuration, ``topic`` ``None`` on a
    /// request's own row.
    fn take_request_log(&self) -> Vec<LogTuple> {
        self.shared().map_or_else(Vec::new, |s| log_tuples(s.take_log()))
    }

    /// The shadow configuration's totals since the plane was made, per entity (raw user, raw
    /// client id; both ``None`` for the entities beyond the bound, summed) and quota type value:
    /// ``(user, client_id, quota_type value, would-be throttle time ms, would-be delayed bytes)``.
    /// Empty without a shadow configuration.
    fn shadow_totals(&self) -> Vec<ShadowTuple> {
        self.cfg.shadow.as_deref().map_or_else(Vec::new, shadow_tuples)
    }
}

impl Drop for PyProxyDataPlane {
    fn drop(&mut self) {
        if let Some(running) = self.running.lock().unwrap().take() {
            running.shared.begin_stop();
            running.shared.close_all();
            running.rt.shutdown_background();
        }
    }
}
