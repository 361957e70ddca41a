//! `kquota._kquota`: the PyO3 face of `quota-core`. Argument conversion and error mapping only;
//! every rule lives in the core crate.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use quota_core::{
    ClientHandle as CoreHandle, ClientQuotaType as CoreType, EntityName, KernelConfig, QuotaChange,
    QuotaEntity, QuotaKernel as CoreKernel, WindowSpec,
};

mod args;
mod batch;
mod callback;
mod errors;
mod exposition;
mod fast;
mod metrics;
mod name_cache;
mod names;
mod pending;
mod quota_type;

use args::{ms, Int, Real};
use errors::to_py;
use names::Name;
use quota_type::QuotaTypeArg;

/// One side of an entity as passed by the Python layer: 0 = absent, 1 = `<default>`, 2 = named.
fn entity_name(kind: u8, name: String) -> PyResult<Option<EntityName>> {
    match kind {
        0 => Ok(None),
        1 => Ok(Some(EntityName::Default)),
        2 => Ok(Some(EntityName::Name(name))),
        k => Err(PyValueError::new_err(format!("bad entity kind {k}"))),
    }
}

fn entity_parts(name: &Option<EntityName>) -> (u8, &str) {
    match name {
        None => (0, ""),
        Some(EntityName::Default) => (1, ""),
        Some(EntityName::Name(n)) => (2, n.as_str()),
    }
}

fn tags_dict<'py>(py: Python<'py>, tags: (String, String)) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("user", tags.0)?;
    d.set_item("client-id", tags.1)?;
    Ok(d)
}

fn invalid(msg: String) -> PyErr {
    to_py(quota_core::QuotaError::InvalidArgument(msg))
}

/// A lifecycle duration in seconds as whole ms: finite, at least 1 ms, at most about 100 years.
fn lifecycle_arg(name: &str, seconds: f64) -> PyResult<i64> {
    if seconds.is_finite() && (0.001..=3.2e9).contains(&seconds) {
        Ok((seconds * 1000.0).round() as i64)
    } else {
        Err(invalid(format!(
            "{name} must be a number of seconds from 0.001 to 3.2e9, got {seconds}"
        )))
    }
}

/// `(user_kind, user, client_kind, client, {key: value})` as `_describe` returns it.
type DescribedEntity<'py> = (u8, String, u8, String, Bound<'py, PyDict>);

/// The native quota kernel. `kquota.QuotaManager` subclasses it and adds the configuration API.
#[pyclass(subclass, frozen, module = "kquota._kquota", name = "QuotaKernel")]
pub struct PyQuotaKernel {
    kernel: Arc<CoreKernel>,
    names: name_cache::NameCache,
    /// The background sensor-expiry thread (see `metrics.rs`).
    expiry: std::sync::Mutex<Option<quota_core::ExpiryTask>>,
}

