//! `ClientQuotaType` as a Python class, and argument extraction that also takes the names.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use quota_core::ClientQuotaType as CoreType;

/// Kafka's `ClientQuotaType`: which quota a request is measured against.
#[pyclass(eq, eq_int, frozen, hash, module = "kquota", name = "ClientQuotaType")]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[allow(clippy::upper_case_acronyms, non_camel_case_types)]
pub enum PyClientQuotaType {
    PRODUCE = 0,
    FETCH = 1,
    REQUEST = 2,
    CONTROLLER_MUTATION = 3,
}

impl PyClientQuotaType {
    pub fn core(self) -> CoreType {
        match self {
            PyClientQuotaType::PRODUCE => CoreType::Produce,
            PyClientQuotaType::FETCH => CoreType::Fetch,
            PyClientQuotaType::REQUEST => CoreType::Request,
            PyClientQuotaType::CONTROLLER_MUTATION => CoreType::ControllerMutation,
        }
    }

    pub fn from_core(t: CoreType) -> Self {
        match t {
            CoreType::Produce => PyClientQuotaType::PRODUCE,
            CoreType::Fetch => PyClientQuotaType::FETCH,
            CoreType::Request => PyClientQuotaType::REQUEST,
            CoreType::ControllerMutation => PyClientQuotaType::CONTROLLER_MUTATION,
        }
    }
}

#[pymethods]
impl PyClientQuotaType {
    /// The member's name, e.g. ``"PRODUCE"``.
    #[getter]
    fn name(&self) -> &'static str {
        self.core().name()
    }

    /// The dynamic config key of this type's quota, e.g. ``"producer_byte_rate"``.
    #[getter]
    fn config_key(&self) -> &'static str {
        self.core().config_key()
    }

    /// Kafka's metric group for this type, e.g. ``"Produce"``.
    #[getter]
    fn metric_group(&self) -> &'static str {
        self.core().metric_group()
    }

    /// All members in declaration order.
    #[staticmethod]
    fn members() -> Vec<PyClientQuotaType> {
        CoreType::ALL.iter().map(|t| Self::from_core(*t)).collect()
    }

    /// The member named ``name`` (case-insensitive).
    #[staticmethod]
    fn from_name(name: &str) -> PyResult<PyClientQuotaType> {
        CoreType::ALL
            .iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
            .map(|t| Self::from_core(*t))
            .ok_or_else(|| {
                crate::errors::to_py(quota_core::QuotaError::InvalidArgument(format!(
                    "unknown quota type {name:?}; expected one of PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION"
                )))
            })
    }

    fn __repr__(&self) -> String {
        format!("<ClientQuotaType.{}: {}>", self.core().name(), *self as u8)
    }
}

/// A `quota_type` argument: a `ClientQuotaType` member, or its name as a string.
#[derive(Clone, Copy)]
pub struct QuotaTypeArg(pub CoreType);

impl<'a, 'py> FromPyObject<'a, 'py> for QuotaTypeArg {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(t) = ob.cast::<PyClientQuotaType>() {
            return Ok(QuotaTypeArg(t.get().core()));
        }
        if let Ok(s) = ob.cast::<PyString>() {
            // A lone surrogate cannot name a type; it is a bad value, not an encoding error.
            let name = s.to_cow().map_err(|_| {
                crate::errors::to_py(quota_core::QuotaError::InvalidArgument(
                    "unknown quota type (a string with a lone surrogate)".into(),
                ))
            })?;
            return Ok(QuotaTypeArg(PyClientQuotaType::from_name(&name)?.core()));
        }
        Err(PyTypeError::new_err(format!(
            "quota_type must be a kquota.ClientQuotaType (or its name), not {}",
            ob.get_type().name()?
        )))
    }
}
