//! Measuring a sample ring: Kafka's `SampledStat.measure` over a `WindowedSum`, with
//! `Rate.windowSize`, both as a use (purging stale samples) and as a read-only peek.

use portable_atomic::Ordering;

use crate::measurement::{window_size_ms, Measurement};
use crate::ring_state::rel_ms;
use crate::sample_ring::{Cell, SampleRing};
use crate::types::WindowSpec;

impl SampleRing {
    /// Purges stale samples at `now` and returns the windowed sum and `W`, also telling whether
    /// every sample is a whole number below 2^43 (only then can the non-current samples be cached
    /// as an integer aggregate, see `check_cache`). `now` is already the ring's effective time.
    #[inline]
    pub(crate) fn measure_exact(&self, spec: &WindowSpec, now: i64) -> (Measurement, bool) {
        let expire = spec.expire_age_ms();
        // Every started sample's last event is at least `purge_floor`, so when that is recent
        // no sample can be stale and the purge pass is skipped.
        if now.saturating_sub(self.purge_floor()) >= expire {
            self.purge(now, expire);
        }
        // Kafka adds the samples as doubles in slot order. When every value is a whole number
        // below 2^43 (always so for bytes) every partial sum is exact, so an integer sum equals
        // that double sum bit for bit. Both are taken in the one pass over the ring (fractional
        // values, e.g. request time in percent, would otherwise cost a second pass).
        let mut int_sum: i64 = 0;
        let mut float_sum = 0.0f64;
        let mut exact = true;
        let mut oldest = i64::MAX;
        for cell in self.cells().iter() {
            let c = Cell::unpack(cell.load(Ordering::Acquire));
            if c.started {
                let as_int = c.value as i64;
                exact &= (as_int as f64 == c.value) & (as_int.unsigned_abs() < 1 << 43);
                int_sum = int_sum.wrapping_add(as_int);
                float_sum += c.value;
                oldest = oldest.min(c.start_rel);
            }
        }
        let sum = if exact { int_sum as f64 } else { float_sum };
        let now_rel = rel_ms(now);
        let oldest = if oldest == i64::MAX { now_rel } else { oldest };
        let m = Measurement {
            sum,
            window_ms: window_size_ms(spec, now_rel, oldest),
        };
        (m, exact)
    }

    /// The measurement a use would return at `now` (or at the ring's latest time if that is
    /// later), without purging or moving the ring's clock: samples a measurement would purge
    /// count as empty samples starting at `now`, exactly as a purge leaves them. A metrics
    /// scrape must not count as use (Kafka's metric reads do not touch `lastRecordTime`), or no
    /// scraped sensor would ever expire.
    pub(crate) fn peek(&self, spec: &WindowSpec, now: i64) -> Measurement {
        let now = now.max(self.latest());
        let expire = spec.expire_age_ms();
        let now_rel = rel_ms(now);
        let mut sum = 0.0f64;
        let mut oldest = i64::MAX;
        let last_event = self.last_event();
        for (slot, cell) in self.cells().iter().enumerate() {
            let c = Cell::unpack(cell.load(Ordering::Acquire));
            if !c.started {
                continue;
            }
            if now.saturating_sub(last_event[slot].load(Ordering::Acquire)) >= expire {
                oldest = oldest.min(now_rel);
            } else {
                sum += c.value;
                oldest = oldest.min(c.start_rel);
            }
        }
        let oldest = if oldest == i64::MAX { now_rel } else { oldest };
        Measurement {
            sum,
            window_ms: window_size_ms(spec, now_rel, oldest),
        }
    }
}
