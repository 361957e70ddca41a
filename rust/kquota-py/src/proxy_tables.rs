//! The protocol tables Python hands the data plane (`ApiTables`), checked: api keys and
//! versions are int16, a version range is not upside down.

use kquota_proxy::ApiTables;

use crate::errors::{invalid_argument, PyQuotaResult};

/// `ApiTables` from `ProxyDataPlane`'s arguments (see its stub for their meaning).
pub fn api_tables(
    flexible_from: &[i64],
    throttle_first: &[i64],
    parsed_versions: &[(i64, i64, i64)],
    python_keys: &[i64],
    exempt_keys: &[i64],
) -> PyQuotaResult<ApiTables> {
    Ok(ApiTables {
        flexible_from: keys(flexible_from, "flexible_from")?,
        throttle_first: keys(throttle_first, "throttle_first")?,
        parsed: ApiTables::version_ranges(&version_rows(parsed_versions)?),
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

fn version_rows(rows: &[(i64, i64, i64)]) -> PyQuotaResult<Vec<(i16, i16, i16)>> {
    rows.iter()
        .map(|&(k, lo, hi)| {
            let v = keys(&[k, lo, hi], "parsed_versions")?;
            if v[1] > v[2] {
                return Err(invalid_argument(format!(
                    "parsed_versions: api key {k} has min version {lo} above max {hi}"
                )));
            }
            Ok((v[0], v[1], v[2]))
        })
        .collect()
}
