//! Kafka's `TokenBucket` stat (KIP-599), lock-free.
//!
//! Tokens refill at the quota `Q` per second up to a burst of `window_num * window seconds * Q`
//! and a recorded value takes tokens away (possibly below zero). Kafka keeps `(tokens,
//! lastUpdateMs)` under the sensor's lock and refills on every measure and record; here the pair
//! is one 128-bit cell updated by compare-and-swap, so each operation is one atomic
//! read-refill-modify-write and concurrent callers never lose a recorded value.
//!
//! A new bucket holds `+inf` tokens and no last-update time, which the first refill turns into
//! exactly the burst: Kafka's bucket starts at 0 tokens with its last update at the epoch, so on a
//! wall clock it is full at its first use too ("starts full"), and here that holds on any clock.
//! While a sensor has no quota Kafka still runs the bucket with a bound of `Long.MAX_VALUE`, which
//! refills it to (practically) infinity on any use; [`TokenBucket::fill`] is that.

use portable_atomic::{AtomicU128, Ordering};

/// Outcome of a strict take (Kafka's `checkQuotas` then `record`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StrictTake {
    /// The bucket was not in debt: the value was taken (tokens may now be negative).
    Taken,
    /// The bucket was already in debt (tokens < 0) after refilling: nothing was taken.
    Rejected { tokens: f64 },
}

pub struct TokenBucket {
    /// `tokens` (f64 bits) in the low half, `last_update_ms` in the high half.
    state: AtomicU128,
}

/// `last_update_ms` of a bucket that was never refilled.
const NEVER: i64 = i64::MIN;

#[inline]
fn pack(tokens: f64, last_ms: i64) -> u128 {
    ((last_ms as u64 as u128) << 64) | tokens.to_bits() as u128
}

#[inline]
fn unpack(bits: u128) -> (f64, i64) {
    (f64::from_bits(bits as u64), (bits >> 64) as u64 as i64)
}

/// `TokenBucket.refill`: `min(burst, tokens + quota * elapsed seconds)`.
#[inline]
fn refill(tokens: f64, last_ms: i64, quota: f64, burst: f64, now_ms: i64) -> f64 {
    if last_ms == NEVER {
        return burst;
    }
    // MetricsUtils.convert(ms, SECONDS) is `ms / 1000.0`.
    burst.min(tokens + quota * ((now_ms - last_ms) as f64 / 1000.0))
}

impl Default for TokenBucket {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenBucket {
    pub fn new() -> Self {
        TokenBucket {
            state: AtomicU128::new(pack(f64::INFINITY, NEVER)),
        }
    }

    /// Applies `f` to the refilled token count at `now_ms` and stores its answer (`None` keeps
    /// the refilled count); returns what `f` returned alongside the stored count.
    #[inline]
    fn update<R>(&self, quota: f64, burst: f64, now_ms: i64, mut f: impl FnMut(f64) -> (f64, R)) -> (f64, R) {
        let mut bits = self.state.load(Ordering::Acquire);
        loop {
            let (tokens, last) = unpack(bits);
            // Times only move forward here (the sensor's clock is monotonic), but a racing caller
            // may already have refilled to a later instant: refill from the later of the two.
            let at = if last == NEVER { now_ms } else { now_ms.max(last) };
            let (next, r) = f(refill(tokens, last, quota, burst, at));
            match self
                .state
                .compare_exchange_weak(bits, pack(next, at), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return (next, r),
                Err(actual) => bits = actual,
            }
        }
    }

    /// What any use of Kafka's bucket does while the sensor has no quota (bound `Long.MAX_VALUE`):
    /// fills it beyond any burst, so whatever limit comes next finds it full.
    pub fn fill(&self, now_ms: i64) {
        let mut bits = self.state.load(Ordering::Acquire);
        loop {
            let (_, last) = unpack(bits);
            let at = if last == NEVER { now_ms } else { now_ms.max(last) };
            match self.state.compare_exchange_weak(
                bits,
                pack(f64::INFINITY, at),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => bits = actual,
            }
        }
    }

    /// The tokens `measure` would report at `now_ms`, without storing the refill (a metrics
    /// scrape must not change the bucket).
    pub fn peek(&self, quota: f64, burst: f64, now_ms: i64) -> f64 {
        let (tokens, last) = unpack(self.state.load(Ordering::Acquire));
        let at = if last == NEVER { now_ms } else { now_ms.max(last) };
        refill(tokens, last, quota, burst, at)
    }

    /// `TokenBucket.measure`: refills to `now_ms` and returns the tokens.
    pub fn measure(&self, quota: f64, burst: f64, now_ms: i64) -> f64 {
        self.update(quota, burst, now_ms, |t| (t, ())).0
    }

