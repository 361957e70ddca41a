//! Idleness measured on the kernel's own clock.
//!
//! Callers may record with their own `now_ms`, so one caller's clock (even a stray timestamp
//! years ahead) must not decide when *other* sensors count as idle. When expiry runs without
//! an explicit `now_ms` (the background thread), a sensor is idle for as long as its latest
//! time has not changed, measured on CLOCK_MONOTONIC between expiry passes. The record path
//! writes nothing here: passes compare the sensor's latest time with what they saw before.

use std::sync::atomic::{AtomicI64, Ordering};

/// What the last expiry pass saw of a sensor's latest time, and since when (kernel clock).
pub struct IdleMark {
    seen: AtomicI64,
    since_mono_ms: AtomicI64,
}

impl IdleMark {
    /// A mark for a sensor whose latest time is `latest`, created at kernel time `mono_ms`.
    pub fn new(latest: i64, mono_ms: i64) -> Self {
        IdleMark {
            seen: AtomicI64::new(latest),
            since_mono_ms: AtomicI64::new(mono_ms),
        }
    }

    /// How long (kernel ms) the sensor's latest time has stayed `latest` as of `mono_ms`; a
    /// changed latest time restarts the count. Passes may race: both then restart it.
    pub fn idle_ms(&self, latest: i64, mono_ms: i64) -> i64 {
        if self.seen.load(Ordering::Acquire) != latest {
            self.seen.store(latest, Ordering::Release);
            self.since_mono_ms.store(mono_ms, Ordering::Release);
            return 0;
        }
        mono_ms.saturating_sub(self.since_mono_ms.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::IdleMark;

    #[test]
    fn a_use_restarts_idleness() {
        let m = IdleMark::new(5, 1000);
        assert_eq!(m.idle_ms(5, 1500), 500);
        assert_eq!(m.idle_ms(9, 2000), 0);
        assert_eq!(m.idle_ms(9, 2600), 600);
    }
}
