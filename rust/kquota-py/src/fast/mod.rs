//! Hand-written METH_FASTCALL entry points for the per-request calls (the method table and its
//! installation; argument binding in `vectorcall_args`, the entry points in `entry`).
//!
//! `record_and_get_throttle_time_ms`, `record_request_time` and `record_controller_mutations` of
//! `ClientHandle` and `QuotaKernel` run per request, so their arguments are handled directly on
//! the vectorcall arguments (exact `int` / `float` / `str` and `ClientQuotaType` member fast
//! paths, no intermediate objects) and they are installed as ordinary method descriptors on the
//! two classes (they have no `#[pymethods]` wrappers). Names, defaults, errors and
//! `__text_signature__` follow the generic methods' conventions.

mod entry;
mod vectorcall_args;

use std::ffi::CStr;
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::PyTypeInfo;

use crate::handle::PyClientHandle;
use crate::kernel::PyQuotaKernel;
use entry::{
    handle_mutations, handle_record, handle_request, named_mutations, named_record, named_request, noop,
};

/// A `PyMethodDef` that can live in a `static` (CPython never writes to it).
struct MethodDef(ffi::PyMethodDef);
// SAFETY: the definition is immutable after construction; its pointers are to static data.
unsafe impl Sync for MethodDef {}

/// A METH_FASTCALL | METH_KEYWORDS method definition.
const fn fastcall(
    name: &'static CStr,
    meth: ffi::PyCFunctionFastWithKeywords,
    doc: &'static CStr,
) -> MethodDef {
    MethodDef(ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: meth,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: doc.as_ptr(),
    })
}

pub(super) const NAME: &CStr = c"record_and_get_throttle_time_ms";

static HANDLE_RECORD: MethodDef = fastcall(
    NAME,
    handle_record,
    c"record_and_get_throttle_time_ms($self, quota_type, value, now_ms=None)\n--\n\nRecords ``value`` (bytes for PRODUCE/FETCH) and returns the throttle in ms (0 = none).",
);

static NAMED_RECORD: MethodDef = fastcall(
    NAME,
    named_record,
    c"record_and_get_throttle_time_ms($self, quota_type, user, client_id, value, now_ms=None)\n--\n\nRecords ``value`` (bytes for PRODUCE/FETCH) and returns the throttle in ms (0 = none).",
);

pub(super) const REQUEST_NAME: &CStr = c"record_request_time";
pub(super) const MUTATIONS_NAME: &CStr = c"record_controller_mutations";

static HANDLE_REQUEST: MethodDef = fastcall(
    REQUEST_NAME,
    handle_request,
    c"record_request_time($self, thread_time_nanos, now_ms=None)\n--\n\nRecords I/O-thread time (KIP-124) and returns the throttle in ms, at most one window.",
);

static NAMED_REQUEST: MethodDef = fastcall(
    REQUEST_NAME,
    named_request,
    c"record_request_time($self, user, client_id, thread_time_nanos, now_ms=None)\n--\n\nRecords I/O-thread time (KIP-124) and returns the throttle in ms, at most one window.",
);

static HANDLE_MUTATIONS: MethodDef = fastcall(
    MUTATIONS_NAME,
    handle_mutations,
    c"record_controller_mutations($self, mutations, now_ms=None, strict=False)\n--\n\nRecords controller mutations (KIP-599). Permissive: returns the throttle in ms. Strict: raises ThrottlingQuotaExceededError, recording nothing, when the bucket is already in debt.",
);

static NAMED_MUTATIONS: MethodDef = fastcall(
    MUTATIONS_NAME,
    named_mutations,
    c"record_controller_mutations($self, user, client_id, mutations, now_ms=None, strict=False)\n--\n\nRecords controller mutations (KIP-599). Permissive: returns the throttle in ms. Strict: raises ThrottlingQuotaExceededError, recording nothing, when the bucket is already in debt.",
);

static NOOP: MethodDef = fastcall(
    c"_noop",
    noop,
    c"_noop($module, quota_type, value, now_ms=None)\n--\n\nParses the handle call's arguments exactly as the handle's fast entry does, then returns 0: the floor a native call cannot beat (benchmarks).",
);

/// The benchmark floor `_noop`, built on the same argument handling as the handle call.
pub fn noop_function<'py>(m: &Bound<'py, PyModule>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `NOOP` is 'static and CPython treats it as read-only.
    unsafe {
        let f = ffi::PyCFunction_NewEx(
            &NOOP.0 as *const ffi::PyMethodDef as *mut ffi::PyMethodDef,
            m.as_ptr(),
            ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(m.py(), f)
    }
}

/// Replaces the `#[pymethods]` wrappers of both classes with the fast entry points.
pub fn install(py: Python<'_>) -> PyResult<()> {
    for (ty, def) in [
        (PyClientHandle::type_object(py), &HANDLE_RECORD),
        (PyQuotaKernel::type_object(py), &NAMED_RECORD),
        (PyClientHandle::type_object(py), &HANDLE_REQUEST),
        (PyQuotaKernel::type_object(py), &NAMED_REQUEST),
        (PyClientHandle::type_object(py), &HANDLE_MUTATIONS),
        (PyQuotaKernel::type_object(py), &NAMED_MUTATIONS),
    ] {
        // SAFETY: `def` is 'static and CPython treats it as read-only.
        let descr = unsafe {
            ffi::PyDescr_NewMethod(
                ty.as_type_ptr(),
                &def.0 as *const ffi::PyMethodDef as *mut ffi::PyMethodDef,
            )
        };
        let descr = unsafe { Bound::from_owned_ptr_or_err(py, descr)? };
        // SAFETY: every definition's name is a static NUL-terminated ASCII string.
        let name = unsafe { CStr::from_ptr(def.0.ml_name) };
        ty.setattr(name.to_str().expect("ascii"), descr)?;
    }
    Ok(())
}