    /// `TokenBucket.record`: refills, then takes `value` (`min(burst, tokens - value)`; a
    /// negative value gives tokens back). Returns the tokens left.
    pub fn record(&self, quota: f64, burst: f64, value: f64, now_ms: i64) -> f64 {
        self.update(quota, burst, now_ms, |t| (burst.min(t - value), ()))
            .0
    }

    /// Kafka's strict mode as one atomic step: refill, and take `value` only if the bucket is
    /// not in debt.
    pub fn take_strict(&self, quota: f64, burst: f64, value: f64, now_ms: i64) -> StrictTake {
        self.update(quota, burst, now_ms, |t| {
            if t < 0.0 {
                (t, StrictTake::Rejected { tokens: t })
            } else {
                (burst.min(t - value), StrictTake::Taken)
            }
        })
        .1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's TokenBucketTest.testRecord: quota 5/s, 10 samples of 2 s -> burst 100.
    #[test]
    fn kafka_token_bucket_record() {
        let (q, burst) = (5.0, 10.0 * 2.0 * 5.0);
        let b = TokenBucket::new();
        let t0 = 1_000_000;
        assert_eq!(b.measure(q, burst, t0), 100.0);
        b.record(q, burst, 60.0, t0);
        assert_eq!(b.measure(q, burst, t0), 40.0);
        b.record(q, burst, 5.0, t0 + 2000);
        assert_eq!(b.measure(q, burst, t0 + 2000), 45.0);
        b.record(q, burst, 60.0, t0 + 4000);
        assert_eq!(b.measure(q, burst, t0 + 4000), -5.0);
    }

    /// Kafka's TokenBucketTest.testUnrecord: giving tokens back never exceeds the burst.
    #[test]
    fn kafka_token_bucket_unrecord() {
        let (q, burst) = (5.0, 100.0);
        let b = TokenBucket::new();
        let t0 = 0;
        assert_eq!(b.measure(q, burst, t0), 100.0);
        b.record(q, burst, -60.0, t0);
        assert_eq!(b.measure(q, burst, t0), 100.0);
        b.record(q, burst, 60.0, t0 + 2000);
        assert_eq!(b.measure(q, burst, t0 + 2000), 40.0);
        b.record(q, burst, -60.0, t0 + 4000);
        assert_eq!(b.measure(q, burst, t0 + 4000), 100.0);
    }

    #[test]
    fn starts_full_whatever_the_clock() {
        for t in [-5_000_000i64, 0, 7, 1 << 45] {
            assert_eq!(TokenBucket::new().measure(2.0, 22.0, t), 22.0);
        }
        // ... and refills from its first use, also before 0.
        let b = TokenBucket::new();
        b.record(2.0, 22.0, 30.0, -100_000);
        assert_eq!(b.measure(2.0, 22.0, -90_000), 12.0);
    }

    #[test]
    fn filled_while_unlimited_then_full_under_a_new_limit() {
        let b = TokenBucket::new();
        b.record(1.0, 11.0, 16.0, 0); // -5
        b.fill(1000);
        assert_eq!(b.measure(1.0, 11.0, 1000), 11.0);
    }

    #[test]
    fn strict_takes_until_in_debt_then_rejects_without_taking() {
        let (q, burst) = (10.0, 110.0);
        let b = TokenBucket::new();
        assert_eq!(b.take_strict(q, burst, 100.0, 0), StrictTake::Taken); // 10 left
        assert_eq!(b.take_strict(q, burst, 30.0, 0), StrictTake::Taken); // -20: may go negative
        assert_eq!(
            b.take_strict(q, burst, 1.0, 0),
            StrictTake::Rejected { tokens: -20.0 }
        );
        assert_eq!(b.measure(q, burst, 0), -20.0);
        // 2 s later: -20 + 20 = 0, no longer in debt.
        assert_eq!(b.take_strict(q, burst, 5.0, 2000), StrictTake::Taken);
        assert_eq!(b.measure(q, burst, 2000), -5.0);
    }

    #[test]
    fn refills_over_time_up_to_the_burst() {
        let (q, burst) = (4.0, 44.0);
        let b = TokenBucket::new();
        b.record(q, burst, 44.0, 0);
        assert_eq!(b.measure(q, burst, 250), 1.0);
        assert_eq!(b.measure(q, burst, 5250), 21.0);
        assert_eq!(b.measure(q, burst, 60_000), 44.0);
    }

    #[test]
    fn concurrent_takes_lose_nothing() {
        let b = std::sync::Arc::new(TokenBucket::new());
        let (q, burst) = (1.0, 1e12);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = std::sync::Arc::clone(&b);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        b.record(q, burst, 1.0, 0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(b.measure(q, burst, 0), 1e12 - 80_000.0);
    }
}
