//! A quota sensor: Kafka's `Sensor` for one metric-tag set of one quota type. It holds its tags,
//! its stats (a [`RateSensor`], plus a token bucket for controller mutations) and what expiry
//! needs to know about its idleness.

use crate::idle::IdleMark;
use crate::keys::Tags;
use crate::rate::RateSensor;

/// A live sensor and the metric tags it measures (tags first: a cold head, see `RateSensor`).
#[repr(C)]
pub struct QuotaSensor {
    pub tags: Tags,
    pub rate: RateSensor,
    /// Idleness on the kernel's clock (expiry passes only; the record path never touches it).
    pub idle: IdleMark,
}

impl QuotaSensor {
    /// A sensor for `(user, client_id)` with `rate` as its stats, created at caller time `now`
    /// and kernel time `mono_ms`.
    pub fn new(user: &str, client_id: &str, rate: RateSensor, now: i64, mono_ms: i64) -> Self {
        QuotaSensor {
            tags: Tags::new(user, client_id),
            rate,
            idle: IdleMark::new(now, mono_ms),
        }
    }
}
