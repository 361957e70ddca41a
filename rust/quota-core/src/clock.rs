//! Time: the kernel's own clock for calls that pass no `now_ms`, the range of accepted times,
//! and the kernel's estimate of the callers' clock.

use crate::error::QuotaError;

/// Milliseconds on CLOCK_MONOTONIC: the clock behind Python's `time.monotonic()`, so callers may
/// mix `now_ms=None` with `int(time.monotonic() * 1000)`.
#[inline]
pub fn monotonic_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on the targets we build.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    #[allow(clippy::unnecessary_cast)] // time_t / c_long are not i64 on every target
    let ms = ts.tv_sec as i64 * 1000 + ts.tv_nsec as i64 / 1_000_000;
    ms
}

/// Times are exact within 2^46 ms (about 2,200 years) of 0; anything further is refused
/// rather than silently clamped.
pub const MAX_ABS_NOW_MS: i64 = 1 << 46;

#[inline]
pub(crate) fn resolve_now(now: Option<i64>) -> Result<i64, QuotaError> {
    match now {
        None => Ok(monotonic_ms()),
        Some(t) if t.unsigned_abs() < MAX_ABS_NOW_MS as u64 => Ok(t),
        Some(t) => Err(QuotaError::InvalidValue(format!(
            "now_ms must be within ±2^46 ms of 0 (integer milliseconds on a monotonic clock), got {t}"
        ))),
    }
}

/// Where the callers' clock is believed to be: the newest time any sensor has seen, and the
/// kernel's own clock when that was observed.
#[derive(Clone, Copy)]
struct Anchor {
    newest_ms: i64,
    observed_at_mono_ms: i64,
}

/// The kernel's estimate of "now" on the clock callers record with. Callers may pass their own
/// `now_ms` (any monotonic ms clock: the kernel's, Unix-epoch ms, a simulated one), so the
/// kernel clock alone cannot be compared with sensor times.
pub(crate) struct ClockAnchor(parking_lot::Mutex<Option<Anchor>>);

impl ClockAnchor {
    pub(crate) fn new() -> Self {
        ClockAnchor(parking_lot::Mutex::new(None))
    }

    /// The newest time seen (`newest`, from the sensors), advanced by the time elapsed on the
    /// kernel's own clock since that time was first observed; never ahead of a clock that
    /// advances in real time. Without any time seen it is the kernel's own clock.
    pub(crate) fn estimate(&self, newest: Option<i64>, mono: i64) -> i64 {
        let mut anchor = self.0.lock();
        if let Some(n) = newest {
            if anchor.is_none_or(|a| n > a.newest_ms) {
                *anchor = Some(Anchor {
                    newest_ms: n,
                    observed_at_mono_ms: mono,
                });
            }
        }
        match *anchor {
            Some(a) => a.newest_ms.saturating_add(mono - a.observed_at_mono_ms),
            None => mono,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_does_not_go_back() {
        let a = super::monotonic_ms();
        let b = super::monotonic_ms();
        assert!(b >= a);
    }

    #[test]
    fn times_past_2_pow_46_are_refused() {
        assert_eq!(super::resolve_now(Some(5)), Ok(5));
        assert!(super::resolve_now(Some(super::MAX_ABS_NOW_MS)).is_err());
        assert!(super::resolve_now(Some(-super::MAX_ABS_NOW_MS)).is_err());
    }

    #[test]
    fn anchor_advances_from_the_newest_time_seen() {
        let a = super::ClockAnchor::new();
        assert_eq!(a.estimate(None, 70), 70);
        assert_eq!(a.estimate(Some(1000), 100), 1000);
        assert_eq!(a.estimate(Some(1000), 150), 1050);
        // An older time seen does not move the anchor back.
        assert_eq!(a.estimate(Some(900), 200), 1100);
    }
}
