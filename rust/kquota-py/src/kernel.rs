//! `kquota._kquota.QuotaKernel`: the native kernel class (`kquota.QuotaManager` subclasses it and
//! adds the configuration API). Argument conversion only; every rule lives in `quota-core`.
//!
//! `record_and_get_throttle_time_ms`, `record_request_time` and `record_controller_mutations`
//! are not here: `fast` installs hand-written entry points for them.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict};
use quota_core::types as d;
use quota_core::{ClientQuotaType as CoreType, QuotaKernel as CoreKernel};

use crate::connections::PyConnectionQuotas;
use crate::entity::{entity_parts, quota_changes, ChangeTuple};
use crate::errors::PyQuotaResult;
use crate::expiry::ExpiryThread;
use crate::exposition::PyPrometheusStream;
use crate::handle::{tags_dict, PyClientHandle};
use crate::metrics_snapshot::PyMetricsSnapshot;
use crate::name_cache::NameCache;
use crate::names::Name;
use crate::numeric_args::{ms, Int, Real};
use crate::quota_type::QuotaTypeArg;
use crate::settings::KernelArgs;
use crate::topic_quotas::PyTopicQuotas;

/// `(user_kind, user, client_kind, client, {key: value})` as `_describe` returns it.
type DescribedEntity<'py> = (u8, String, u8, String, Bound<'py, PyDict>);
type Utilization = (i64, Vec<crate::utilization::Row>, Vec<crate::utilization::Rest>);

/// The native quota kernel. `kquota.QuotaManager` subclasses it and adds the configuration API.
#[pyclass(subclass, frozen, module = "kquota._kquota", name = "QuotaKernel")]
pub struct PyQuotaKernel {
    pub(crate) kernel: Arc<CoreKernel>,
    /// Resolutions of named calls (see `name_cache.rs`).
    pub(crate) names: NameCache,
    expiry: ExpiryThread,
}

