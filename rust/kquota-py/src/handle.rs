//! `kquota._kquota.ClientHandle`: the per-connection handle (`QuotaManager.client(user,
//! client_id)`), a thin face of `quota_core::ClientHandle`.
//!
//! `record_and_get_throttle_time_ms`, `record_request_time` and `record_controller_mutations`
//! are not here: `fast` installs hand-written entry points for them.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use quota_core::{
    ClientHandle as CoreHandle, ClientQuotaType as CoreType, FetchAnswer, QuotaKernel, ResponseThrottle,
};

use crate::errors::{invalid_argument, PyQuotaResult};
use crate::numeric_args::{ms, Int, Real};
use crate::quota_type::{member, QuotaTypeArg};

/// A response step's `(throttle_time_ms, enforced ClientQuotaType or None)`.
type StepTuple<'py> = (i32, Option<Bound<'py, PyAny>>);

fn step_tuple(py: Python<'_>, r: ResponseThrottle) -> PyResult<StepTuple<'_>> {
    Ok((r.throttle_time_ms, r.enforce.map(|t| member(py, t)).transpose()?))
}

/// `[(topic, bytes), ...]` borrowed for the kernel.
fn topic_pairs(topics: &[(String, Real)]) -> Vec<(&str, f64)> {
    topics.iter().map(|(t, b)| (t.as_str(), b.0)).collect()
}

/// A throttle argument: an int from 0 to 2^31 - 1 ms (Kafka's int32 `throttle_time_ms`).
pub fn throttle_ms_arg(name: &str, v: i64) -> PyQuotaResult<i32> {
    i32::try_from(v)
        .ok()
        .filter(|ms| *ms >= 0)
        .ok_or_else(|| invalid_argument(format!("{name} must be from 0 to 2^31 - 1 ms, got {v}")))
}

/// The quota combined with the request quota in a response: PRODUCE or FETCH (byte rates), or
/// CONTROLLER_MUTATION (KIP-599's APIs).
pub fn byte_type_arg(t: QuotaTypeArg) -> PyQuotaResult<CoreType> {
    match t.0 {
        CoreType::Produce | CoreType::Fetch | CoreType::ControllerMutation => Ok(t.0),
        other => Err(invalid_argument(format!(
            "byte_quota_type must be PRODUCE, FETCH or CONTROLLER_MUTATION, got {}",
            other.name()
        ))),
    }
}

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

    /// Kafka's response step (``KafkaApis`` + ``ClientQuotaManager.throttle``) for throttles an
    /// embedder computed: the larger goes in the response; the byte-rate quota is enforced
    /// only when strictly larger; the enforced throttle is recorded into this entity's (and the
    /// type's) ``throttle-time``. Returns ``(throttle_time_ms, enforced type or None)``; mute
    /// the connection for ``throttle_time_ms`` once the response is out.
    #[pyo3(signature = (byte_quota_type, byte_throttle_ms, request_throttle_ms, now_ms=None))]
    fn throttle_response<'py>(
        &self,
        py: Python<'py>,
        byte_quota_type: QuotaTypeArg,
        byte_throttle_ms: Int,
        request_throttle_ms: Int,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<StepTuple<'py>> {
        let t = byte_type_arg(byte_quota_type)?;
        let r = quota_core::combine_throttles(
            t,
            throttle_ms_arg("byte_throttle_ms", byte_throttle_ms.0)?,
            throttle_ms_arg("request_throttle_ms", request_throttle_ms.0)?,
        );
        self.inner.throttle(r, ms(now_ms))?;
        Ok(step_tuple(py, r)?)
    }

    /// Records a throttle applied to a response, enforced for ``quota_type``, into this
    /// entity's and the type's ``throttle-time`` (``ClientQuotaManager.throttle``); 0 records
    /// nothing.
    #[pyo3(signature = (quota_type, throttle_ms, now_ms=None))]
    fn record_throttle_time(
        &self,
        quota_type: QuotaTypeArg,
        throttle_ms: Int,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<()> {
        let r = ResponseThrottle {
            throttle_time_ms: throttle_ms_arg("throttle_ms", throttle_ms.0)?,
            enforce: Some(quota_type.0),
        };
        self.inner.throttle(r, ms(now_ms))?;
        Ok(())
    }

    /// A Produce response's step: ``size`` bytes (header + body) recorded, then the request's
    /// thread time ``request_nanos`` (KIP-124; exempt when the request gets no answer,
    /// ``answered=False`` for acks=0), the throttles combined and the enforced one recorded.
    /// ``topics``: ``[(topic, bytes), ...]`` the request wrote (the sum of each topic's record
    /// batches), recorded into the topics' quotas (KIP-1010) in the same step; the throttle is
    /// then the largest of the client's, the topics' and the request quota's.
    /// Returns ``(throttle_time_ms, enforced type or None)``.
    #[pyo3(signature = (size, request_nanos, answered=true, now_ms=None, topics=None))]
    fn produce_response<'py>(
        &self,
        py: Python<'py>,
        size: Real,
        request_nanos: Real,
        answered: bool,
        now_ms: Option<Int>,
        topics: Option<Vec<(String, Real)>>,
    ) -> PyQuotaResult<StepTuple<'py>> {
        let topics = topics.unwrap_or_default();
        let named = topic_pairs(&topics);
        let r =
            self.inner
                .produce_response_with_topics(size.0, request_nanos.0, answered, &named, ms(now_ms))?;
        Ok(step_tuple(py, r)?)
    }

    /// The most a Fetch request may ask for (``MaxBytes``): the bytes the quota window allows;
    /// ``math.inf`` without a fetch quota. With ``topics`` (the topics the request asks for),
    /// also at most the bytes each topic's quota window allows.
    #[pyo3(signature = (topics=None))]
    fn fetch_request_cap(&self, topics: Option<Vec<String>>) -> f64 {
        match topics {
            None => self.inner.fetch_request_cap(),
            Some(t) => {
                let names: Vec<&str> = t.iter().map(String::as_str).collect();
                self.inner.fetch_request_cap_for_topics(&names)
            }
        }
    }

    /// A Fetch response's step: ``size`` bytes and ``request_nanos`` recorded and combined;
    /// over quota the answer is ``"empty"`` (Kafka's: an empty response with the throttle, the
    /// size taken back) or ``"deliver_muted"`` (delivered, kept recorded, muted at least ``size /
    /// quota``), else ``"deliver"``. ``cap`` is :meth:`fetch_request_cap` when the request was
    /// read. ``topics``: ``[(topic, bytes), ...]`` the response carries, recorded into the
    /// topics' quotas (taken back with an empty answer). Returns ``(answer, throttle_time_ms,
    /// enforced type or None)``.
    #[pyo3(signature = (size, cap, request_nanos, now_ms=None, topics=None))]
    fn fetch_response<'py>(
        &self,
        py: Python<'py>,
        size: Real,
        cap: f64,
        request_nanos: Real,
        now_ms: Option<Int>,
        topics: Option<Vec<(String, Real)>>,
    ) -> PyQuotaResult<(&'static str, i32, Option<Bound<'py, PyAny>>)> {
        let topics = topics.unwrap_or_default();
        let named = topic_pairs(&topics);
        let step = self
            .inner
            .fetch_response_with_topics(size.0, cap, request_nanos.0, &named, ms(now_ms))?;
        let (throttle, enforce) = step_tuple(py, step.throttle)?;
        Ok((fetch_answer_name(step.answer), throttle, enforce))
    }

    /// The response step of CreateTopics, DeleteTopics and CreatePartitions (KIP-599): the
    /// request's thread time recorded, combined with the controller-mutation throttle its
    /// mutations gave (``record_controller_mutations``), the enforced one recorded. Returns
    /// ``(throttle_time_ms, enforced type or None)``.
    #[pyo3(signature = (mutation_throttle_ms, request_nanos, now_ms=None))]
    fn mutation_response<'py>(
        &self,
        py: Python<'py>,
        mutation_throttle_ms: Int,
        request_nanos: Real,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<StepTuple<'py>> {
        let ms_arg = throttle_ms_arg("mutation_throttle_ms", mutation_throttle_ms.0)?;
        let r = self
            .inner
            .mutation_response(ms_arg, request_nanos.0, ms(now_ms))?;
        Ok(step_tuple(py, r)?)
    }

    /// Any other request's response step: its thread time recorded (KIP-124), the request
    /// quota's throttle enforced and recorded. Returns ``(throttle_time_ms, REQUEST or None)``.
    #[pyo3(signature = (nanos, now_ms=None))]
    fn request_response<'py>(
        &self,
        py: Python<'py>,
        nanos: Real,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<StepTuple<'py>> {
        let r = self.inner.request_response(nanos.0, ms(now_ms))?;
        Ok(step_tuple(py, r)?)
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

/// The Python name of a Fetch answer: ``"deliver"``, ``"empty"`` or ``"deliver_muted"``.
pub fn fetch_answer_name(a: FetchAnswer) -> &'static str {
    match a {
        FetchAnswer::Deliver => "deliver",
        FetchAnswer::Empty => "empty",
        FetchAnswer::DeliverMuted => "deliver_muted",
    }
}
