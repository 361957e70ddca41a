//! The kernel's own clock for calls that pass no `now_ms`.

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

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_does_not_go_back() {
        let a = super::monotonic_ms();
        let b = super::monotonic_ms();
        assert!(b >= a);
    }
}
