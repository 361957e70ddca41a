//! The Python exception hierarchy and the one place kernel errors become Python exceptions.

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use quota_core::QuotaError;

pyo3::create_exception!(
    kquota.exceptions,
    KQuotaError,
    PyException,
    "Base class of every error kquota raises."
);
pyo3::create_exception!(
    kquota.exceptions,
    ThrottlingQuotaExceededError,
    KQuotaError,
    "A strict controller-mutation request was rejected; `throttle_time_ms` says how long to back off."
);
pyo3::create_exception!(
    kquota.exceptions,
    TooManyConnectionsError,
    KQuotaError,
    "A connection from an address already holding `max.connections.per.ip` (or its override); `ip` and `max_connections` say which and how many (Kafka's TooManyConnectionsException)."
);

static QUOTA_CONFIG_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static QUOTA_VALUE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A class deriving from both `KQuotaError` and `ValueError`, so callers may catch either.
fn value_error_subclass(py: Python<'_>, name: &str, doc: &str) -> PyResult<Py<PyType>> {
    let bases = PyTuple::new(py, [py.get_type::<KQuotaError>(), py.get_type::<PyValueError>()])?;
    let ns = PyDict::new(py);
    ns.set_item("__module__", "kquota.exceptions")?;
    ns.set_item("__doc__", doc)?;
    let cls = py.get_type::<PyType>().call1((name, bases, ns))?;
    Ok(cls.cast_into::<PyType>()?.unbind())
}

pub fn quota_config_error(py: Python<'_>) -> &Bound<'_, PyType> {
    QUOTA_CONFIG_ERROR
        .get_or_init(py, || {
            value_error_subclass(
                py,
                "QuotaConfigError",
                "A rejected quota configuration; nothing of the call was applied.",
            )
            .expect("creating QuotaConfigError")
        })
        .bind(py)
}

pub fn quota_value_error(py: Python<'_>) -> &Bound<'_, PyType> {
    QUOTA_VALUE_ERROR
        .get_or_init(py, || {
            value_error_subclass(py, "QuotaValueError", "A bad recorded value or argument value.")
                .expect("creating QuotaValueError")
        })
        .bind(py)
}

/// The binding's error: a kernel error, mapped to the Python hierarchy in one place (the
/// `From<PyQuotaErr> for PyErr` below), or a Python error met on the way. Functions returning
/// `PyQuotaResult` use `?` on both kinds, as polars' `PyPolarsErr` lets its bindings do.
pub enum PyQuotaErr {
    Core(QuotaError),
    Py(PyErr),
}

/// The result type of binding functions that call the kernel.
pub type PyQuotaResult<T> = Result<T, PyQuotaErr>;

impl From<QuotaError> for PyQuotaErr {
    fn from(err: QuotaError) -> Self {
        PyQuotaErr::Core(err)
    }
}

impl From<PyErr> for PyQuotaErr {
    fn from(err: PyErr) -> Self {
        PyQuotaErr::Py(err)
    }
}

impl From<PyQuotaErr> for PyErr {
    fn from(err: PyQuotaErr) -> PyErr {
        match err {
            PyQuotaErr::Core(e) => core_to_py(e),
            PyQuotaErr::Py(e) => e,
        }
    }
}

/// A `QuotaValueError` with `msg` (a bad argument value that is not configuration).
pub fn invalid_argument(msg: impl Into<String>) -> PyQuotaErr {
    PyQuotaErr::Core(QuotaError::InvalidArgument(msg.into()))
}

/// A `QuotaConfigError` with `msg` (a rejected configuration the kernel never saw, such as an
/// unknown config key).
pub fn config_error(msg: impl Into<String>) -> PyQuotaErr {
    PyQuotaErr::Py(Python::attach(|py| {
        PyErr::from_type(quota_config_error(py).clone(), msg.into())
    }))
}

/// Maps a kernel error to its Python exception: the one place the variants meet the classes.
fn core_to_py(err: QuotaError) -> PyErr {
    Python::attach(|py| {
        let msg = err.to_string();
        let cls = match err {
            QuotaError::InvalidConfig { .. } => quota_config_error(py),
            QuotaError::InvalidValue(_) | QuotaError::InvalidArgument(_) => quota_value_error(py),
            QuotaError::Unsupported(_) | QuotaError::Closed => return KQuotaError::new_err(msg),
            QuotaError::ThrottlingQuotaExceeded { throttle_time_ms } => {
                let err = ThrottlingQuotaExceededError::new_err(msg);
                if let Err(e) = err.value(py).setattr("throttle_time_ms", throttle_time_ms) {
                    return e;
                }
                return err;
            }
        };
        PyErr::from_type(cls.clone(), msg)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("KQuotaError", py.get_type::<KQuotaError>())?;
    m.add("QuotaConfigError", quota_config_error(py))?;
    m.add("QuotaValueError", quota_value_error(py))?;
    let throttling = py.get_type::<ThrottlingQuotaExceededError>();
    // Instances raised by the kernel carry their own value; this is the default for others.
    throttling.setattr("throttle_time_ms", 0)?;
    m.add("ThrottlingQuotaExceededError", throttling)?;
    m.add(
        "TooManyConnectionsError",
        py.get_type::<TooManyConnectionsError>(),
    )?;
    Ok(())
}
