//! `QuotaKernel._utilization`: the kernel's bounded utilization selection (KIP-1373, see
//! `quota_core::utilization`) as plain tuples; the selection runs with the GIL released, so only
//! the selected rows ever become Python objects.

use std::sync::Arc;

use pyo3::prelude::*;
use quota_core::{QuotaKernel, UtilizationSnapshot};

use crate::errors::PyQuotaResult;

/// `(quota type value, user, client_id, rate, quota or None, level or None, utilization, throttled)`.
pub type Row = (usize, String, String, f64, Option<f64>, Option<&'static str>, f64, bool);
/// `(quota type value, entities, rate, quota, utilization)` of the entities left out.
pub type Rest = (usize, usize, f64, f64, f64);

/// `(now_ms, rows, rest)` of [`QuotaKernel::utilization`].
pub fn utilization(
    py: Python<'_>,
    kernel: Arc<QuotaKernel>,
    now_ms: Option<i64>,
    max_entities: usize,
) -> PyQuotaResult<(i64, Vec<Row>, Vec<Rest>)> {
    let snap: UtilizationSnapshot = py.detach(move || kernel.utilization(now_ms, max_entities))?;
    let rows = snap
        .rows
        .into_iter()
        .map(|r| {
            (
                r.quota_type.index(),
                r.user.into_string(),
                r.client_id.into_string(),
                r.rate,
                r.quota,
                r.level.map(|l| l.name()),
                r.utilization,
                r.throttled,
            )
        })
        .collect();
    let rest = snap
        .rest
        .into_iter()
        .map(|r| (r.quota_type.index(), r.entities, r.rate, r.quota, r.utilization))
        .collect();
    Ok((snap.now_ms, rows, rest))
}