#[pymethods]
impl PyQuotaKernel {
    #[new]
    #[pyo3(signature = (
        window_num=Int(11), window_size_seconds=Int(1), num_io_threads=Int(8), num_network_threads=Int(3),
        producer_default=None, consumer_default=None, metrics_num_samples=Int(2),
        metrics_sample_window_ms=Int(30_000), controller_window_num=Int(11),
        controller_window_size_seconds=Int(1), sensor_expiry_seconds=Real(3600.0), max_sensors=None,
        expiry_interval_seconds=Some(Real(30.0)), max_name_bytes=None, **python_only
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        window_num: Int,
        window_size_seconds: Int,
        num_io_threads: Int,
        num_network_threads: Int,
        producer_default: Option<Real>,
        consumer_default: Option<Real>,
        metrics_num_samples: Int,
        metrics_sample_window_ms: Int,
        controller_window_num: Int,
        controller_window_size_seconds: Int,
        sensor_expiry_seconds: Real,
        max_sensors: Option<Int>,
        expiry_interval_seconds: Option<Real>,
        max_name_bytes: Option<Int>,
        python_only: Option<Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        // Arguments such as `callback` are handled by the Python subclass's `__init__`, whose
        // fixed signature rejects unknown names.
        let _ = python_only;
        let (window_num, window_size_seconds, num_io_threads, num_network_threads) =
            (window_num.0, window_size_seconds.0, num_io_threads.0, num_network_threads.0);
        let (metrics_num_samples, metrics_sample_window_ms) = (metrics_num_samples.0, metrics_sample_window_ms.0);
        let (controller_window_num, controller_window_size_seconds) =
            (controller_window_num.0, controller_window_size_seconds.0);
        let (producer_default, consumer_default) = (producer_default.map(|v| v.0), consumer_default.map(|v| v.0));
        let sensor_expiry_seconds = sensor_expiry_seconds.0;
        let expiry_interval_seconds = expiry_interval_seconds.map(|v| v.0);
        let max_sensors = max_sensors.map(|v| v.0);
        let thread_count = |name: &str, v: i64| -> PyResult<u32> {
            if (1..=100_000).contains(&v) {
                Ok(v as u32)
            } else {
                Err(to_py(quota_core::QuotaError::InvalidArgument(format!(
                    "{name} must be an integer from 1 to 100000, got {v}"
                ))))
            }
        };
        let settings = KernelConfig {
            window: WindowSpec::new(window_num, window_size_seconds).map_err(to_py)?,
            num_io_threads: thread_count("num_io_threads", num_io_threads)?,
            num_network_threads: thread_count("num_network_threads", num_network_threads)?,
            producer_default,
            consumer_default,
            metrics_window: WindowSpec::from_millis(metrics_num_samples, metrics_sample_window_ms)
                .map_err(to_py)?,
            controller_window: WindowSpec::new(controller_window_num, controller_window_size_seconds)
                .map_err(|e| match e {
                    quota_core::QuotaError::InvalidArgument(m) => quota_core::QuotaError::InvalidArgument(
                        m.replace("window_num", "controller_window_num")
                            .replace("window_size_seconds", "controller_window_size_seconds"),
                    ),
                    other => other,
                })
                .map_err(to_py)?,
            sensor_expiry_ms: lifecycle_arg("sensor_expiry_seconds", sensor_expiry_seconds)?,
            max_sensors: match max_sensors {
                None => quota_core::expiry::DEFAULT_MAX_SENSORS,
                Some(n) if n >= 1 => n as usize,
                Some(n) => return Err(invalid(format!("max_sensors must be >= 1 or None, got {n}"))),
            },
            max_name_bytes: match max_name_bytes.map(|v| v.0) {
                None => quota_core::budget::DEFAULT_MAX_NAME_BYTES_HELD,
                Some(n) if n >= 1 => n as usize,
                Some(n) => return Err(invalid(format!("max_name_bytes must be >= 1 or None, got {n}"))),
            },
        };
        let interval = expiry_interval_seconds
            .map(|s| lifecycle_arg("expiry_interval_seconds", s))
            .transpose()?;
        let kernel = PyQuotaKernel {
            kernel: Arc::new(CoreKernel::new(settings).map_err(to_py)?),
            names: name_cache::NameCache::default(),
            expiry: std::sync::Mutex::new(None),
        };
        if let Some(ms) = interval {
            metrics::start_expiry(&kernel, ms as f64 / 1000.0)?;
        }
        Ok(kernel)
    }

    /// ``metrics.num.samples``: samples of the quota-less rates (``mutation-rate``,
    /// ``exempt-request-time``).
    #[getter]
    fn metrics_num_samples(&self) -> u32 {
        self.kernel.settings().metrics_window.samples
    }

    /// ``controller.quota.window.num``: samples of the controller-mutation quota window.
    #[getter]
    fn controller_window_num(&self) -> u32 {
        self.kernel.settings().controller_window.samples
    }

    /// ``controller.quota.window.size.seconds``.
    #[getter]
    fn controller_window_size_seconds(&self) -> i64 {
        self.kernel.settings().controller_window.window_ms / 1000
    }

    /// ``metrics.sample.window.ms``.
    #[getter]
    fn metrics_sample_window_ms(&self) -> i64 {
        self.kernel.settings().metrics_window.window_ms
    }

    /// ``quota.window.num``.
    #[getter]
    fn window_num(&self) -> u32 {
        self.kernel.window().samples
    }

    /// ``quota.window.size.seconds``.
    #[getter]
    fn window_size_seconds(&self) -> i64 {
        self.kernel.window().window_ms / 1000
    }

    #[getter]
    fn num_io_threads(&self) -> u32 {
        self.kernel.settings().num_io_threads
    }

    #[getter]
    fn num_network_threads(&self) -> u32 {
        self.kernel.settings().num_network_threads
    }

    #[getter]
    fn producer_default(&self) -> Option<f64> {
        self.kernel.settings().producer_default
    }

    #[getter]
    fn consumer_default(&self) -> Option<f64> {
        self.kernel.settings().consumer_default
    }

    /// Applies normalized changes ``(user_kind, user, client_kind, client, key, value)``
    /// atomically; the public, validating entry point is ``QuotaManager.alter_client_quotas``.
    #[pyo3(signature = (changes, validate_only=false))]
    fn _alter(
        &self,
        changes: Vec<(u8, String, u8, String, String, Option<f64>)>,
        validate_only: bool,
    ) -> PyResult<()> {
        let mut out = Vec::with_capacity(changes.len());
        for (uk, u, ck, c, key, value) in changes {
            let entity = QuotaEntity {
                user: entity_name(uk, u)?,
                client_id: entity_name(ck, c)?,
            };
            let quota_type = CoreType::from_config_key(&key)
                .ok_or_else(|| PyValueError::new_err(format!("unknown quota config key {key:?}")))?;
            out.push(QuotaChange {
                entity,
                quota_type,
                value,
            });
        }
        self.kernel.alter(&out, validate_only).map_err(to_py)
    }

    /// Configured entities as ``(user_kind, user, client_kind, client, {key: value})``.
    fn _describe<'py>(&self, py: Python<'py>) -> PyResult<Vec<DescribedEntity<'py>>> {
        self.kernel
            .describe()
            .into_iter()
            .map(|(e, kv)| {
                let (uk, u) = entity_parts(&e.user);
                let (ck, c) = entity_parts(&e.client_id);
                let d = PyDict::new(py);
                for (t, v) in kv {
                    d.set_item(t.config_key(), v)?;
                }
                Ok((uk, u.to_owned(), ck, c.to_owned(), d))
            })
            .collect()
    }

    /// Records ``value`` (bytes for PRODUCE/FETCH) and returns the throttle in ms (0 = none).
    #[pyo3(signature = (quota_type, user, client_id, value, now_ms=None))]
    fn record_and_get_throttle_time_ms(
        &self,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
        value: Real,
        now_ms: Option<Int>,
    ) -> PyResult<i32> {
        self.kernel
            .record_and_get_throttle_time_ms(quota_type.0, &user, &client_id, value.0, ms(now_ms))
            .map_err(to_py)
    }

    /// Records ``value`` without checking the quota.
    #[pyo3(signature = (quota_type, user, client_id, value, now_ms=None))]
    fn record_no_throttle(
        &self,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
        value: Real,
        now_ms: Option<Int>,
    ) -> PyResult<()> {
        self.kernel
            .record_no_throttle(quota_type.0, &user, &client_id, value.0, ms(now_ms))
            .map_err(to_py)
    }

    /// Takes back ``value`` recorded earlier (Kafka's ``unrecordQuotaSensor``).
    #[pyo3(signature = (quota_type, user, client_id, value, now_ms=None))]
    fn unrecord(
        &self,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
        value: Real,
        now_ms: Option<Int>,
    ) -> PyResult<()> {
        self.kernel
            .unrecord(quota_type.0, &user, &client_id, value.0, ms(now_ms))
            .map_err(to_py)
    }

    /// The metric tags (``{"user": ..., "client-id": ...}``) the request is recorded under.
    fn quota_metric_tags<'py>(
        &self,
        py: Python<'py>,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
    ) -> PyResult<Bound<'py, PyDict>> {
        tags_dict(py, self.kernel.quota_metric_tags(quota_type.0, &user, &client_id))
    }

    /// The limit that applies, or ``None`` when unlimited.
    fn quota_limit(&self, quota_type: QuotaTypeArg, user: Name<'_>, client_id: Name<'_>) -> Option<f64> {
        self.kernel.quota_limit(quota_type.0, &user, &client_id)
    }

    /// ``limit * (window_num - 1) * window_size_seconds``; ``math.inf`` when unlimited.
    fn max_value_in_quota_window(
        &self,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
    ) -> f64 {
        self.kernel
            .max_value_in_quota_window(quota_type.0, &user, &client_id)
    }

    /// The sensor's current rate as Kafka's metric reports it (0.0 when there is no sensor).
    #[pyo3(signature = (quota_type, user, client_id, now_ms=None))]
    fn measured_rate(
        &self,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
        now_ms: Option<Int>,
    ) -> PyResult<f64> {
        self.kernel
            .measured_rate(quota_type.0, &user, &client_id, ms(now_ms))
            .map_err(to_py)
    }

    /// Records network-thread time (KIP-124) without a check; it weighs on later requests.
    #[pyo3(signature = (user, client_id, nanos, now_ms=None))]
    fn record_network_thread_time(
        &self,
        user: Name<'_>,
        client_id: Name<'_>,
        nanos: Real,
        now_ms: Option<Int>,
    ) -> PyResult<()> {
        self.kernel
            .record_network_thread_time(&user, &client_id, nanos.0, ms(now_ms))
            .map_err(to_py)
    }

    /// Records the thread time of a request exempt from quotas into the shared
    /// ``exempt-request-time`` sensor (only while request quotas exist, as in Kafka).
    #[pyo3(signature = (nanos, now_ms=None))]
    fn record_exempt_request_time(&self, nanos: Real, now_ms: Option<Int>) -> PyResult<()> {
        self.kernel
            .record_exempt_request_time(nanos.0, ms(now_ms))
            .map_err(to_py)
    }

    /// The ``exempt-request-time`` rate in percent (0.0 before any exempt time was recorded).
    #[pyo3(signature = (now_ms=None))]
    fn exempt_request_rate(&self, now_ms: Option<Int>) -> PyResult<f64> {
        self.kernel.exempt_request_rate(ms(now_ms)).map_err(to_py)
    }

    /// Tokens left in the controller-mutation bucket (Kafka's ``tokens`` metric); ``None``
    /// while there is no sensor or no quota.
    #[pyo3(signature = (user, client_id, now_ms=None))]
    fn controller_mutation_tokens(
        &self,
        user: Name<'_>,
        client_id: Name<'_>,
        now_ms: Option<Int>,
    ) -> PyResult<Option<f64>> {
        self.kernel
            .controller_mutation_tokens(&user, &client_id, ms(now_ms))
            .map_err(to_py)
    }

    /// A per-connection handle for ``(user, client_id)``; create it once per connection.
    fn client(&self, user: Name<'_>, client_id: Name<'_>) -> PyResult<PyClientHandle> {
        quota_core::check_name("user", &user).map_err(to_py)?;
        quota_core::check_name("client_id", &client_id).map_err(to_py)?;
        Ok(PyClientHandle {
            inner: CoreHandle::new(Arc::clone(&self.kernel), &user, &client_id),
        })
    }

    /// Closes the kernel: later records and changes raise ``KQuotaError`` (see ``close()``).
    fn _close(&self) {
        self.kernel.close();
    }

    /// ``(bytes of names held, their budget, refused reservations)``.
    fn _name_bytes(&self) -> (usize, usize, u64) {
        (
            self.kernel.name_bytes_held(),
            self.kernel.max_name_bytes(),
            self.kernel.name_bytes_refused(),
        )
    }

    /// Installs the adapter of a Python ``ClientQuotaCallback`` (``None`` restores the built-in
    /// behaviour); see ``kquota.callback``.
    #[pyo3(signature = (adapter))]
    fn _set_callback_adapter(&self, adapter: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let hook = match adapter {
            Some(a) => {
                Some(Box::new(callback::PyCallbackHook::new(a)?) as Box<dyn quota_core::QuotaCallbackHook>)
            }
            None => None,
        };
        self.kernel.set_callback_hook(hook);
        Ok(())
    }

    /// Forgets cached callback limits (and tags, with ``tags=True``) of ``quota_types`` (all
    /// types if ``None``), so the next request asks the callback again.
    #[pyo3(signature = (quota_types=None, tags=true))]
    fn _invalidate(&self, quota_types: Option<Vec<QuotaTypeArg>>, tags: bool) {
        let types: Vec<quota_core::ClientQuotaType> = match quota_types {
            Some(v) => v.into_iter().map(|t| t.0).collect(),
            None => quota_core::ClientQuotaType::ALL.to_vec(),
        };
        self.kernel.invalidate(&types, tags);
    }

    /// Number of live sensors of a quota type.
    fn sensor_count(&self, quota_type: QuotaTypeArg) -> usize {
        self.kernel.sensor_count(quota_type.0)
    }

    /// The named-call cache (diagnostics): ``{"entries", "capacity", "hits"}``.
    fn _name_cache_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (entries, capacity, hits) = self.names.info(py);
        let d = PyDict::new(py);
        d.set_item("entries", entries)?;
        d.set_item("capacity", capacity)?;
        d.set_item("hits", hits)?;
        Ok(d)
    }
}

