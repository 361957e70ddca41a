//! Binding of vectorcall arguments for the entry points in `entry`: exact `int` / `float` /
//! `str` / `ClientQuotaType` member fast paths, no intermediate objects.

use std::ffi::{c_char, CStr};
use std::ptr;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::NAME;
use crate::errors::PyQuotaErr;
use crate::quota_type::QuotaTypeArg;

/// Binds vectorcall arguments to `N` named parameters, the first `required` of them required.
///
/// # Safety
/// `args`/`nargsf`/`kwnames` must be a valid vectorcall argument triple.
#[inline(always)]
pub(super) unsafe fn bind<const N: usize>(
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
pub(super) unsafe fn quota_type(
    py: Python<'_>,
    ob: *mut ffi::PyObject,
) -> PyResult<quota_core::ClientQuotaType> {
    if let Some(t) = crate::quota_type::by_identity(ob) {
        return Ok(t);
    }
    QuotaTypeArg::extract_slow(&Borrowed::from_ptr(py, ob))
}

#[inline(always)]
pub(super) unsafe fn value(py: Python<'_>, ob: *mut ffi::PyObject, name: &str) -> PyResult<f64> {
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
            return Err(crate::numeric_args::overflow_as_value_error(py, err, name));
        }
    }
    Ok(v)
}

#[inline(always)]
pub(super) unsafe fn now_ms(py: Python<'_>, ob: *mut ffi::PyObject) -> PyResult<Option<i64>> {
    if ob.is_null() || ob == ffi::Py_None() {
        return Ok(None);
    }
    if ffi::PyLong_CheckExact(ob) != 0 {
        let v = ffi::PyLong_AsLongLong(ob);
        if v == -1 {
            if let Some(err) = PyErr::take(py) {
                return Err(crate::numeric_args::overflow_as_value_error(py, err, "now_ms"));
            }
        }
        return Ok(Some(v));
    }
    if ffi::PyBool_Check(ob) != 0 {
        return Err(PyTypeError::new_err(
            "argument 'now_ms': must be an int or None, not bool",
        ));
    }
    Borrowed::from_ptr(py, ob)
        .extract::<i64>()
        .map(Some)
        .map_err(
            |e| match crate::numeric_args::overflow_as_value_error(py, e, "now_ms") {
                e if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py) => e,
                e if e.get_type(py).is(crate::errors::quota_value_error(py)) => e,
                _ => PyTypeError::new_err("argument 'now_ms': must be an int or None"),
            },
        )
}

/// The type check of a `user` / `client_id` argument, without decoding it.
#[inline(always)]
pub(super) unsafe fn check_text(py: Python<'_>, ob: *mut ffi::PyObject, name: &str) -> PyResult<()> {
    if ffi::PyUnicode_Check(ob) == 0 {
        let tname = Borrowed::from_ptr(py, ob).get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "argument '{name}': must be str, not {tname}"
        )));
    }
    Ok(())
}

#[inline(always)]
pub(super) unsafe fn text<'a>(
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
        return Err(PyQuotaErr::from(quota_core::name_budget::name_too_long(name, len as usize)).into());
    }
    // SAFETY: CPython returns valid UTF-8 cached on the str object, alive while the argument is.
    Ok(std::borrow::Cow::Borrowed(std::str::from_utf8_unchecked(
        std::slice::from_raw_parts(data as *const u8, len as usize),
    )))
}

/// `(quota_type, value, now_ms=None)`, as the handle call takes them.
#[inline(always)]
pub(super) unsafe fn handle_args(
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

#[inline]
pub(super) unsafe fn strict_flag(py: Python<'_>, ob: *mut ffi::PyObject) -> PyResult<bool> {
    if ob.is_null() {
        return Ok(false);
    }
    Borrowed::from_ptr(py, ob)
        .extract::<bool>()
        .map_err(|_| PyTypeError::new_err("argument 'strict': must be a bool"))
}
