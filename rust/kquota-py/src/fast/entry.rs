//! The `extern "C"` entry points `fast` installs, and the name-cache miss path of the named ones.

use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;

use super::vectorcall_args::{bind, check_text, handle_args, now_ms, quota_type, strict_flag, text, value};
use super::{MUTATIONS_NAME, NAME, REQUEST_NAME};
use crate::errors::{PyQuotaErr, PyQuotaResult};
use crate::handle::PyClientHandle;
use crate::kernel::PyQuotaKernel;
use crate::name_cache::Key;
use quota_core::QuotaKernel as CoreKernel;

fn finish(py: Python<'_>, r: PyQuotaResult<i32>) -> *mut ffi::PyObject {
    match r {
        Ok(ms) => unsafe { ffi::PyLong_FromLong(ms as std::os::raw::c_long) },
        Err(e) => {
            PyErr::from(e).restore(py);
            ptr::null_mut()
        }
    }
}

/// `now`, or the kernel's clock read now. The named entry points read it between starting the
/// name cache's probe (a prefetch) and using it, so the clock read (~20 ns here) overlaps that
/// probe's cache miss instead of following it.
#[inline(always)]
fn kernel_now(now: Option<i64>) -> Option<i64> {
    Some(now.unwrap_or_else(quota_core::clock::monotonic_ms))
}

/// Runs `f` and turns a Rust panic into a Python exception instead of unwinding into CPython.
fn guarded(f: impl FnOnce(Python<'_>) -> PyQuotaResult<i32>) -> *mut ffi::PyObject {
    // SAFETY: CPython calls these functions with the thread attached.
    let py = unsafe { Python::assume_attached() };
    // The result crosses the unwind boundary as one pointer: a `PyQuotaResult` crossed it
    // through memory, written in parts and read back whole (a store-forwarding stall, ~3% of a
    // named call).
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| finish(py, f(py)))) {
        Ok(obj) => obj,
        Err(_) => finish(
            py,
            Err(PyQuotaErr::Py(crate::errors::KQuotaError::new_err(
                "internal error in kquota (panic)",
            ))),
        ),
    }
}

pub(super) unsafe extern "C" fn handle_record(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    guarded(|py| {
        let (t, v, now) = handle_args(py, args, nargsf, kwnames)?;
        // SAFETY: the method descriptor only calls us with instances of the handle class.
        let this = Borrowed::from_ptr(py, slf).cast_unchecked::<PyClientHandle>();
        Ok(this.get().inner.record_and_get_throttle_time_ms(t, v, now)?)
    })
}

pub(super) unsafe extern "C" fn named_record(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    guarded(|py| {
        let [qt, user, client, v, now] = bind(
            py,
            NAME,
            ["quota_type", "user", "client_id", "value", "now_ms"],
            4,
            args,
            nargsf,
            kwnames,
        )?;
        let t = quota_type(py, qt)?;
        named_call(
            py,
            slf,
            user,
            client,
            t,
            || Ok((value(py, v, "value")?, now_ms(py, now)?)),
            |&v| quota_core::check_record_value(v),
            |kernel, s, &v, now| kernel.record_resolved(t, s, v, now),
        )
    })
}

pub(super) unsafe extern "C" fn handle_request(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    guarded(|py| {
        let [v, now] = bind(
            py,
            REQUEST_NAME,
            ["thread_time_nanos", "now_ms"],
            1,
            args,
            nargsf,
            kwnames,
        )?;
        let (v, now) = (value(py, v, "thread_time_nanos")?, now_ms(py, now)?);
        // SAFETY: the method descriptor only calls us with instances of the handle class.
        let this = Borrowed::from_ptr(py, slf).cast_unchecked::<PyClientHandle>();
        Ok(this.get().inner.record_request_time(v, now)?)
    })
}

pub(super) unsafe extern "C" fn handle_mutations(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    guarded(|py| {
        let [v, now, strict] = bind(
            py,
            MUTATIONS_NAME,
            ["mutations", "now_ms", "strict"],
            1,
            args,
            nargsf,
            kwnames,
        )?;
        let (v, now, strict) = (
            value(py, v, "mutations")?,
            now_ms(py, now)?,
            strict_flag(py, strict)?,
        );
        // SAFETY: the method descriptor only calls us with instances of the handle class.
        let this = Borrowed::from_ptr(py, slf).cast_unchecked::<PyClientHandle>();
        Ok(this.get().inner.record_controller_mutations(v, now, strict)?)
    })
}

