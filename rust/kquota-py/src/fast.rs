//! Hand-written METH_FASTCALL entry points for the two hottest calls.
//!
//! `h.record_and_get_throttle_time_ms(...)` and `qm.record_and_get_throttle_time_ms(...)` run per
//! request, so their argument handling is done here directly on the vectorcall arguments (exact
//! `int` / `float` / `str` / `ClientQuotaType` fast paths, no intermediate objects) and they are
//! installed as ordinary method descriptors on the two classes, replacing the generic wrappers
//! `#[pymethods]` generated. Behaviour, names, defaults, errors and `__text_signature__` are the
//! same as those wrappers'.

use std::ffi::{c_char, CStr};

use std::ptr;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::PyTypeInfo;

use crate::errors::to_py;
use crate::name_cache::Key;
use crate::quota_type::QuotaTypeArg;
use crate::{PyClientHandle, PyQuotaKernel};

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

const NAME: &CStr = c"record_and_get_throttle_time_ms";

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

const REQUEST_NAME: &CStr = c"record_request_time";
const MUTATIONS_NAME: &CStr = c"record_controller_mutations";

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

/// Binds vectorcall arguments to `N` named parameters, the first `required` of them required.
///
/// # Safety
/// `args`/`nargsf`/`kwnames` must be a valid vectorcall argument triple.
#[inline(always)]
unsafe fn bind<const N: usize>(
    py: Python<'_>,
    fname: &CStr,
    names: [&str; N],
    required: usize,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<[*mut ffi::PyObject; N]> {
    let mut out = [ptr::null_mut(); N];
    let nargs = ffi::PyVectorcall_NARGS(nargsf as usize) as usize;
    if nargs > N {
        return Err(PyTypeError::new_err(format!(
            "{}() takes at most {N} positional arguments ({nargs} given)",
            fname.to_str().unwrap_or_default()
        )));
    }
    // A fixed-count loop: the compiler unrolls it instead of calling memcpy.
    for (i, slot) in out.iter_mut().enumerate() {
        if i < nargs {
            *slot = *args.add(i);
        }
    }
    if !kwnames.is_null() {
        let nkw = ffi::PyTuple_GET_SIZE(kwnames) as usize;
        for k in 0..nkw {
            let key = ffi::PyTuple_GET_ITEM(kwnames, k as ffi::Py_ssize_t);
            let key = Borrowed::from_ptr(py, key).cast_unchecked::<PyString>();
            let key = key.to_cow()?;
            let Some(i) = names.iter().position(|n| *n == key) else {
                return Err(PyTypeError::new_err(format!(
                    "{}() got an unexpected keyword argument '{key}'",
                    fname.to_str().unwrap_or_default()
                )));
            };
            if !out[i].is_null() {
                return Err(PyTypeError::new_err(format!(
                    "{}() got multiple values for argument '{key}'",
                    fname.to_str().unwrap_or_default()
                )));
            }
            out[i] = *args.add(nargs + k);
        }
    }
    if let Some(missing) = (0..required).find(|&i| out[i].is_null()) {
        return Err(PyTypeError::new_err(format!(
            "{}() missing required argument '{}'",
            fname.to_str().unwrap_or_default(),
            names[missing]
        )));
    }
    Ok(out)
}

/// A member is recognised by identity against the four cached members (no type lookup, no
/// int read); a name or anything else takes the slow path (see `quota_type.rs`).
#[inline(always)]
unsafe fn quota_type(py: Python<'_>, ob: *mut ffi::PyObject) -> PyResult<quota_core::ClientQuotaType> {
    if let Some(t) = crate::quota_type::by_identity(ob) {
        return Ok(t);
    }
    QuotaTypeArg::extract_slow(&Borrowed::from_ptr(py, ob))
}

#[inline(always)]
unsafe fn value(py: Python<'_>, ob: *mut ffi::PyObject, name: &str) -> PyResult<f64> {
    let v = if ffi::PyFloat_CheckExact(ob) != 0 {
        return Ok(ffi::PyFloat_AS_DOUBLE(ob));
    } else if ffi::PyLong_CheckExact(ob) != 0 {
        ffi::PyLong_AsDouble(ob)
    } else {
        if ffi::PyBool_Check(ob) != 0 {
            return Err(PyTypeError::new_err(format!(
                "argument '{name}': must be a real number, not bool"
            )));
        }
        if ffi::PyUnicode_Check(ob) != 0 || ffi::PyBytes_Check(ob) != 0 {
            return Err(PyTypeError::new_err(format!(
                "argument '{name}': must be a real number, not str/bytes"
            )));
        }
        ffi::PyFloat_AsDouble(ob)
    };
    if v == -1.0 {
        if let Some(err) = PyErr::take(py) {
            return Err(crate::args::overflow_as_value_error(py, err, name));
        }
    }
    Ok(v)
}

#[inline(always)]
unsafe fn now_ms(py: Python<'_>, ob: *mut ffi::PyObject) -> PyResult<Option<i64>> {
    if ob.is_null() || ob == ffi::Py_None() {
        return Ok(None);
    }
    if ffi::PyLong_CheckExact(ob) != 0 {
        let v = ffi::PyLong_AsLongLong(ob);
        if v == -1 {
            if let Some(err) = PyErr::take(py) {
                return Err(crate::args::overflow_as_value_error(py, err, "now_ms"));
            }
        }
        return Ok(Some(v));
    }
    if ffi::PyBool_Check(ob) != 0 {
        return Err(PyTypeError::new_err("argument 'now_ms': must be an int or None, not bool"));
    }
    Borrowed::from_ptr(py, ob)
        .extract::<i64>()
        .map(Some)
        .map_err(|e| match crate::args::overflow_as_value_error(py, e, "now_ms") {
            e if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py) => e,
            e if e.get_type(py).is(crate::errors::quota_value_error(py)) => e,
            _ => PyTypeError::new_err("argument 'now_ms': must be an int or None"),
        })
}

