//! Numeric arguments of the generic (PyO3) entry points, held to the rules of the fast entry
//! points (`fast/`, whose own vectorcall binding is `fast/vectorcall_args.rs`): a bool or a str
//! is not a number (`TypeError`), and a number too large for its slot is a bad value
//! (`QuotaValueError`), never a bare `OverflowError`.

use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyString};

use crate::errors::quota_value_error;

/// An `OverflowError` from converting argument `name` as a `QuotaValueError`; others unchanged.
pub fn overflow_as_value_error(py: Python<'_>, err: PyErr, name: &str) -> PyErr {
    if err.is_instance_of::<PyOverflowError>(py) {
        return PyErr::from_type(
            quota_value_error(py).clone(),
            format!("argument '{name}' is out of range: {}", err.value(py)),
        );
    }
    err
}

fn refuse_non_numbers(ob: &Borrowed<'_, '_, PyAny>, what: &str) -> PyResult<()> {
    if ob.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!("must be {what}, not bool")));
    }
    if ob.is_instance_of::<PyString>() || ob.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!("must be {what}, not str/bytes")));
    }
    Ok(())
}

/// A real number argument (`int` or `float`, not `bool`).
#[derive(Clone, Copy)]
pub struct Real(pub f64);

impl<'a, 'py> FromPyObject<'a, 'py> for Real {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        refuse_non_numbers(&ob, "a real number")?;
        ob.extract::<f64>()
            .map(Real)
            .map_err(|e| overflow_as_value_error(ob.py(), e, "number"))
    }
}

/// An integer argument (`int`, not `bool`) that fits in 64 bits.
#[derive(Clone, Copy)]
pub struct Int(pub i64);

impl<'a, 'py> FromPyObject<'a, 'py> for Int {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        refuse_non_numbers(&ob, "an int")?;
        ob.extract::<i64>()
            .map(Int)
            .map_err(|e| overflow_as_value_error(ob.py(), e, "int"))
    }
}

/// `Option<Int>` as the `Option<i64>` the kernel takes (`now_ms`).
#[inline]
pub fn ms(v: Option<Int>) -> Option<i64> {
    v.map(|i| i.0)
}
