//! A lock-free sampled-window rate sensor with the semantics of Kafka's `Rate` over a
//! `WindowedSum` (`SampledStat.java`, `Rate.java`): the sample ring (`sample_ring`), its
//! measurement (`windowed_sum`), the O(1) record-then-check (`check_cache`) and the cached quota
//! bound (`limit_cache`) in one allocation.

use crate::check_cache::CheckCache;
use crate::limit_cache::LimitCache;
use crate::measurement::Measurement;
use crate::sample_ring::SampleRing;
use crate::token_bucket::TokenBucket;
use crate::types::WindowSpec;

/// One quota sensor's stats (one metric-tag set of one quota type).
// Field order is fixed (`repr(C)`). Every record-then-check reads the check cache, the cached
// bound and the ring's clock words, so those come first, together: a 64-byte hot head (one or
// two cache lines) instead of words spread over both ends of the sensor. A record then touches
// that head, one cell line and one last-event line (with 100k live clients the sensors do not
// fit in cache, and each line is a miss). The slots follow, and the cold tail (the heap and
// bucket pointers, written once) is at the end; the sensor's own cold head (tags, idle mark,
// see `QuotaSensor`) and the allocation's reference counts sit in front, so neighbouring
// allocations never share a cache line with this sensor's hot writes (false sharing cost 25%
// of two-thread throughput).
#[repr(C)]
pub struct RateSensor {
    check: CheckCache,
    limit: LimitCache,
    ring: SampleRing,
}

impl RateSensor {
    /// A sensor whose first sample starts at `now` (Kafka creates it on the first record).
    pub fn new(spec: &WindowSpec, now: i64) -> Self {
        RateSensor {
            check: CheckCache::new(),
            limit: LimitCache::new(),
            ring: SampleRing::new(spec, now),
        }
    }

    /// A sensor that also keeps a token bucket (a controller-mutation sensor: its `Rate` is
    /// Kafka's `mutation-rate`, the bucket its `tokens`).
    pub fn with_token_bucket(spec: &WindowSpec, now: i64) -> Self {
        let mut s = Self::new(spec, now);
        s.ring.slots.bucket = Some(Box::new(TokenBucket::new()));
        s
    }

    /// The token bucket, for controller-mutation sensors.
    #[inline]
    pub fn token_bucket(&self) -> Option<&TokenBucket> {
        self.ring.slots.bucket.as_deref()
    }

    /// Moves `t` to this sensor's latest time if it is earlier (and the latest time to `t` if
    /// later): every stat of the sensor then sees time move forward only.
    #[inline]
    pub fn clamp_time(&self, t: i64) -> i64 {
        self.ring.effective_time(t)
    }

    /// Adds `value` at time `t` (Kafka's `SampledStat.record`); returns the time it was recorded
    /// at (`t`, or the sensor's latest time if `t` is earlier).
    #[inline]
    pub fn record(&self, spec: &WindowSpec, value: f64, t: i64) -> i64 {
        self.ring.add(spec, value, t).0
    }

    /// Purges stale samples at `now` and returns the windowed sum and `W`
    /// (`SampledStat.measure` + `Rate.windowSize`).
    pub fn measure(&self, spec: &WindowSpec, now: i64) -> Measurement {
        let now = self.ring.effective_time(now);
        self.measure_at(spec, now)
    }

    fn measure_at(&self, spec: &WindowSpec, now: i64) -> Measurement {
        self.ring.measure_exact(spec, now).0
    }

    /// Records `value` at `t` and measures at the same instant (record-then-check), in O(1)
    /// while the ring's other samples are unchanged (see `check_cache`).
    #[inline]
    pub fn record_and_measure(&self, spec: &WindowSpec, value: f64, t: i64) -> Measurement {
        self.check.record_and_measure(&self.ring, spec, value, t)
    }

    /// The bound cached for configuration generation `generation`, if that is the one cached.
    #[inline]
    pub fn cached_limit(&self, generation: u64) -> Option<f64> {
        self.limit.cached(generation)
    }

    /// Caches `limit` for `generation` unless a newer generation is cached or another thread is
    /// writing (it then simply is not cached this time).
    pub fn store_limit(&self, limit: f64, generation: u64) {
        self.limit.store(limit, generation)
    }

