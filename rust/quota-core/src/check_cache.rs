//! The O(1) record-then-check: between structural changes of a ring (a new sample, a purge) only
//! the current sample changes, so the sum and oldest start of the other samples are cached in
//! one 128-bit word, tagged with the ring `version` they were computed at. A check is then the
//! cached aggregate plus the current sample instead of a pass over the ring, and always equals
//! the full pass (see the test).

use portable_atomic::{AtomicU128, Ordering};

use crate::measurement::{window_size_ms, Measurement};
use crate::ring_state::{rel_ms, MAX_REL_MS};
use crate::sample_ring::{Cell, SampleRing};
use crate::types::WindowSpec;

const TAG_MASK: u64 = (1 << 33) - 1;

/// Sum (48-bit signed) and oldest start (47 bits) of the non-current samples, and the low 33
/// bits of the `version` they were read at, packed in 128 bits.
#[derive(Clone, Copy)]
struct Aggregate {
    base_sum: i64,
    oldest_rel: i64,
    tag: u64,
}

impl Aggregate {
    fn pack(self) -> u128 {
        let sum = (self.base_sum as u64) & ((1 << 48) - 1);
        let oldest = (self.oldest_rel as u64) & ((1 << 47) - 1);
        (sum as u128) | ((oldest as u128) << 48) | ((self.tag as u128) << 95)
    }

    #[inline]
    fn unpack(bits: u128) -> Aggregate {
        let sum = (bits as u64) & ((1 << 48) - 1);
        // Sign-extend the 48-bit sum.
        let base_sum = ((sum << 16) as i64) >> 16;
        let oldest_rel = ((bits >> 48) as u64 & ((1 << 47) - 1)) as i64;
        let tag = (bits >> 95) as u64 & TAG_MASK;
        Aggregate {
            base_sum,
            oldest_rel,
            tag,
        }
    }
}

/// The cached [`Aggregate`] of a ring's non-current samples, valid while its tag matches the
/// ring's `version`.
#[repr(transparent)]
pub(crate) struct CheckCache(AtomicU128);

impl CheckCache {
    pub(crate) fn new() -> Self {
        CheckCache(AtomicU128::new(0))
    }

    /// Records `value` at `t` into `ring` and measures at the same instant (record-then-check).
    #[inline]
    pub(crate) fn record_and_measure(
        &self,
        ring: &SampleRing,
        spec: &WindowSpec,
        value: f64,
        t: i64,
    ) -> Measurement {
        let (t, cur) = ring.add(spec, value, t);
        let version = ring.version();
        let agg = Aggregate::unpack(self.0.load(Ordering::Acquire));
        let cur_int = cur.value as i64;
        if agg.tag == version & TAG_MASK
            && t.saturating_sub(ring.purge_floor()) < spec.expire_age_ms()
            && cur_int as f64 == cur.value
            && cur_int.unsigned_abs() < 1 << 43
        {
            let sum = (agg.base_sum + cur_int) as f64;
            return Measurement {
                sum,
                window_ms: window_size_ms(spec, rel_ms(t), agg.oldest_rel.min(cur.start_rel)),
            };
        }
        self.measure_and_cache(ring, spec, t)
    }

    /// A full measurement that also refreshes the aggregate when it is exact.
    #[cold]
    fn measure_and_cache(&self, ring: &SampleRing, spec: &WindowSpec, now: i64) -> Measurement {
        let version = ring.version();
        let (m, exact) = ring.measure_exact(spec, now);
        if !exact {
            return m; // fractional samples: no integer aggregate to cache
        }
        if version != ring.version() {
            return m; // something moved while we looked; the next call tries again
        }
        let current = (ring.head() % spec.ring_len() as u64) as usize;
        let mut base: i64 = 0;
        let mut oldest = i64::MAX;
        for (slot, cell) in ring.cells().iter().enumerate() {
            let c = Cell::unpack(cell.load(Ordering::Acquire));
            if !c.started || slot == current {
                continue;
            }
            let v = c.value as i64;
            if v as f64 != c.value || v.unsigned_abs() >= 1 << 43 {
                return m;
            }
            base += v;
            oldest = oldest.min(c.start_rel);
        }
        if base.unsigned_abs() < 1 << 46 && ring.version() == version {
            let agg = Aggregate {
                base_sum: base,
                oldest_rel: oldest.min(MAX_REL_MS),
                tag: version & TAG_MASK,
            };
            self.0.store(agg.pack(), Ordering::Release);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The O(1) check must equal a full pass over the ring after every record, whatever the
    /// traffic: bursts, idle gaps that purge, unrecords, fractional values, late times.
    #[test]
    fn cached_check_equals_full_measurement() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for (window_num, secs) in [(11, 1), (1, 1), (2, 3), (5, 2), (30, 1)] {
            let sp = WindowSpec::new(window_num, secs).unwrap();
            let (cache, fast) = (CheckCache::new(), SampleRing::new(&sp, 0));
            let full = SampleRing::new(&sp, 0);
            let mut t = 0i64;
            for _ in 0..20_000 {
                t += match next(10) {
                    0 => next(30_000) as i64,
                    1 => -(next(500) as i64),
                    _ => next(400) as i64,
                };
                let v = match next(8) {
                    0 => -(next(1000) as f64), // an unrecord
                    1 => next(1000) as f64 + 0.25,
                    _ => next(100_000) as f64,
                };
                let a = cache.record_and_measure(&fast, &sp, v, t);
                let (ft, _) = full.add(&sp, v, t);
                let b = full.measure_exact(&sp, ft).0;
                assert_eq!(a, b, "window_num={window_num} t={t} v={v}");
            }
        }
    }

    #[test]
    fn aggregate_round_trips_negative_sums() {
        let a = Aggregate {
            base_sum: -(1 << 45),
            oldest_rel: MAX_REL_MS,
            tag: TAG_MASK,
        };
        let u = Aggregate::unpack(a.pack());
        assert_eq!(
            (u.base_sum, u.oldest_rel, u.tag),
            (a.base_sum, a.oldest_rel, a.tag)
        );
    }
}
