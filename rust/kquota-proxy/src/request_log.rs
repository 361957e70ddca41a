//! The native paths' request-log rows, kept until Python drains them (`take_request_log`) into
//! its request-log writer. The log's schema is owned by Python's request-log module; the row
//! here mirrors its columns, less `broker` (Python adds it).

use std::sync::{Arc, Mutex};

/// The request-log row without the broker column: (ts_ms, user, client_id, quota_type, value,
/// throttle_time_ms, shadow, topic), the other columns of Python's request-log schema;
/// `quota_type` is the `ClientQuotaType` value (Python writes its name); `shadow` is
/// (shadow_throttle_time_ms, shadow_delayed_bytes), `None` without a shadow configuration;
/// `topic` is `None` on a request's own row and names the topic on its topic rows (one per
/// topic of the request, `value` that topic's bytes).
pub type LogRow = (i64, Arc<str>, String, u8, f64, i32, Option<(i32, f64)>, Option<Box<str>>);

/// A row's values besides its time and names: (quota_type, value, throttle_time_ms, shadow).
pub type LogValues = (u8, f64, i32, Option<(i32, f64)>);

/// Rows kept between two drains at most (beyond, rows are dropped and counted).
const MAX_LOG_ROWS: usize = 1 << 20;

/// Now, in ms since the epoch: a row's `ts_ms`.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The rows since the last drain (bounded).
#[derive(Default)]
pub struct RequestLog {
    rows: Mutex<Vec<LogRow>>,
}

impl RequestLog {
    /// Adds a row stamped `ts` (ms since the epoch, [`now_ms`]; a response's rows share one) and
    /// `topic` (see [`LogRow`]); `false` if the log is full and the row dropped.
    pub fn add(&self, ts: i64, user: &Arc<str>, client_id: &str, values: LogValues, topic: Option<&str>) -> bool {
        let mut rows = self.rows.lock().unwrap();
        if rows.len() >= MAX_LOG_ROWS {
            return false;
        }
        let (quota_type, value, throttle_ms, shadow) = values;
        rows.push((
            ts,
            Arc::clone(user),
            client_id.to_owned(),
            quota_type,
            value,
            throttle_ms,
            shadow,
            topic.map(Box::from),
        ));
        true
    }

    /// The rows since the last call.
    pub fn take(&self) -> Vec<LogRow> {
        std::mem::take(&mut *self.rows.lock().unwrap())
    }
}
