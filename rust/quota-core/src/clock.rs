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


#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_does_not_go_back() {
        let a = super::monotonic_ms();
        let b = super::monotonic_ms();
        assert!(b >= a);
    }
}
