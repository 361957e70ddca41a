//! The data plane's rows as Python tuples: the request log's (`take_request_log`) and the shadow
//! configuration's totals (`shadow_totals`); and the shadow kernel a plane is made with.

use std::sync::Arc;

use kquota_proxy::request_log::LogRow;
use quota_core::{QuotaKernel, ShadowKernel};

use crate::errors::{invalid_argument, PyQuotaResult};

/// ``(ts_ms, user, client_id, quota type value, value, throttle_time_ms,
/// shadow_throttle_time_ms, shadow_delayed_bytes, topic)``.
pub type LogTuple = (i64, String, String, u8, f64, i32, Option<i32>, Option<f64>, Option<String>);
/// ``(user, client_id, quota type value, would-be throttle ms, would-be delayed bytes)``.
pub type ShadowTuple = (Option<String>, Option<String>, u8, u64, u64);

pub fn log_tuples(rows: Vec<LogRow>) -> Vec<LogTuple> {
    rows.into_iter()
        .map(|(ts, user, client, t, v, throttle, shadow, topic)| {
            let (shadow_ms, shadow_bytes) = (shadow.map(|s| s.0), shadow.map(|s| s.1));
            (ts, user.to_string(), client, t, v, throttle, shadow_ms, shadow_bytes, topic.map(String::from))
        })
        .collect()
}

pub fn shadow_tuples(shadow: &ShadowKernel) -> Vec<ShadowTuple> {
    shadow
        .totals()
        .into_iter()
        .map(|r| {
            let name = |n: Option<Arc<str>>| n.map(|n| n.to_string());
            (name(r.user), name(r.client_id), r.quota_type as u8, r.throttle_time_ms, r.delayed_bytes)
        })
        .collect()
}

/// The shadow of a plane enforcing `enforced`: `shadow`'s kernel, never the enforced one.
pub fn shadow_kernel(
    enforced: &Arc<QuotaKernel>,
    shadow: Option<&Arc<QuotaKernel>>,
) -> PyQuotaResult<Option<Arc<ShadowKernel>>> {
    match shadow {
        Some(s) if Arc::ptr_eq(s, enforced) => Err(invalid_argument(
            "the shadow configuration's kernel must not be the enforced one",
        )),
        Some(s) => Ok(Some(ShadowKernel::new(Arc::clone(s)))),
        None => Ok(None),
    }
}