/// Per-connection handle returned by ``QuotaManager.client(user, client_id)``.
#[pyclass(frozen, module = "kquota._kquota", name = "ClientHandle")]
pub struct PyClientHandle {
    inner: CoreHandle,
}

#[pymethods]
impl PyClientHandle {
    /// The raw principal name.
    #[getter]
    fn user(&self) -> &str {
        self.inner.user()
    }

    /// The raw client-id.
    #[getter]
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    /// Records ``value`` and returns the throttle in ms (0 = none).
    #[pyo3(signature = (quota_type, value, now_ms=None))]
    fn record_and_get_throttle_time_ms(
        &self,
        quota_type: QuotaTypeArg,
        value: Real,
        now_ms: Option<Int>,
    ) -> PyResult<i32> {
        self.inner
            .record_and_get_throttle_time_ms(quota_type.0, value.0, ms(now_ms))
            .map_err(to_py)
    }

    /// Records ``value`` without checking the quota.
    #[pyo3(signature = (quota_type, value, now_ms=None))]
    fn record_no_throttle(&self, quota_type: QuotaTypeArg, value: Real, now_ms: Option<Int>) -> PyResult<()> {
        self.inner
            .record_no_throttle(quota_type.0, value.0, ms(now_ms))
            .map_err(to_py)
    }

