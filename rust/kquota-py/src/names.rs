//! Principal and client-id arguments.

use std::borrow::Cow;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// A `user` / `client_id` argument: any `str`. A lone surrogate (which has no UTF-8 form) becomes
/// `?`, as Java's UTF-8 encoder does for the same name on a Kafka broker.
pub struct Name<'a>(pub Cow<'a, str>);

impl std::ops::Deref for Name<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Name<'a> {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let s = ob.cast::<PyString>().map_err(|_| {
            let tname = ob.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            PyTypeError::new_err(format!("user and client_id must be str, not {tname}"))
        })?;
        // Borrows the str's cached UTF-8, alive as long as the argument.
        let name = match <&'a str as FromPyObject<'a, 'py>>::extract(ob) {
            Ok(text) => Name(Cow::Borrowed(text)),
            Err(_) => Name(Cow::Owned(replace_surrogates(s)?)),
        };
        // Longer than Kafka's wire limit: refused before any of it is kept.
        if name.len() > quota_core::MAX_NAME_BYTES {
            let err = quota_core::name_budget::name_too_long("user/client_id", name.len());
            return Err(crate::errors::PyQuotaErr::from(err).into());
        }
        Ok(name)
    }
}

/// UTF-8 of `s` with every lone surrogate replaced by `?`.
pub fn replace_surrogates(s: Borrowed<'_, '_, PyString>) -> PyResult<String> {
    let bytes = s.call_method1("encode", ("utf-8", "replace"))?;
    let bytes = bytes.cast_into::<PyBytes>()?;
    Ok(String::from_utf8_lossy(bytes.as_bytes()).into_owned())
}