/// The type check of a `user` / `client_id` argument, without decoding it.
#[inline(always)]
unsafe fn check_text(py: Python<'_>, ob: *mut ffi::PyObject, name: &str) -> PyResult<()> {
    if ffi::PyUnicode_Check(ob) == 0 {
        let tname = Borrowed::from_ptr(py, ob).get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "argument '{name}': must be str, not {tname}"
        )));
    }
    Ok(())
}

#[inline(always)]
unsafe fn text<'a>(
    py: Python<'_>,
    ob: *mut ffi::PyObject,
    name: &str,
) -> PyResult<std::borrow::Cow<'a, str>> {
    if ffi::PyUnicode_Check(ob) == 0 {
        let tname = Borrowed::from_ptr(py, ob).get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "argument '{name}': must be str, not {tname}"
        )));
    }
    let mut len: ffi::Py_ssize_t = 0;
    let data: *const c_char = ffi::PyUnicode_AsUTF8AndSize(ob, &mut len);
    if data.is_null() {
        // A lone surrogate: encode it as Java does ('?'), see `names::Name`.
        drop(PyErr::take(py));
        let s = Borrowed::from_ptr(py, ob).cast_unchecked::<PyString>();
        return Ok(std::borrow::Cow::Owned(crate::names::replace_surrogates(s)?));
    }
    if len as usize > quota_core::MAX_NAME_BYTES {
        return Err(to_py(quota_core::budget::name_too_long(name, len as usize)));
    }
    // SAFETY: CPython returns valid UTF-8 cached on the str object, alive while the argument is.
    Ok(std::borrow::Cow::Borrowed(std::str::from_utf8_unchecked(
        std::slice::from_raw_parts(data as *const u8, len as usize),
    )))
}

/// `(quota_type, value, now_ms=None)`, as the handle call takes them.
#[inline(always)]
unsafe fn handle_args(
    py: Python<'_>,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<(quota_core::ClientQuotaType, f64, Option<i64>)> {
    let [qt, v, now] = bind(
        py,
        NAME,
        ["quota_type", "value", "now_ms"],
        2,
        args,
        nargsf,
        kwnames,
    )?;
    Ok((quota_type(py, qt)?, value(py, v, "value")?, now_ms(py, now)?))
}

fn finish(py: Python<'_>, r: PyResult<i32>) -> *mut ffi::PyObject {
    match r {
        Ok(ms) => unsafe { ffi::PyLong_FromLong(ms as std::os::raw::c_long) },
        Err(e) => {
            e.restore(py);
            ptr::null_mut()
        }
    }
}

/// Runs `f` and turns a Rust panic into a Python exception instead of unwinding into CPython.
fn guarded(f: impl FnOnce(Python<'_>) -> PyResult<i32>) -> *mut ffi::PyObject {
    // SAFETY: CPython calls these functions with the thread attached.
    let py = unsafe { Python::assume_attached() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(py))) {
        Ok(r) => finish(py, r),
        Err(_) => finish(
            py,
            Err(crate::errors::KQuotaError::new_err(
                "internal error in kquota (panic)",
            )),
        ),
    }
}

