//! A mute (KIP-219): after a throttled answer nothing more is read until the throttle has
//! passed, and for a quota window after it requests are read one at a time (Kafka reads a
//! channel's next request only once the previous answer has gone). One type for the rule, used
//! by a connection (`conn`) and by a producer's gate over all its connections (`producer_gate`),
//! so that the two cannot drift apart. Lock-free: the gate is shared by connections on every
//! worker thread, and a connection's reader checks its mute before every request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// `t` as microseconds since the process's base, plus one (0 stands for "never").
fn micros(t: Instant) -> u64 {
    t.saturating_duration_since(base()).as_micros() as u64 + 1
}

fn instant(micros: u64) -> Instant {
    base() + Duration::from_micros(micros.saturating_sub(1))
}

/// Muted until one time, read one request at a time until a later one.
#[derive(Default)]
pub struct Mute {
    muted_until: AtomicU64,
    serial_until: AtomicU64,
}

impl Mute {
    /// A throttled answer: muted until `until` (or later, if already), then serial for `window`
    /// after the mute ends. Returns when the mute ends.
    pub fn throttled(&self, until: Instant, window: Duration) -> Instant {
        let t = micros(until);
        let muted = self.muted_until.fetch_max(t, Ordering::AcqRel).max(t);
        self.serial_until
            .fetch_max(muted + window.as_micros() as u64, Ordering::AcqRel);
        instant(muted)
    }

    /// How long the mute still holds at `now` (`None`: not muted).
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        let muted = self.muted_until.load(Ordering::Acquire);
        let now = micros(now);
        (muted > now).then(|| Duration::from_micros(muted - now))
    }

    /// Whether requests are read one at a time at `now` (during the mute and a window after).
    pub fn is_serial(&self, now: Instant) -> bool {
        self.serial_until.load(Ordering::Acquire) > micros(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mute_extends_never_shortens_and_is_followed_by_a_serial_window() {
        let m = Mute::default();
        let now = Instant::now();
        assert_eq!(m.remaining(now), None);
        assert!(!m.is_serial(now));
        let window = Duration::from_millis(300);
        let end = m.throttled(now + Duration::from_millis(100), window);
        assert_eq!(m.throttled(now + Duration::from_millis(50), window), end, "a shorter throttle keeps the mute");
        let left = m.remaining(now).unwrap();
        assert!(left > Duration::from_millis(99) && left <= Duration::from_millis(100), "{left:?}");
        assert!(m.is_serial(now + Duration::from_millis(399)));
        assert!(!m.is_serial(now + Duration::from_millis(401)));
        assert_eq!(m.remaining(now + Duration::from_millis(101)), None);
    }
}
