//! Handshake failures counted by cause for the proxy's metrics, and logged at most once per cause
//! per interval: a client retrying with a bad certificate, or a scanner sending plaintext to a
//! TLS port, must not flood the log. Lock-free: called on the accept path.

use super::handshake::HandshakeFailure;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const N: usize = HandshakeFailure::CAUSES.len();

/// Counts per cause and the log rate limit.
pub struct FailureLog {
    counts: [AtomicU64; N],
    /// Per cause: when (ms since `epoch`, plus one; 0 = never) it was last logged.
    logged_at: [AtomicU64; N],
    interval_ms: u64,
    epoch: Instant,
}

impl FailureLog {
    /// Logs each cause at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        FailureLog {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            logged_at: std::array::from_fn(|_| AtomicU64::new(0)),
            interval_ms: interval.as_millis() as u64,
            epoch: Instant::now(),
        }
    }

    /// Counts `failure`; true when the caller should log it (the first of its cause in the
    /// interval). The log line should say how many were suppressed: `count(cause)` tells.
    pub fn record(&self, failure: &HandshakeFailure) -> bool {
        let i = failure.cause_index();
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.logged_at[i].load(Ordering::Relaxed);
        if last != 0 && now < last + self.interval_ms {
            return false;
        }
        self.logged_at[i]
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// How many failures of `cause` so far (0 for an unknown label).
    pub fn count(&self, cause: &str) -> u64 {
        HandshakeFailure::CAUSES
            .iter()
            .position(|c| *c == cause)
            .map_or(0, |i| self.counts[i].load(Ordering::Relaxed))
    }

    /// `(cause, count)` for every cause, in `HandshakeFailure::CAUSES` order (for metrics).
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        HandshakeFailure::CAUSES
            .iter()
            .zip(&self.counts)
            .map(|(c, n)| (*c, n.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_failure_and_logs_once_per_cause_per_interval() {
        let log = FailureLog::new(Duration::from_secs(3600));
        assert!(log.record(&HandshakeFailure::NotTls));
        assert!(!log.record(&HandshakeFailure::NotTls));
        assert!(
            log.record(&HandshakeFailure::ExpiredCertificate),
            "another cause is logged"
        );
        assert!(!log.record(&HandshakeFailure::NotTls));
        assert_eq!(log.count("not_tls"), 3);
        assert_eq!(log.count("expired_certificate"), 1);
        assert_eq!(log.count("timeout"), 0);
        let counts = log.counts();
        assert_eq!(counts.len(), HandshakeFailure::CAUSES.len());
        assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), 4);
        // every variant has its own place in CAUSES
        use HandshakeFailure::*;
        let all = [
            Timeout,
            NotTls,
            NoCertificate,
            UntrustedCertificate,
            ExpiredCertificate,
            NotYetValidCertificate,
            NameMismatch,
            AlertReceived("a".into()),
            Closed,
            NoSubject,
            NoMatchingRule("r".into()),
            Other("o".into()),
        ];
        let places: Vec<usize> = all.iter().map(HandshakeFailure::cause_index).collect();
        assert_eq!(places, (0..HandshakeFailure::CAUSES.len()).collect::<Vec<_>>());
    }

    #[test]
    fn logs_again_after_the_interval() {
        let log = FailureLog::new(Duration::from_millis(30));
        assert!(log.record(&HandshakeFailure::Timeout));
        assert!(!log.record(&HandshakeFailure::Timeout));
        std::thread::sleep(Duration::from_millis(60));
        assert!(log.record(&HandshakeFailure::Timeout));
    }
}