#[pymethods]
impl PyQuotaKernel {
    #[new]
    // Kafka's broker defaults, from the one definition in quota-core (`BROKER_DEFAULTS` lists
    // them for Python; `kquota.QuotaManager`'s signature shows their values).
    #[pyo3(signature = (
        window_num=Int(d::DEFAULT_WINDOW_NUM as i64), window_size_seconds=Int(d::DEFAULT_WINDOW_SIZE_SECONDS),
        num_io_threads=Int(d::DEFAULT_NUM_IO_THREADS as i64),
        num_network_threads=Int(d::DEFAULT_NUM_NETWORK_THREADS as i64), producer_default=None,
        consumer_default=None, metrics_num_samples=Int(d::DEFAULT_METRICS_NUM_SAMPLES as i64),
        metrics_sample_window_ms=Int(d::DEFAULT_METRICS_SAMPLE_WINDOW_MS),
        controller_window_num=Int(d::DEFAULT_CONTROLLER_WINDOW_NUM as i64),
        controller_window_size_seconds=Int(d::DEFAULT_CONTROLLER_WINDOW_SIZE_SECONDS),
        sensor_expiry_seconds=Real(quota_core::DEFAULT_SENSOR_EXPIRY_MS as f64 / 1000.0), max_sensors=None,
        expiry_interval_seconds=Some(Real(d::DEFAULT_EXPIRY_INTERVAL_SECONDS)), max_name_bytes=None,
        max_client_ids_per_principal=None, fetch_answer=None, **python_only
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
        max_client_ids_per_principal: Option<Int>,
        fetch_answer: Option<String>,
        python_only: Option<Bound<'_, PyDict>>,
    ) -> PyQuotaResult<Self> {
        // Arguments such as `callback` are handled by the Python subclass's `__init__`, whose
        // fixed signature rejects unknown names.
        let _ = python_only;
        let (settings, interval_ms) = KernelArgs {
            window_num: window_num.0,
            window_size_seconds: window_size_seconds.0,
            num_io_threads: num_io_threads.0,
            num_network_threads: num_network_threads.0,
            producer_default: producer_default.map(|v| v.0),
            consumer_default: consumer_default.map(|v| v.0),
            metrics_num_samples: metrics_num_samples.0,
            metrics_sample_window_ms: metrics_sample_window_ms.0,
            controller_window_num: controller_window_num.0,
            controller_window_size_seconds: controller_window_size_seconds.0,
            sensor_expiry_seconds: sensor_expiry_seconds.0,
            max_sensors: max_sensors.map(|v| v.0),
            expiry_interval_seconds: expiry_interval_seconds.map(|v| v.0),
            max_name_bytes: max_name_bytes.map(|v| v.0),
            max_client_ids_per_principal: max_client_ids_per_principal.map(|v| v.0),
            fetch_answer,
        }
        .into_config()?;
        let kernel = PyQuotaKernel {
            kernel: Arc::new(CoreKernel::new(settings)?),
            names: NameCache::default(),
            expiry: ExpiryThread::default(),
        };
        if let Some(ms) = interval_ms {
            kernel.expiry.start(&kernel.kernel, ms)?;
        }
        Ok(kernel)
    }

    /// ``kquota.fetch.answer``: ``"deliver-large"`` or ``"kafka"``, the rule answering an
    /// over-quota Fetch response.
    #[getter]
    fn fetch_answer(&self) -> &'static str {
        self.kernel.settings().fetch_answer.name()
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
    fn _alter(&self, changes: Vec<ChangeTuple>, validate_only: bool) -> PyQuotaResult<()> {
        let out = quota_changes(changes)?;
        Ok(self.kernel.alter(&out, validate_only)?)
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

    /// Records ``value`` without checking the quota.
    #[pyo3(signature = (quota_type, user, client_id, value, now_ms=None))]
    fn record_no_throttle(
        &self,
        quota_type: QuotaTypeArg,
        user: Name<'_>,
        client_id: Name<'_>,
        value: Real,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<()> {
        Ok(self
            .kernel
            .record_no_throttle(quota_type.0, &user, &client_id, value.0, ms(now_ms))?)
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
    ) -> PyQuotaResult<()> {
        Ok(self
            .kernel
            .unrecord(quota_type.0, &user, &client_id, value.0, ms(now_ms))?)
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
    ) -> PyQuotaResult<f64> {
        Ok(self
            .kernel
            .measured_rate(quota_type.0, &user, &client_id, ms(now_ms))?)
    }

    /// Records network-thread time (KIP-124) without a check; it weighs on later requests.
    #[pyo3(signature = (user, client_id, nanos, now_ms=None))]
    fn record_network_thread_time(
        &self,
        user: Name<'_>,
        client_id: Name<'_>,
        nanos: Real,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<()> {
        Ok(self
            .kernel
            .record_network_thread_time(&user, &client_id, nanos.0, ms(now_ms))?)
    }

    /// Records the thread time of a request exempt from quotas into the shared
    /// ``exempt-request-time`` sensor (only while request quotas exist, as in Kafka).
    #[pyo3(signature = (nanos, now_ms=None))]
    fn record_exempt_request_time(&self, nanos: Real, now_ms: Option<Int>) -> PyQuotaResult<()> {
        Ok(self.kernel.record_exempt_request_time(nanos.0, ms(now_ms))?)
    }

    /// The ``exempt-request-time`` rate in percent (0.0 before any exempt time was recorded).
    #[pyo3(signature = (now_ms=None))]
    fn exempt_request_rate(&self, now_ms: Option<Int>) -> PyQuotaResult<f64> {
        Ok(self.kernel.exempt_request_rate(ms(now_ms))?)
    }

    /// Tokens left in the controller-mutation bucket (Kafka's ``tokens`` metric); ``None``
    /// while there is no sensor or no quota.
    #[pyo3(signature = (user, client_id, now_ms=None))]
    fn controller_mutation_tokens(
        &self,
        user: Name<'_>,
        client_id: Name<'_>,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<Option<f64>> {
        Ok(self
            .kernel
            .controller_mutation_tokens(&user, &client_id, ms(now_ms))?)
    }

    /// A per-connection handle for ``(user, client_id)``; create it once per connection.
    fn client(&self, user: Name<'_>, client_id: Name<'_>) -> PyQuotaResult<PyClientHandle> {
        PyClientHandle::new(&self.kernel, &user, &client_id)
    }

    /// Number of live sensors of a quota type.
    fn sensor_count(&self, quota_type: QuotaTypeArg) -> usize {
        self.kernel.sensor_count(quota_type.0)
    }

    /// ``(principals holding client ids, client ids held, resolutions sent to a principal's
    /// overflow client id)`` of a quota type (``max_client_ids_per_principal``).
    fn _client_ids(&self, quota_type: QuotaTypeArg) -> (usize, usize, u64) {
        self.kernel.client_ids(quota_type.0)
    }

    /// Closes the kernel: later records and changes raise ``KQuotaError`` (see ``close()``).
    fn _close(&self) {
        self.kernel.close();
    }

    /// ``(bytes of names held, their budget, refused reservations)``.
    fn _name_bytes(&self) -> (usize, usize, u64) {
        let k = &self.kernel;
        (k.name_bytes_held(), k.max_name_bytes(), k.name_bytes_refused())
    }

    /// Installs the adapter of a Python ``ClientQuotaCallback`` (``None`` restores the built-in
    /// behaviour); see ``kquota.callback``.
    #[pyo3(signature = (adapter))]
    fn _set_callback_adapter(&self, adapter: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let hook =
            match adapter {
                Some(a) => Some(Box::new(crate::callback::PyCallbackHook::new(a)?)
                    as Box<dyn quota_core::QuotaCallbackHook>),
                None => None,
            };
        self.kernel.set_callback_hook(hook);
        Ok(())
    }

    /// Forgets cached callback limits (and tags, with ``tags=True``) of ``quota_types`` (all
    /// types if ``None``), so the next request asks the callback again.
    #[pyo3(signature = (quota_types=None, tags=true))]
    fn _invalidate(&self, quota_types: Option<Vec<QuotaTypeArg>>, tags: bool) {
        let types: Vec<CoreType> = match quota_types {
            Some(v) => v.into_iter().map(|t| t.0).collect(),
            None => CoreType::ALL.to_vec(),
        };
        self.kernel.invalidate(&types, tags);
    }

    /// Sets this kernel's fleet share of every limit of ``quota_type`` in one step: ``shares``
    /// maps metric tags ``(user, client_id)`` to a fraction in [0, 1], ``default`` is the
    /// fraction of tags not named (1.0 and ``{}``: whole limits, the ``proxy`` scope).
    fn _set_shares(
        &self,
        quota_type: QuotaTypeArg,
        default: f64,
        shares: HashMap<(String, String), f64>,
    ) -> PyQuotaResult<()> {
        let map = quota_core::ShareMap {
            default,
            by_tags: shares,
        };
        Ok(self.kernel.set_shares(quota_type.0, map)?)
    }

    /// ``(default, {(user, client_id): fraction})``: the fleet shares of ``quota_type`` now.
    fn _shares(&self, quota_type: QuotaTypeArg) -> (f64, HashMap<(String, String), f64>) {
        let m = self.kernel.shares(quota_type.0);
        (m.default, m.by_tags)
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

    /// A native copy of every quota metric, built with the GIL released.
    #[pyo3(signature = (now_ms=None))]
    fn _metrics_snapshot(&self, py: Python<'_>, now_ms: Option<Int>) -> PyQuotaResult<PyMetricsSnapshot> {
        let k = Arc::clone(&self.kernel);
        Ok(py.detach(move || k.metrics_snapshot(ms(now_ms)).map(PyMetricsSnapshot::compact))?)
    }

    /// The Prometheus exposition of every metric plus ``extra`` ``(group, name, labels, value)``
    /// rows (labels: ``[(label, value), ...]``),
    /// as a stream of ``bytes`` chunks; ``help`` maps Kafka metric names to HELP texts.
    fn _prometheus_stream(
        &self,
        py: Python<'_>,
        now_ms: Option<Int>,
        extra: Vec<crate::exposition::ExtraRow>,
        help: HashMap<String, String>,
    ) -> PyQuotaResult<PyPrometheusStream> {
        crate::exposition::stream(py, Arc::clone(&self.kernel), ms(now_ms), extra, help)
    }

    /// ``(now_ms, rows, rest)``: every throttled entity's utilization plus the ``max_entities``
    /// highest others, the rest summed per quota type (see ``QuotaManager.utilization``).
    #[pyo3(signature = (now_ms, max_entities))]
    fn _utilization(
        &self,
        py: Python<'_>,
        now_ms: Option<Int>,
        max_entities: usize,
    ) -> PyQuotaResult<Utilization> {
        crate::utilization::utilization(py, Arc::clone(&self.kernel), ms(now_ms), max_entities)
    }

    /// ``(live sensors, overflowed resolutions, expired sensors)`` of a quota type.
    fn _sensor_stats(&self, quota_type: QuotaTypeArg) -> (usize, u64, u64) {
        let (k, t) = (&self.kernel, quota_type.0);
        (
            k.sensor_count(t),
            k.overflowed_resolutions(t),
            k.expired_sensors(t),
        )
    }

    /// The kernel's estimate of the callers' clock (ms).
    fn _estimated_now_ms(&self, py: Python<'_>) -> i64 {
        let k = Arc::clone(&self.kernel);
        py.detach(move || k.estimated_now_ms())
    }

    /// Removes idle sensors now, with the GIL released; returns ``(removed, now_ms)``.
    #[pyo3(signature = (now_ms=None))]
    fn _expire_sensors(&self, py: Python<'_>, now_ms: Option<Int>) -> PyQuotaResult<(usize, i64)> {
        let k = Arc::clone(&self.kernel);
        let r = py.detach(move || k.expire_sensors(ms(now_ms)))?;
        Ok((r.removed, r.now_ms))
    }

    /// The kernel's connection quotas (KIP-612); every call returns a view of the same state.
    fn _connections(&self) -> PyConnectionQuotas {
        PyConnectionQuotas {
            kernel: Arc::clone(&self.kernel),
        }
    }

    /// The kernel's topic quotas; every call returns a view of the same state.
    fn _topics(&self) -> PyTopicQuotas {
        PyTopicQuotas {
            kernel: Arc::clone(&self.kernel),
        }
    }

    /// Stops the background expiry thread (waits for a pass in progress); no-op if none runs.
    fn _stop_expiry(&self, py: Python<'_>) {
        self.expiry.stop(py);
    }

    /// Whether the background expiry thread runs.
    fn _expiry_running(&self) -> bool {
        self.expiry.is_running()
    }

    /// Replays a batch of recorded requests with the GIL released (numpy arrays: ``ts_ms``
    /// int64, ``types`` int8, ``entity_ids`` int32, ``values`` float64, ``out`` int32,
    /// ``sent_ms`` int64); see ``kquota.pipeline.replay``.
    #[pyo3(signature = (ts_ms, types, entity_ids, values, entities, out, closed=false, sent_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn _replay(
        &self,
        py: Python<'_>,
        ts_ms: &Bound<'_, PyAny>,
        types: &Bound<'_, PyAny>,
        entity_ids: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        entities: Vec<(String, String)>,
        out: &Bound<'_, PyAny>,
        closed: bool,
        sent_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyQuotaResult<()> {
        let core = Arc::clone(&self.kernel);
        crate::batch::replay(
            py, core, ts_ms, types, entity_ids, values, entities, out, closed, sent_ms,
        )
    }
}