    /// The last bound cached for any generation, if one ever was.
    pub fn last_limit(&self) -> Option<f64> {
        self.limit.last()
    }

    /// Latest time this sensor was recorded into or measured at.
    pub fn last_seen_ms(&self) -> i64 {
        self.ring.latest()
    }

    /// The measurement [`measure`](Self::measure) would return at `now`, without purging or
    /// moving the sensor's clock (read-only, for metrics and expiry: see `windowed_sum`).
    pub fn peek(&self, spec: &WindowSpec, now: i64) -> Measurement {
        self.ring.peek(spec, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throttle::throttle_time_ms;

    fn spec() -> WindowSpec {
        WindowSpec::default()
    }

    #[test]
    fn fresh_sensor_assumes_n_minus_one_windows() {
        let s = RateSensor::new(&spec(), 0);
        let m = s.record_and_measure(&spec(), 5000.0, 0);
        assert_eq!(m.window_ms, 10_000);
        assert_eq!(m.sum, 5000.0);
        assert_eq!(m.rate(), 500.0);
    }

    #[test]
    fn public_example_default_client_quota() {
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        for i in 0..10 {
            let m = s.record_and_measure(&sp, 400.0, i * 1000);
            assert_eq!(throttle_time_ms(&m, 500.0), 0, "t={i}s");
        }
        let m = s.record_and_measure(&sp, 2300.0, 10_500);
        assert_eq!(m.window_ms, 10_500);
        assert_eq!(throttle_time_ms(&m, 500.0), 2100);
    }

    /// A request-time sensor alone: thread time as percent of a thread (KIP-124), fractional
    /// values through Kafka's slot-order double sum. semantics.md's REQUEST example.
    #[test]
    fn request_time_sensor_public_example() {
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        let pct = |nanos: f64| crate::validate::thread_time_percent(nanos).unwrap();
        for i in 0..10 {
            let m = s.record_and_measure(&sp, pct(4e6), i * 1000);
            assert_eq!(throttle_time_ms(&m, 1.0), 0);
        }
        let m = s.record_and_measure(&sp, pct(67.1e6), 10_500);
        assert_eq!(m.window_ms, 10_500);
        assert_eq!(throttle_time_ms(&m, 1.0), 210);
        // The same sum as Kafka's: doubles added in slot order.
        let mut kafka = 0.0f64;
        for v in [
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
            pct(4e6),
        ] {
            kafka += v;
        }
        kafka += pct(67.1e6);
        assert_eq!(m.sum, kafka);
    }

    #[test]
    fn stale_samples_are_purged_by_last_event() {
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        s.record(&sp, 100.0, 0);
        s.record(&sp, 100.0, 5000);
        // 11 s after the first event: that sample is reset, the one from 5 s is kept.
        let m = s.measure(&sp, 11_000);
        assert_eq!(m.sum, 100.0);
        // E = 11000 - 5000 = 6000 -> 6 full windows < 10 -> W = 6000 + 4000
        assert_eq!(m.window_ms, 10_000);
        let m = s.measure(&sp, 10_999 + 5000);
        assert_eq!(m.sum, 100.0);
        let m = s.measure(&sp, 11_000 + 5000);
        assert_eq!(m.sum, 0.0);
    }

    #[test]
    fn earlier_time_is_read_as_latest() {
        let sp = spec();
        let s = RateSensor::new(&sp, 10_000);
        s.record(&sp, 1000.0, 10_000);
        let t = s.record(&sp, 1000.0, 2_000);
        assert_eq!(t, 10_000);
        let m = s.measure(&sp, 0);
        assert_eq!(m.window_ms, 10_000);
        assert_eq!(m.sum, 2000.0);
    }

    #[test]
    fn backwards_time_acts_like_the_latest_time() {
        // With one sample Kafka's W can be 1 ms; a record "in the past" must act exactly like one
        // at the sensor's latest time instead of shrinking W further or going negative.
        let sp = WindowSpec::new(1, 1).unwrap();
        let past = RateSensor::new(&sp, 5000);
        past.record(&sp, 10.0, 5000);
        let m_past = past.record_and_measure(&sp, 10.0, 1000);
        let same = RateSensor::new(&sp, 5000);
        same.record(&sp, 10.0, 5000);
        let m_same = same.record_and_measure(&sp, 10.0, 5000);
        assert_eq!(m_past, m_same);
        assert_eq!(throttle_time_ms(&m_past, 1000.0), 19);
    }

    #[test]
    fn fractional_values_are_summed_in_slot_order_like_kafka() {
        let sp = spec();
        let s = RateSensor::new(&sp, 0);
        s.record(&sp, 0.1, 0);
        s.record(&sp, 0.2, 1000);
        s.record(&sp, 0.3, 2000);
        let expected = ((0.0 + 0.1) + 0.2) + 0.3; // 0.6000000000000001, not 0.6
        assert_eq!(s.measure(&sp, 2000).sum, expected);
        // Whole numbers take the integer path and agree with the double sum.
        let s = RateSensor::new(&sp, 0);
        s.record(&sp, 9_007_199_254.0, 0);
        s.record(&sp, 3.0, 1000);
        assert_eq!(s.measure(&sp, 1000).sum, 9_007_199_254.0 + 3.0);
        // Above 2^43 the double path is used.
        let s = RateSensor::new(&sp, 0);
        let big = 2f64.powi(53);
        s.record(&sp, big, 0);
        s.record(&sp, 1.0, 1000);
        assert_eq!(s.measure(&sp, 1000).sum, big + 1.0);
    }

    /// Memory per sensor is a budget (<= 512 B resident per live sensor at 1M sensors): the
    /// token bucket pointer must live in padding, not grow every byte-rate sensor.
    #[test]
    fn sensor_size_is_unchanged_by_the_bucket_pointer() {
        assert_eq!(std::mem::size_of::<crate::sample_ring::Slots>(), 304);
        assert_eq!(std::mem::size_of::<RateSensor>(), 368);
    }

    /// What every record-then-check reads (check cache, bound, ring clock) is one 64-byte head.
    #[test]
    fn the_hot_fields_are_one_64_byte_head() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(RateSensor, check), 0);
        assert_eq!(offset_of!(RateSensor, limit), 16);
        assert_eq!(offset_of!(RateSensor, ring), 32);
        assert_eq!(offset_of!(crate::sample_ring::SampleRing, slots), 32);
    }

