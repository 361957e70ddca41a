//! `kquota._kquota.ClientHandle`: the per-connection handle (`QuotaManager.client(user,
//! client_id)`), a thin face of `quota_core::ClientHandle`.
//!
//! `record_and_get_throttle_time_ms`, `record_request_time` and `record_controller_mutations`
//! are not here: `fast` installs hand-written entry points for them.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use quota_core::{ClientHandle as CoreHandle, QuotaKernel};

use crate::numeric_args::{ms, Int, Real};
use crate::errors::PyQuotaResult;
use crate::quota_type::QuotaTypeArg;

/// `{"user": ..., "client-id": ...}`.
pub fn tags_dict<'py>(py: Python<'py>, tags: (String, String)) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("user", tags.0)?;
    d.set_item("client-id", tags.1)?;
    Ok(d)
}

/// Per-connection handle returned by ``QuotaManager.client(user, client_id)``.
#[pyclass(frozen, module = "kquota._kquota", name = "ClientHandle")]
pub struct PyClientHandle {
    pub(crate) inner: CoreHandle,
}

impl PyClientHandle {
    pub fn new(kernel: &Arc<QuotaKernel>, user: &str, client_id: &str) -> PyQuotaResult<Self> {
        quota_core::check_name("user", user)?;
        quota_core::check_name("client_id", client_id)?;
        Ok(PyClientHandle {
            inner: CoreHandle::new(Arc::clone(kernel), user, client_id),
        })
    }
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

    /// Records ``value`` without checking the quota.
    #[pyo3(signature = (quota_type, value, now_ms=None))]
    fn record_no_throttle(
        &self,
        quota_type: QuotaTypeArg,
        value: Real,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<()> {
        Ok(self.inner.record_no_throttle(quota_type.0, value.0, ms(now_ms))?)
    }

    /// Takes back ``value`` recorded earlier.
    #[pyo3(signature = (quota_type, value, now_ms=None))]
    fn unrecord(&self, quota_type: QuotaTypeArg, value: Real, now_ms: Option<Int>) -> PyQuotaResult<()> {
        Ok(self.inner.unrecord(quota_type.0, value.0, ms(now_ms))?)
    }

    /// The throttle recording ``value`` now would give, recording nothing (0 while no quota of
    /// the type exists); PRODUCE, FETCH and REQUEST (percent of a thread) only. The proxy asks
    /// it before reading a connection's next request while earlier ones are unanswered.
    #[pyo3(signature = (quota_type, value, now_ms=None))]
    fn peek_throttle_time_ms(
        &self,
        quota_type: QuotaTypeArg,
        value: Real,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<i32> {
        Ok(self
            .inner
            .peek_throttle_time_ms(quota_type.0, value.0, ms(now_ms))?)
    }

    /// Records network-thread time (KIP-124) without a check.
    #[pyo3(signature = (nanos, now_ms=None))]
    fn record_network_thread_time(&self, nanos: Real, now_ms: Option<Int>) -> PyQuotaResult<()> {
        Ok(self.inner.record_network_thread_time(nanos.0, ms(now_ms))?)
    }

    /// Tokens left in this connection's controller-mutation bucket, ``None`` without a quota.
    #[pyo3(signature = (now_ms=None))]
    fn controller_mutation_tokens(&self, now_ms: Option<Int>) -> PyQuotaResult<Option<f64>> {
        let h = &self.inner;
        Ok(h.kernel()
            .controller_mutation_tokens(h.user(), h.client_id(), ms(now_ms))?)
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
            let decoded = crate::callback::decode_tags(py, &tags.0, &tags.1)?;
            return Ok(decoded.cast_into::<PyDict>()?);
        }
        tags_dict(py, tags)
    }

    /// The limit that applies, or ``None`` when unlimited.
    fn quota_limit(&self, quota_type: QuotaTypeArg) -> Option<f64> {
        let h = &self.inner;
        h.kernel().quota_limit(quota_type.0, h.user(), h.client_id())
    }

    /// ``limit * (window_num - 1) * window_size_seconds``; ``math.inf`` when unlimited.
    fn max_value_in_quota_window(&self, quota_type: QuotaTypeArg) -> f64 {
        let h = &self.inner;
        h.kernel()
            .max_value_in_quota_window(quota_type.0, h.user(), h.client_id())
    }

    /// How long the limit takes to allow ``value`` (``value / limit`` seconds, in ms); 0 when
    /// unlimited. The proxy mutes at least this long after delivering an over-quota Fetch
    /// response instead of Kafka's empty answer (see ``fetch_answer``).
    fn time_at_quota_ms(&self, quota_type: QuotaTypeArg, value: f64) -> i32 {
        let h = &self.inner;
        h.kernel()
            .time_at_quota_ms(quota_type.0, h.user(), h.client_id(), value)
    }

    /// The sensor's current rate (0.0 when there is no sensor).
    #[pyo3(signature = (quota_type, now_ms=None))]
    fn measured_rate(&self, quota_type: QuotaTypeArg, now_ms: Option<Int>) -> PyQuotaResult<f64> {
        let h = &self.inner;
        Ok(h.kernel()
            .measured_rate(quota_type.0, h.user(), h.client_id(), ms(now_ms))?)
    }

    fn __repr__(&self) -> String {
        format!(
            "ClientHandle(user={:?}, client_id={:?})",
            self.inner.user(),
            self.inner.client_id()
        )
    }
}
