//! What a measurement of a sampled rate saw, and Kafka's `Rate.windowSize` (`Rate.java`).

use crate::types::WindowSpec;

/// What a measurement saw: the windowed sum and Kafka's window length `W` in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    pub sum: f64,
    pub window_ms: i64,
}

impl Measurement {
    /// `Rate.measure`: the sum per second of `W`.
    #[inline]
    pub fn rate(&self) -> f64 {
        self.sum / (self.window_ms as f64 / 1000.0)
    }
}

/// Kafka's `Rate.windowSize`: the elapsed time since the oldest sample, topped up to
/// `samples - 1` whole windows, at least 1 ms. Times are the ring's offset times (see
/// `sample_ring`); only their difference matters.
#[inline]
pub(crate) fn window_size_ms(spec: &WindowSpec, now_rel: i64, oldest_rel: i64) -> i64 {
    let mut elapsed = now_rel - oldest_rel;
    // Java integer division truncates towards zero; so does Rust's.
    let full_windows = elapsed / spec.window_ms;
    let min_full_windows = spec.samples as i64 - 1;
    if full_windows < min_full_windows {
        elapsed += (min_full_windows - full_windows) * spec.window_ms;
    }
    elapsed.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_topped_up_to_samples_minus_one_windows() {
        let spec = WindowSpec::default(); // 11 samples of 1 s
        assert_eq!(window_size_ms(&spec, 0, 0), 10_000);
        assert_eq!(window_size_ms(&spec, 10_500, 0), 10_500);
        assert_eq!(window_size_ms(&spec, 3_500, 0), 3_500 + 7_000);
        let one = WindowSpec::new(1, 1).unwrap();
        assert_eq!(window_size_ms(&one, 0, 0), 1);
    }
}