    #[test]
    fn peek_equals_measure_and_changes_nothing() {
        let sp = spec();
        let filled = || {
            let s = RateSensor::new(&sp, 0);
            for (v, t) in [(100.0, 0), (0.25, 1500), (300.0, 4000), (7.0, 9000)] {
                s.record(&sp, v, t);
            }
            s
        };
        let a = filled();
        for now in [9000, 12_000, 14_999, 15_000, 20_000, 40_000] {
            let peeked = a.peek(&sp, now);
            assert_eq!(a.last_seen_ms(), 9000, "peek must not move the clock");
            assert_eq!(peeked, filled().measure(&sp, now), "now={now}");
        }
        // An earlier time is read as the latest time, as in measure.
        assert_eq!(a.peek(&sp, 0), a.peek(&sp, 9000));
    }

    #[test]
    fn ring_wraps_and_reuses_oldest_slot() {
        let sp = WindowSpec::new(2, 1).unwrap(); // 3 slots
        let s = RateSensor::new(&sp, 0);
        for i in 0..7 {
            s.record(&sp, 1.0, i * 1000);
        }
        // Only the last window_num (2) samples have last events within 2 s of 6000; the third
        // slot (started at 4000) is kept too: its last event is 4000, 2000 ms old -> purged.
        let m = s.measure(&sp, 6000);
        assert_eq!(m.sum, 2.0);
    }

    #[test]
    fn concurrent_records_lose_nothing() {
        use std::sync::Arc;
        let sp = spec();
        let s = Arc::new(RateSensor::new(&sp, 0));
        let threads: Vec<_> = (0..4)
            .map(|k| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    for i in 0..50_000i64 {
                        // Times move through several windows so advances race with adds.
                        s.record(&sp, 1.0, i / 10_000 * 1000 + k);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let m = s.measure(&sp, 4003);
        assert_eq!(m.sum, 200_000.0);
    }
}
