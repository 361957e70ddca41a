//! Throttle times: Kafka's `QuotaUtils.throttleTime` for sampled rates and
//! `ControllerMutationQuotaManager.throttleTimeMs` for the token bucket (KIP-599).

use crate::measurement::Measurement;

/// Rounds a positive throttle in ms like Java's `Math.round` (half up; `f64::round` is half away
/// from zero, the same for these positive values), saturated at `i32::MAX` instead of wrapping
/// like Kafka's `.toInt`; anything not above 0 (or NaN) is 0.
#[inline]
fn round_ms(raw: f64) -> i32 {
    let rounded = raw.round();
    if rounded >= i32::MAX as f64 {
        i32::MAX
    } else if rounded > 0.0 {
        rounded as i32
    } else {
        0
    }
}

/// Kafka's `QuotaUtils.throttleTime`: `round((rate - bound) / bound * W)` when the rate exceeds
/// the bound, else 0.
#[inline]
pub fn throttle_time_ms(m: &Measurement, bound: f64) -> i32 {
    let rate = m.rate();
    // Written so that a NaN rate never throttles.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    if !(rate > bound) {
        return 0;
    }
    round_ms((rate - bound) / bound * m.window_ms as f64)
}

/// How long a rate of `bound` per second takes to allow `value`: `round(value / bound * 1000)`
/// ms, rounded and saturated like the throttles above. Not a Kafka rule: the proxy mutes for at
/// least this after delivering an over-quota Fetch response instead of Kafka's empty answer (see
/// `fetch_answer`; Kafka's throttle, topped up to `samples - 1` windows, would let responses
/// larger than the whole window through faster than the quota).
#[inline]
pub fn time_at_bound_ms(value: f64, bound: f64) -> i32 {
    round_ms(value / bound * 1000.0)
}

/// `ControllerMutationQuotaManager.throttleTimeMs`: `round(-tokens / quota * 1000)` for a bucket
/// in debt, else 0.
#[inline]
pub fn mutation_throttle_time_ms(tokens: f64, quota: f64) -> i32 {
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    if !(tokens < 0.0) {
        return 0;
    }
    round_ms(-tokens / quota * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_saturates() {
        let m = Measurement {
            sum: 1e30,
            window_ms: 10_000,
        };
        assert_eq!(throttle_time_ms(&m, 1.0), i32::MAX);
        let m = Measurement {
            sum: 10.0,
            window_ms: 10_000,
        };
        assert_eq!(throttle_time_ms(&m, 1.0), 0);
    }

    #[test]
    fn time_at_bound_is_value_over_bound() {
        assert_eq!(time_at_bound_ms(990_000.0, 200_000.0), 4950);
        assert_eq!(time_at_bound_ms(1.0, 3.0), 333);
        assert_eq!(time_at_bound_ms(0.0, 100.0), 0);
        // A zero bound blocks: the longest throttle, as Kafka's throttle for a zero bound.
        assert_eq!(time_at_bound_ms(1.0, 0.0), i32::MAX);
        assert_eq!(time_at_bound_ms(f64::NAN, 1.0), 0);
    }

    #[test]
    fn throttle_rounds_half_up() {
        // rate 1.00005 over bound 1 with W = 10000 -> 0.5 ms -> 1
        let m = Measurement {
            sum: 10.0005,
            window_ms: 10_000,
        };
        assert_eq!(throttle_time_ms(&m, 1.0), 1);
    }

    #[test]
    fn nan_rate_never_throttles() {
        let m = Measurement {
            sum: f64::NAN,
            window_ms: 10_000,
        };
        assert_eq!(throttle_time_ms(&m, 1.0), 0);
        assert_eq!(mutation_throttle_time_ms(f64::NAN, 1.0), 0);
    }

    #[test]
    fn mutation_throttle_formula_and_saturation() {
        assert_eq!(mutation_throttle_time_ms(0.0, 5.0), 0);
        assert_eq!(mutation_throttle_time_ms(3.0, 5.0), 0);
        assert_eq!(mutation_throttle_time_ms(-5.0, 5.0), 1000);
        assert_eq!(mutation_throttle_time_ms(-0.0125, 10.0), 1); // 1.25 ms
        assert_eq!(mutation_throttle_time_ms(-0.0175, 10.0), 2); // 1.75 ms
        assert_eq!(mutation_throttle_time_ms(-1e30, 1.0), i32::MAX);
    }
}