    /// Takes back ``value`` recorded earlier.
    #[pyo3(signature = (quota_type, value, now_ms=None))]
    fn unrecord(&self, quota_type: QuotaTypeArg, value: Real, now_ms: Option<Int>) -> PyResult<()> {
        self.inner.unrecord(quota_type.0, value.0, ms(now_ms)).map_err(to_py)
    }

    /// Records network-thread time (KIP-124) without a check.
    #[pyo3(signature = (nanos, now_ms=None))]
    fn record_network_thread_time(&self, nanos: Real, now_ms: Option<Int>) -> PyResult<()> {
        self.inner
            .record_network_thread_time(nanos.0, ms(now_ms))
            .map_err(to_py)
    }

    /// Tokens left in this connection's controller-mutation bucket, ``None`` without a quota.
    #[pyo3(signature = (now_ms=None))]
    fn controller_mutation_tokens(&self, now_ms: Option<Int>) -> PyResult<Option<f64>> {
        self.inner
            .kernel()
            .controller_mutation_tokens(self.inner.user(), self.inner.client_id(), ms(now_ms))
            .map_err(to_py)
    }

    /// The metric tags this connection's requests are recorded under.
    fn quota_metric_tags<'py>(
        &self,
        py: Python<'py>,
        quota_type: QuotaTypeArg,
    ) -> PyResult<Bound<'py, PyDict>> {
        let k = self.inner.kernel();
        let tags = k.quota_metric_tags(quota_type.0, self.inner.user(), self.inner.client_id());
        if k.has_callback_hook() {
            // A callback's own tag map, as `QuotaManager.quota_metric_tags` reports it.
            let decoded = py
                .import("kquota.callback")?
                .call_method1("decode_tags", (tags.0, tags.1))?;
            return Ok(decoded.cast_into::<PyDict>()?);
        }
        tags_dict(py, tags)
    }

    /// The limit that applies, or ``None`` when unlimited.
    fn quota_limit(&self, quota_type: QuotaTypeArg) -> Option<f64> {
        self.inner
            .kernel()
            .quota_limit(quota_type.0, self.inner.user(), self.inner.client_id())
    }

    /// ``limit * (window_num - 1) * window_size_seconds``; ``math.inf`` when unlimited.
    fn max_value_in_quota_window(&self, quota_type: QuotaTypeArg) -> f64 {
        self.inner
            .kernel()
            .max_value_in_quota_window(quota_type.0, self.inner.user(), self.inner.client_id())
    }

    /// The sensor's current rate (0.0 when there is no sensor).
    #[pyo3(signature = (quota_type, now_ms=None))]
    fn measured_rate(&self, quota_type: QuotaTypeArg, now_ms: Option<Int>) -> PyResult<f64> {
        self.inner
            .kernel()
            .measured_rate(quota_type.0, self.inner.user(), self.inner.client_id(), ms(now_ms))
            .map_err(to_py)
    }

    fn __repr__(&self) -> String {
        format!(
            "ClientHandle(user={:?}, client_id={:?})",
            self.inner.user(),
            self.inner.client_id()
        )
    }
}

#[pymodule]
fn _kquota(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quota_type::_quota_types, m)?)?;
    m.add_function(wrap_pyfunction!(quota_type::_quota_type_value, m)?)?;
    m.add_class::<PyQuotaKernel>()?;
    m.add_class::<PyClientHandle>()?;
    m.add("_noop", fast::noop_function(m)?)?;
    m.add_function(wrap_pyfunction!(batch::_replay, m)?)?;
    errors::register(m)?;
    metrics::register(m)?;
    exposition::register(m)?;
    fast::install(m.py())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "__build_profile__",
        if cfg!(debug_assertions) { "dev" } else { "release" },
    )?;
    Ok(())
}
