//! `kquota.ClientQuotaType` on the Rust side.
//!
//! The enum is a Python `enum.IntEnum` defined in `python/kquota/quota_type.py`, as watchfiles
//! defines its `Change`: Rust reads a member as the core type of the same index and hands the
//! members back to Python. These values need to match `kquota/quota_type.py::ClientQuotaType`
//! (the core's `ClientQuotaType::index`); the members are checked against them when first loaded
//! and the Python module checks its names against [`_quota_types`] at import.
//!
//! `kquota.quota_type` hands its class over when it is imported ([`_register_quota_type`]):
//! the extension never imports the `kquota` package, so every arrow runs from the package to
//! the extension (tests/structure/test_structure_rust.py checks that no module imports `kquota`).
//!
//! Accepted arguments: the four members, or a member's name as a string (case-insensitive). A
//! plain `int` (or `bool`) is refused with `TypeError`, as before the enum moved to Python: a
//! quota type is never a bare number at the API.

use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;
use quota_core::ClientQuotaType as CoreType;

use crate::errors::PyQuotaErr;

/// The members by core index, owned for the life of the process.
static MEMBERS: PyOnceLock<[Py<PyAny>; 4]> = PyOnceLock::new();

/// The same members as raw pointers, for the per-request identity check (a relaxed load and a
/// compare each; null until loaded, so the first call takes the loading path).
static MEMBER_PTRS: [AtomicPtr<pyo3::ffi::PyObject>; 4] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];

fn load(class: &Bound<'_, PyAny>) -> PyResult<[Py<PyAny>; 4]> {
    let mut out: Vec<Py<PyAny>> = Vec::with_capacity(4);
    for t in CoreType::ALL {
        let member = class.getattr(t.name())?;
        // `int(member)` must be the core index (see the module docs).
        if member.extract::<usize>()? != t.index() {
            return Err(PyTypeError::new_err(format!(
                "kquota.quota_type.ClientQuotaType.{} does not have the value {}",
                t.name(),
                t.index()
            )));
        }
        out.push(member.unbind());
    }
    let members: [Py<PyAny>; 4] = out.try_into().expect("four members");
    for (slot, m) in MEMBER_PTRS.iter().zip(members.iter()) {
        slot.store(m.as_ptr(), Ordering::Release);
    }
    Ok(members)
}

fn members(py: Python<'_>) -> PyResult<&'static [Py<PyAny>; 4]> {
    MEMBERS.get(py).ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err(
            "kquota.quota_type has not registered ClientQuotaType yet (import kquota first)",
        )
    })
}

/// Called once by `kquota.quota_type` at import with its `ClientQuotaType`: checks every member's
/// value against the core and keeps the members. A second class (a reloaded module) is refused:
/// the members already handed out must stay the only ones.
#[pyfunction]
pub fn _register_quota_type(class: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = class.py();
    let members = MEMBERS.get_or_try_init(py, || load(class))?;
    for t in CoreType::ALL {
        if !class.getattr(t.name())?.is(members[t.index()].bind(py)) {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a ClientQuotaType is registered already (kquota.quota_type cannot be reloaded)",
            ));
        }
    }
    Ok(())
}

/// The member for `t` (what callbacks, delay queues and metrics receive).
pub fn member(py: Python<'_>, t: CoreType) -> PyResult<Bound<'_, PyAny>> {
    Ok(members(py)?[t.index()].bind(py).clone())
}

/// The core type of `ob` when it is one of the members: four pointer compares, no Python call.
#[inline(always)]
pub fn by_identity(ob: *mut pyo3::ffi::PyObject) -> Option<CoreType> {
    // Members are distinct objects, so at most one slot matches; null slots never do.
    (0..4)
        .find(|&i| MEMBER_PTRS[i].load(Ordering::Relaxed) == ob)
        .and_then(CoreType::from_index)
}

/// The member named `name`, case-insensitively; anything else is a `QuotaValueError`.
pub fn from_name(name: &str) -> Result<CoreType, quota_core::QuotaError> {
    CoreType::ALL
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            quota_core::QuotaError::InvalidArgument(format!(
                "unknown quota type {name:?}; expected one of PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION"
            ))
        })
}

/// A `quota_type` argument: a `ClientQuotaType` member, or its name as a string.
#[derive(Clone, Copy)]
pub struct QuotaTypeArg(pub CoreType);

impl QuotaTypeArg {
    /// The slow path of [`by_identity`]: loads the members on first use, then accepts a member
    /// or a name.
    #[cold]
    pub fn extract_slow(ob: &Borrowed<'_, '_, PyAny>) -> PyResult<CoreType> {
        let py = ob.py();
        let members = members(py)?;
        if let Some(i) = members.iter().position(|m| m.as_ptr() == ob.as_ptr()) {
            return Ok(CoreType::ALL[i]);
        }
        if let Ok(s) = ob.cast::<PyString>() {
            // A lone surrogate cannot name a type; it is a bad value, not an encoding error.
            let name = s.to_cow().map_err(|_| {
                PyErr::from(crate::errors::invalid_argument(
                    "unknown quota type (a string with a lone surrogate)",
                ))
            })?;
            return Ok(from_name(&name).map_err(PyQuotaErr::from)?);
        }
        Err(PyTypeError::new_err(format!(
            "quota_type must be a kquota.ClientQuotaType (or its name), not {}",
            ob.get_type().name()?
        )))
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for QuotaTypeArg {
    type Error = PyErr;

    #[inline]
    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Some(t) = by_identity(ob.as_ptr()) {
            return Ok(QuotaTypeArg(t));
        }
        Self::extract_slow(&ob).map(QuotaTypeArg)
    }
}

/// `(name, value, config key, metric group)` of every quota type in value order: the one source
/// `kquota.quota_type` takes its config keys and metric groups from.
#[pyfunction]
pub fn _quota_types() -> Vec<(&'static str, usize, &'static str, &'static str)> {
    CoreType::ALL
        .iter()
        .map(|t| (t.name(), t.index(), t.config_key(), t.metric_group()))
        .collect()
}

/// The value of a `quota_type` argument (a member or its name), with the record calls' rules
/// and messages: `kquota.quota_type.coerce_quota_type` converts through here.
#[pyfunction]
pub fn _quota_type_value(quota_type: QuotaTypeArg) -> usize {
    quota_type.0.index()
}
