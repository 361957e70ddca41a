//! The bridge from the kernel's callback hook to a Python `ClientQuotaCallback`.
//!
//! The kernel calls the hook only on cache misses (see `quota_core::callback`); each call takes
//! the GIL and asks the Python adapter (`kquota.callback._CallbackAdapter`), which calls the
//! user's callback, validates its answer, logs and counts failures, and returns `None` for a
//! failure. Anything unexpected on this side (an exception escaping the adapter, a wrong type)
//! is a failure too: a callback can never take the host down.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use quota_core::{ClientQuotaType, QuotaCallbackHook};

use crate::quota_type;

/// `kquota.callback.decode_tags`, handed over by `kquota.callback` at import, so the extension
/// never imports the package.
static DECODE_TAGS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Called by `kquota.callback` at import with its `decode_tags` (a callback's tag map from the
/// kernel's tag pair): `ClientHandle.quota_metric_tags` reports callback tags through it.
#[pyfunction]
pub fn _register_tag_decoder(decode: &Bound<'_, PyAny>) {
    let _ = DECODE_TAGS.set(decode.py(), decode.clone().unbind());
}

/// The callback's tag map for a kernel tag pair (see [`_register_tag_decoder`]).
pub fn decode_tags<'py>(py: Python<'py>, user: &str, client_id: &str) -> PyResult<Bound<'py, PyAny>> {
    let decode = DECODE_TAGS.get(py).ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err(
            "kquota.callback has not registered decode_tags (import kquota)",
        )
    })?;
    decode.bind(py).call1((user, client_id))
}

pub struct PyCallbackHook {
    adapter: Py<PyAny>,
    fail_closed: bool,
    polls_reset: bool,
}

impl PyCallbackHook {
    pub fn new(adapter: Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyCallbackHook {
            fail_closed: adapter.getattr("fail_closed")?.extract()?,
            polls_reset: adapter.getattr("polls_reset")?.extract()?,
            adapter: adapter.unbind(),
        })
    }

    /// The `ClientQuotaType` member for `t`; `None` (a failed answer) if it cannot be loaded.
    fn member<'py>(&self, py: Python<'py>, t: ClientQuotaType) -> Option<Bound<'py, PyAny>> {
        quota_type::member(py, t)
            .map_err(|e| e.write_unraisable(py, Some(self.adapter.bind(py))))
            .ok()
    }

    fn call<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        args: impl pyo3::call::PyCallArgs<'py>,
    ) -> Option<Bound<'py, PyAny>> {
        match self.adapter.bind(py).call_method1(method, args) {
            Ok(v) => Some(v),
            Err(e) if !e.is_instance_of::<pyo3::exceptions::PyException>(py) => {
                // KeyboardInterrupt / SystemExit: never swallowed. The hook cannot raise into
                // the kernel's call, so the exception is re-raised at the interpreter's next
                // check (a pending call), and this request proceeds as a failed answer.
                crate::deferred_exception::raise_later(py, e);
                None
            }
            Err(e) => {
                // The adapter catches the callback's errors itself; reaching here is a bug in it,
                // reported the way Python reports errors it cannot raise.
                e.write_unraisable(py, Some(self.adapter.bind(py)));
                None
            }
        }
    }
}

impl QuotaCallbackHook for PyCallbackHook {
    fn metric_tags(&self, t: ClientQuotaType, user: &str, client_id: &str) -> Option<(String, String)> {
        Python::attach(|py| {
            let qt = self.member(py, t)?;
            let out = self.call(py, "metric_tags", (qt, user, client_id))?;
            if out.is_none() {
                return None;
            }
            // The adapter never answers with a kernel-reserved tag (see `encode_tags`); should
            // one arrive anyway it is a failed answer, not a way into an internal sensor.
            out.extract::<(String, String)>()
                .ok()
                .filter(|(u, _)| !u.starts_with(quota_core::INTERNAL_TAG_PREFIX) && !u.contains('\0'))
        })
    }

    fn limit(&self, t: ClientQuotaType, tag_user: &str, tag_client_id: &str) -> Option<Option<f64>> {
        Python::attach(|py| {
            let qt = self.member(py, t)?;
            let out = self.call(py, "limit", (qt, tag_user, tag_client_id))?;
            if out.is_none() {
                return None;
            }
            let v = out.extract::<f64>().ok()?;
            if v.is_nan() || v < 0.0 {
                return None;
            }
            Some(if v == f64::INFINITY { None } else { Some(v) })
        })
    }

    fn fallback_limit(&self) -> Option<f64> {
        self.fail_closed.then_some(0.0)
    }

    fn polls_reset(&self) -> bool {
        self.polls_reset
    }

    fn reset_required(&self, t: ClientQuotaType) -> bool {
        Python::attach(|py| {
            self.member(py, t)
                .and_then(|qt| self.call(py, "reset_required", (qt,)))
                .and_then(|v| v.is_truthy().ok())
                .unwrap_or(false)
        })
    }
}