pub(super) unsafe extern "C" fn named_request(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    guarded(|py| {
        let [user, client, v, now] = bind(
            py,
            REQUEST_NAME,
            ["user", "client_id", "thread_time_nanos", "now_ms"],
            3,
            args,
            nargsf,
            kwnames,
        )?;
        let t = quota_core::ClientQuotaType::Request;
        let args = || {
            let (v, now) = (value(py, v, "thread_time_nanos")?, now_ms(py, now)?);
            Ok((quota_core::thread_time_percent(v)?, now))
        };
        named_call(
            py,
            slf,
            user,
            client,
            t,
            args,
            |_| Ok(()),
            |kernel, s, &percent, now| kernel.record_resolved(t, s, percent, now),
        )
    })
}

pub(super) unsafe extern "C" fn named_mutations(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    guarded(|py| {
        let [user, client, v, now, strict] = bind(
            py,
            MUTATIONS_NAME,
            ["user", "client_id", "mutations", "now_ms", "strict"],
            3,
            args,
            nargsf,
            kwnames,
        )?;
        let t = quota_core::ClientQuotaType::ControllerMutation;
        let args = || {
            let (v, now, strict) = (
                value(py, v, "mutations")?,
                now_ms(py, now)?,
                strict_flag(py, strict)?,
            );
            quota_core::check_mutations(v)?;
            Ok(((v, strict), now))
        };
        // The resolution is remembered even when a strict call is rejected: the next call is the
        // same connection asking again.
        named_call(
            py,
            slf,
            user,
            client,
            t,
            args,
            |_| Ok(()),
            |kernel, s, &(v, strict), now| kernel.record_resolved_mutations(s, v, now, strict),
        )
    })
}

/// What the three named entry points share: the names are checked and the name cache's probe
/// started (a prefetch); `args` then reads the remaining arguments, overlapping that probe's
/// cache miss, as does the kernel clock read; `record` runs on the cached sensor, or else, once
/// `before_miss` has refused what must not resolve a sensor, on the one `named_miss` resolves.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn named_call<A>(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    user: *mut ffi::PyObject,
    client: *mut ffi::PyObject,
    t: quota_core::ClientQuotaType,
    args: impl FnOnce() -> PyQuotaResult<(A, Option<i64>)>,
    before_miss: impl FnOnce(&A) -> Result<(), quota_core::QuotaError>,
    record: impl Fn(&CoreKernel, &quota_core::QuotaSensor, &A, Option<i64>) -> Result<i32, quota_core::QuotaError>,
) -> PyQuotaResult<i32> {
    check_text(py, user, "user")?;
    check_text(py, client, "client_id")?;
    // SAFETY: the method descriptor only calls us with instances of the kernel class.
    let this = Borrowed::from_ptr(py, slf).cast_unchecked::<PyQuotaKernel>();
    let this = this.get();
    let key = Key::new(user, client, t);
    if let Some(k) = &key {
        this.names.prefetch(k);
    }
    let (a, now) = args()?;
    let now = kernel_now(now);
    let kernel = &*this.kernel;
    if let Some(r) = key
        .as_ref()
        .and_then(|k| this.names.with(k, kernel, |s| record(kernel, s, &a, now)))
    {
        return Ok(r?);
    }
    before_miss(&a)?;
    named_miss(py, this, key, user, client, t, now, |s| {
        record(kernel, s, &a, now)
    })
}

/// A named call the name cache could not answer: decodes the names, resolves once (from the
/// kernel's registry or metric-tag cache when current), records into that sensor, and remembers
/// the resolution when it may be reused (a failed callback answer, stamped generation 0, is not;
/// names that are not exact `str` objects have no key).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn named_miss(
    py: Python<'_>,
    this: &PyQuotaKernel,
    key: Option<Key>,
    user: *mut ffi::PyObject,
    client: *mut ffi::PyObject,
    t: quota_core::ClientQuotaType,
    now: Option<i64>,
    record: impl FnOnce(&quota_core::QuotaSensor) -> Result<i32, quota_core::QuotaError>,
) -> PyQuotaResult<i32> {
    let (user_s, client_s) = (text(py, user, "user")?, text(py, client, "client_id")?);
    let Some((generation, sensor)) = this.kernel.resolution(t, &user_s, &client_s, now)? else {
        // No quota of this type exists: Kafka records nothing.
        return Ok(0);
    };
    let out = record(&sensor);
    if let Some(key) = key.filter(|_| generation != 0) {
        this.names.put(&key, &this.kernel, generation, sensor);
    }
    Ok(out?)
}

pub(super) unsafe extern "C" fn noop(
    _module: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    guarded(|py| {
        handle_args(py, args, nargsf, kwnames)?;
        Ok(0)
    })
}
