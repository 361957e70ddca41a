//! A quota sensor: Kafka's `Sensor` for one metric-tag set of one quota type. It holds its tags,
//! its stats (a [`RateSensor`], plus a token bucket for controller mutations) and what expiry
//! needs to know about its idleness.

use crate::idle::IdleMark;
use crate::keys::Tags;
use crate::rate::RateSensor;

/// A live sensor and the metric tags it measures. The tags and the idle mark (8 bytes each)
/// come first: together a cold 16-byte head in front of the 16-byte aligned stats (see
/// `RateSensor`), with no padding.
#[repr(C)]
pub struct QuotaSensor {
    pub tags: Tags,
    /// Idleness on the kernel's clock (expiry passes only; the record path never touches it).
    pub idle: IdleMark,
    pub rate: RateSensor,
}

impl QuotaSensor {
    /// A sensor for `(user, client_id)` with `rate` as its stats, created at caller time `now`
    /// and kernel time `mono_ms`.
    pub fn new(user: &str, client_id: &str, rate: RateSensor, now: i64, mono_ms: i64) -> Self {
        QuotaSensor {
            tags: Tags::new(user, client_id),
            idle: IdleMark::new(now, mono_ms),
            rate,
        }
    }
}

#[cfg(test)]
mod tests {
    /// Memory per sensor is a budget (<= 512 B resident per live sensor at 1M sensors, with the
    /// registry's share and the tags): the head must not grow the sensor past its stats.
    #[test]
    fn the_head_adds_16_bytes_to_the_stats() {
        assert_eq!(std::mem::size_of::<super::QuotaSensor>(), 384);
    }
}
