//! Idleness measured on the kernel's own clock.
//!
//! Callers may record with their own `now_ms`, so one caller's clock (even a stray timestamp
//! years ahead) must not decide when *other* sensors count as idle. When expiry runs without
//! an explicit `now_ms` (the background thread), a sensor is idle for as long as its latest
//! time has not changed, measured on CLOCK_MONOTONIC between expiry passes. The record path
//! writes nothing here: passes compare the sensor's latest time with what they saw before.
//!
//! The mark is one 8-byte word (it is in every sensor, and a sensor's size is a memory budget):
//! the low `SEEN_BITS` bits of the latest time seen, and the kernel time since then in
//! `SINCE_BITS` bits. A latest time that moved by an exact multiple of 2^24 ms (4.66 hours)
//! between two passes looks unchanged to the second pass; any later change is seen again. Kernel
//! times are kept modulo 2^40 ms and differences read as signed 40-bit values: exact while a
//! mark is younger than 2^39 ms (17 years of process uptime).

use std::sync::atomic::{AtomicU64, Ordering};

const SEEN_BITS: u32 = 24;
const SINCE_BITS: u32 = 64 - SEEN_BITS;
const SINCE_MASK: u64 = (1 << SINCE_BITS) - 1;

/// What the last expiry pass saw of a sensor's latest time, and since when (kernel clock).
pub struct IdleMark(AtomicU64);

#[inline]
fn pack(latest: i64, mono_ms: i64) -> u64 {
    (latest as u64) << SINCE_BITS | (mono_ms as u64 & SINCE_MASK)
}

impl IdleMark {
    /// A mark for a sensor whose latest time is `latest`, created at kernel time `mono_ms`.
    pub fn new(latest: i64, mono_ms: i64) -> Self {
        IdleMark(AtomicU64::new(pack(latest, mono_ms)))
    }

    /// How long (kernel ms) the sensor's latest time has stayed `latest` as of `mono_ms`; a
    /// changed latest time restarts the count. Passes may race: both then restart it, and a
    /// pass whose `mono_ms` is older than a racing pass's mark reads a negative time (not idle).
    pub fn idle_ms(&self, latest: i64, mono_ms: i64) -> i64 {
        let mark = self.0.load(Ordering::Acquire);
        if mark >> SINCE_BITS != (latest as u64) << SINCE_BITS >> SINCE_BITS {
            self.0.store(pack(latest, mono_ms), Ordering::Release);
            return 0;
        }
        let elapsed = (mono_ms as u64).wrapping_sub(mark) & SINCE_MASK;
        // Sign-extend the 40-bit difference.
        ((elapsed << SEEN_BITS) as i64) >> SEEN_BITS
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

    #[test]
    fn the_mark_is_one_word_and_exact_across_its_wrap() {
        assert_eq!(std::mem::size_of::<IdleMark>(), 8);
        // Kernel times past 2^40 ms and latest times that are negative or far ahead.
        let base = (1i64 << 40) - 300;
        let m = IdleMark::new(-7, base);
        assert_eq!(m.idle_ms(-7, base + 1000), 1000);
        assert_eq!(m.idle_ms(1 << 45, base + 2000), 0);
        assert_eq!(m.idle_ms(1 << 45, base + 2000 + 3_600_000), 3_600_000);
        // A racing pass with an older kernel time reads not idle (as `saturating_sub` did).
        assert_eq!(m.idle_ms(1 << 45, base + 1999), -1);
        // Any change below 2^24 ms restarts the count.
        assert_eq!(m.idle_ms((1 << 45) + 1, base + 5000), 0);
    }
}