unsafe extern "C" fn handle_record(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    guarded(|py| {
        let (t, v, now) = handle_args(py, args, nargsf, kwnames)?;
        // SAFETY: the method descriptor only calls us with instances of the handle class.
        let this = Borrowed::from_ptr(py, slf).cast_unchecked::<PyClientHandle>();
        this.get()
            .inner
            .record_and_get_throttle_time_ms(t, v, now)
            .map_err(to_py)
    })
}

unsafe extern "C" fn named_record(
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
        check_text(py, user, "user")?;
        check_text(py, client, "client_id")?;
        // SAFETY: the method descriptor only calls us with instances of the kernel class.
        let this = Borrowed::from_ptr(py, slf).cast_unchecked::<PyQuotaKernel>();
        let this = this.get();
        let key = Key::new(user, client, t);
        if let Some(k) = &key {
            this.names.prefetch(k);
        }
        let (v, now) = (value(py, v, "value")?, now_ms(py, now)?);
        let kernel = &*this.kernel;
        if let Some(r) = key
            .as_ref()
            .and_then(|k| this.names.with(k, kernel, |s| kernel.record_resolved(t, s, v, now)))
        {
            return r.map_err(to_py);
        }
        quota_core::check_record_value(v).map_err(to_py)?;
        named_miss(py, this, key, user, client, t, now, |s| {
            kernel.record_resolved(t, s, v, now)
        })
    })
}

#[inline]
unsafe fn strict_flag(py: Python<'_>, ob: *mut ffi::PyObject) -> PyResult<bool> {
    if ob.is_null() {
        return Ok(false);
    }
    Borrowed::from_ptr(py, ob)
        .extract::<bool>()
        .map_err(|_| PyTypeError::new_err("argument 'strict': must be a bool"))
}

unsafe extern "C" fn handle_request(
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
        this.get().inner.record_request_time(v, now).map_err(to_py)
    })
}

unsafe extern "C" fn handle_mutations(
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
        this.get()
            .inner
            .record_controller_mutations(v, now, strict)
            .map_err(to_py)
    })
}

unsafe extern "C" fn named_request(
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
        check_text(py, user, "user")?;
        check_text(py, client, "client_id")?;
        let (v, now) = (value(py, v, "thread_time_nanos")?, now_ms(py, now)?);
        quota_core::check_nanos(v).map_err(to_py)?;
        // SAFETY: the method descriptor only calls us with instances of the kernel class.
        let this = Borrowed::from_ptr(py, slf).cast_unchecked::<PyQuotaKernel>();
        let this = this.get();
        let kernel = &*this.kernel;
        let percent = v * quota_core::NANOS_TO_PERCENT;
        let key = Key::new(user, client, t);
        if let Some(r) = key.as_ref().and_then(|k| {
            this.names
                .with(k, kernel, |s| kernel.record_resolved(t, s, percent, now))
        }) {
            return r.map_err(to_py);
        }
        named_miss(py, this, key, user, client, t, now, |s| {
            kernel.record_resolved(t, s, percent, now)
        })
    })
}

unsafe extern "C" fn named_mutations(
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
        check_text(py, user, "user")?;
        check_text(py, client, "client_id")?;
        let (v, now, strict) = (
            value(py, v, "mutations")?,
            now_ms(py, now)?,
            strict_flag(py, strict)?,
        );
        quota_core::check_mutations(v).map_err(to_py)?;
        // SAFETY: the method descriptor only calls us with instances of the kernel class.
        let this = Borrowed::from_ptr(py, slf).cast_unchecked::<PyQuotaKernel>();
        let this = this.get();
        let kernel = &*this.kernel;
        let key = Key::new(user, client, t);
        if let Some(r) = key.as_ref().and_then(|k| {
            this.names
                .with(k, kernel, |s| kernel.record_resolved_mutations(s, v, now, strict))
        }) {
            return r.map_err(to_py);
        }
        // The resolution is remembered even when a strict call is rejected: the next call is the
        // same connection asking again.
        named_miss(py, this, key, user, client, t, now, |s| {
            kernel.record_resolved_mutations(s, v, now, strict)
        })
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
) -> PyResult<i32> {
    let (user_s, client_s) = (text(py, user, "user")?, text(py, client, "client_id")?);
    let Some((generation, sensor)) = this.kernel.resolution(t, &user_s, &client_s, now).map_err(to_py)? else {
        // No quota of this type exists: Kafka records nothing.
        return Ok(0);
    };
    let out = record(&sensor);
    if let Some(key) = key.filter(|_| generation != 0) {
        this.names.put(&key, &this.kernel, generation, sensor);
    }
    out.map_err(to_py)
}

unsafe extern "C" fn noop(
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
