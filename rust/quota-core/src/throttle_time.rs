//! Kafka's per-entity `throttle-time` metric (an `Avg`), kept here per quota type (see
//! docs/semantics-notes.md).

use crate::rate::RateSensor;
use crate::types::WindowSpec;

/// A windowed average of throttle times: sum and count over sampled windows, which is what
/// Kafka's `Avg` (a `SampledStat`) computes.
pub(crate) struct ThrottleAvg {
    sum: RateSensor,
    count: RateSensor,
}

impl ThrottleAvg {
    pub(crate) fn new(spec: &WindowSpec, now: i64) -> Self {
        ThrottleAvg {
            sum: RateSensor::new(spec, now),
            count: RateSensor::new(spec, now),
        }
    }

    /// Adds one throttled response of `throttle_ms`.
    pub(crate) fn record(&self, spec: &WindowSpec, throttle_ms: f64, now: i64) {
        self.sum.record(spec, throttle_ms, now);
        self.count.record(spec, 1.0, now);
    }

    /// Average throttle (ms) of the throttled responses in the window; NaN when there were none
    /// (Kafka's `Avg` of no samples).
    pub(crate) fn average(&self, spec: &WindowSpec, now: i64) -> f64 {
        let count = self.count.peek(spec, now).sum;
        if count <= 0.0 {
            return f64::NAN;
        }
        self.sum.peek(spec, now).sum / count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_throttled_responses_in_the_window() {
        let spec = WindowSpec::default();
        let avg = ThrottleAvg::new(&spec, 0);
        assert!(avg.average(&spec, 0).is_nan());
        avg.record(&spec, 100.0, 0);
        avg.record(&spec, 300.0, 500);
        assert_eq!(avg.average(&spec, 500), 200.0);
        // 11 windows of 1 s later the samples are gone.
        assert!(avg.average(&spec, 12_000).is_nan());
    }
}
