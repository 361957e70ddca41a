//! A sensor's cached quota bound: one seqlock-read `(bound, configuration generation)` pair, so
//! the record path reads the limit without asking the configuration (or a callback).

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// `generation` while a writer updates `limit`.
const WRITING: u64 = u64::MAX;

// `repr(C)`: the two words stay together in the sensor's hot head (see `RateSensor`).
#[repr(C)]
pub(crate) struct LimitCache {
    /// Cached quota bound (f64 bits; +inf = unlimited), read under `generation`.
    limit: AtomicU64,
    /// The configuration generation `limit` was computed for, or `WRITING` while it changes
    /// (a seqlock: a reader that sees the same generation before and after read a whole value).
    generation: AtomicU64,
}

impl LimitCache {
    pub(crate) fn new() -> Self {
        LimitCache {
            limit: AtomicU64::new(f64::INFINITY.to_bits()),
            generation: AtomicU64::new(0),
        }
    }

    /// The bound cached for configuration generation `generation`, if that is the one cached.
    #[inline]
    pub(crate) fn cached(&self, generation: u64) -> Option<f64> {
        if self.generation.load(Ordering::Acquire) != generation {
            return None;
        }
        let bits = self.limit.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (self.generation.load(Ordering::Relaxed) == generation).then(|| f64::from_bits(bits))
    }

    /// Caches `limit` for `generation` unless a newer generation is cached or another thread is
    /// writing (it then simply is not cached this time).
    pub(crate) fn store(&self, limit: f64, generation: u64) {
        let cur = self.generation.load(Ordering::Acquire);
        if cur == WRITING || cur >= generation {
            return;
        }
        if self
            .generation
            .compare_exchange(cur, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        self.limit.store(limit.to_bits(), Ordering::Relaxed);
        self.generation.store(generation, Ordering::Release);
    }

    /// The last bound cached for any generation, if one ever was.
    pub(crate) fn last(&self) -> Option<f64> {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == 0 || generation == WRITING {
            return None;
        }
        self.cached(generation)
    }
}

#[cfg(test)]
mod tests {
    use super::LimitCache;

    #[test]
    fn keeps_the_newest_generation() {
        let c = LimitCache::new();
        assert_eq!(c.cached(1), None);
        assert_eq!(c.last(), None);
        c.store(5.0, 2);
        c.store(4.0, 1);
        assert_eq!(c.cached(2), Some(5.0));
        assert_eq!(c.cached(1), None);
        assert_eq!(c.last(), Some(5.0));
    }
}
