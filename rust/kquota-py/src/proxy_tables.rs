//! The protocol tables of the data plane (`ApiTables`): the versions the proxy parses are
//! `kquota_proxy::tables::PARSED_VERSIONS`, which Python reads (`parsed_versions`); the others
//! come from Python's arguments, checked: api keys and versions are int16.

use std::collections::BTreeMap;

use kquota_proxy::tables::PARSED_VERSIONS;
use kquota_proxy::ApiTables;
use pyo3::prelude::*;

use crate::errors::{invalid_argument, PyQuotaResult};

/// `ApiTables` from `ProxyDataPlane`'s arguments (see its stub for their meaning) and the
/// versions the proxy parses.
pub fn api_tables(
    flexible_from: &[i64],
    throttle_first: &[i64],
    python_keys: &[i64],
    exempt_keys: &[i64],
) -> PyQuotaResult<ApiTables> {
    Ok(ApiTables {
        flexible_from: keys(flexible_from, "flexible_from")?,
        throttle_first: keys(throttle_first, "throttle_first")?,
        parsed: ApiTables::parsed_versions(),
        python: ApiTables::key_set(&keys(python_keys, "python_keys")?),
        exempt: ApiTables::key_set(&keys(exempt_keys, "exempt_keys")?),
    })
}

fn keys(values: &[i64], what: &str) -> PyQuotaResult<Vec<i16>> {
    values
        .iter()
        .map(|&v| {
            i16::try_from(v)
                .map_err(|_| invalid_argument(format!("{what}: {v} is not an api key or version")))
        })
        .collect()
}

/// The versions the proxy parses, api key -> (min, max): a new dict at each call, so that no
/// Python code can change the table the data plane checks requests against.
#[pyfunction]
pub fn parsed_versions() -> BTreeMap<i16, (i16, i16)> {
    PARSED_VERSIONS.iter().map(|&(key, lo, hi)| (key, (lo, hi))).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parsed_versions, m)?)
}
