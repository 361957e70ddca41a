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

mod batch;
mod errors;
mod fast;
mod names;
mod quota_type;

use errors::to_py;
use names::Name;
use quota_type::{PyClientQuotaType, QuotaTypeArg};

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

/// `(user_kind, user, client_kind, client, {key: value})` as `_describe` returns it.
type DescribedEntity<'py> = (u8, String, u8, String, Bound<'py, PyDict>);

/// The native quota kernel. `kquota.QuotaManager` subclasses it and adds the configuration API.
#[pyclass(subclass, frozen, module = "kquota._kquota", name = "QuotaKernel")]
pub struct PyQuotaKernel {
    kernel: Arc<CoreKernel>,
    names: fast::NameCache,
}

#[pymethods]
impl PyQuotaKernel {
    #[new]
    #[pyo3(signature = (
        window_num=11, window_size_seconds=1, num_io_threads=8, num_network_threads=3,
        producer_default=None, consumer_default=None, callback=None, callback_configs=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        window_num: i64,
        window_size_seconds: i64,
        num_io_threads: i64,
        num_network_threads: i64,
        producer_default: Option<f64>,
        consumer_default: Option<f64>,
        callback: Option<Bound<'_, PyAny>>,
        callback_configs: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        // The plugin arguments are handled by the Python subclass.
        let _ = (callback, callback_configs);
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
        };
        Ok(PyQuotaKernel {
            kernel: Arc::new(CoreKernel::new(settings).map_err(to_py)?),
            names: fast::NameCache::default(),
        })
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
        value: f64,
        now_ms: Option<i64>,
    ) -> PyResult<i32> {
        self.kernel
            .record_and_get_throttle_time_ms(quota_type.0, &user, &client_id, value, now_ms)
            .map_err(to_py)
    }

    /// Records ``value`` without checking the quota.
    #[pyo3(signature = (quota_type, user, client_id, value, now_ms=None))]
    fn record_no_throttle(
        &self,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
        value: f64,
        now_ms: Option<i64>,
    ) -> PyResult<()> {
        self.kernel
            .record_no_throttle(quota_type.0, &user, &client_id, value, now_ms)
            .map_err(to_py)
    }

    /// Takes back ``value`` recorded earlier (Kafka's ``unrecordQuotaSensor``).
    #[pyo3(signature = (quota_type, user, client_id, value, now_ms=None))]
    fn unrecord(
        &self,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
        value: f64,
        now_ms: Option<i64>,
    ) -> PyResult<()> {
        self.kernel
            .unrecord(quota_type.0, &user, &client_id, value, now_ms)
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
        now_ms: Option<i64>,
    ) -> PyResult<f64> {
        self.kernel
            .measured_rate(quota_type.0, &user, &client_id, now_ms)
            .map_err(to_py)
    }

    /// A per-connection handle for ``(user, client_id)``; create it once per connection.
    fn client(&self, user: Name<'_>, client_id: Name<'_>) -> PyClientHandle {
        PyClientHandle {
            inner: CoreHandle::new(Arc::clone(&self.kernel), &user, &client_id),
        }
    }

    /// Number of live sensors of a quota type.
    fn sensor_count(&self, quota_type: QuotaTypeArg) -> usize {
        self.kernel.sensor_count(quota_type.0)
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
        value: f64,
        now_ms: Option<i64>,
    ) -> PyResult<i32> {
        self.inner
            .record_and_get_throttle_time_ms(quota_type.0, value, now_ms)
            .map_err(to_py)
    }

    /// Records ``value`` without checking the quota.
    #[pyo3(signature = (quota_type, value, now_ms=None))]
    fn record_no_throttle(&self, quota_type: QuotaTypeArg, value: f64, now_ms: Option<i64>) -> PyResult<()> {
        self.inner
            .record_no_throttle(quota_type.0, value, now_ms)
            .map_err(to_py)
    }

    /// Takes back ``value`` recorded earlier.
    #[pyo3(signature = (quota_type, value, now_ms=None))]
    fn unrecord(&self, quota_type: QuotaTypeArg, value: f64, now_ms: Option<i64>) -> PyResult<()> {
        self.inner.unrecord(quota_type.0, value, now_ms).map_err(to_py)
    }

    /// The metric tags this connection's requests are recorded under.
    fn quota_metric_tags<'py>(
        &self,
        py: Python<'py>,
        quota_type: QuotaTypeArg,
    ) -> PyResult<Bound<'py, PyDict>> {
        let k = self.inner.kernel();
        tags_dict(
            py,
            k.quota_metric_tags(quota_type.0, self.inner.user(), self.inner.client_id()),
        )
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
    fn measured_rate(&self, quota_type: QuotaTypeArg, now_ms: Option<i64>) -> PyResult<f64> {
        self.inner
            .kernel()
            .measured_rate(quota_type.0, self.inner.user(), self.inner.client_id(), now_ms)
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
    m.add_class::<PyClientQuotaType>()?;
    m.add_class::<PyQuotaKernel>()?;
    m.add_class::<PyClientHandle>()?;
    m.add("_noop", fast::noop_function(m)?)?;
    m.add_function(wrap_pyfunction!(batch::_replay, m)?)?;
    errors::register(m)?;
    fast::install(m.py())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "__build_profile__",
        if cfg!(debug_assertions) { "dev" } else { "release" },
    )?;
    Ok(())
}
