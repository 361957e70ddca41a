//! Expiry of idle sensors (Kafka's `ExpireSensorTask`) and the background thread that runs it.
//! The registry (`registry`) removes what this module decides is idle.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::clock::{monotonic_ms, resolve_now};
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::sensor::QuotaSensor;
use crate::types::ClientQuotaType;

// Kept at their old paths for the binding.
pub use crate::registry::OVERFLOW_TAG;
pub use crate::settings::{DEFAULT_MAX_SENSORS, DEFAULT_SENSOR_EXPIRY_MS};

/// What a scan of the registries saw.
pub struct ExpiryReport {
    /// The time the pass expired against.
    pub now_ms: i64,
    /// Sensors removed.
    pub removed: usize,
}

impl QuotaKernel {
    /// Removes every sensor unused for more than the expiry time. With `now` (the caller's
    /// clock): Kafka's `Sensor.hasExpired`, `now - lastRecordTime > expiry`, strictly. With
    /// `None` (the background thread): a sensor whose latest time has not changed for more than
    /// the expiry time of the kernel's own monotonic clock, as seen by successive passes; a
    /// timestamp far ahead on one sensor therefore expires nothing else.
    ///
    /// A pass that removes sensors bumps the type's tags generation so that handles and caches
    /// holding a removed sensor resolve again, and drops stale metric-tag cache entries.
    pub fn expire_sensors(&self, now: Option<i64>) -> Result<ExpiryReport, QuotaError> {
        let explicit = now.map(|t| resolve_now(Some(t))).transpose()?;
        let mono = monotonic_ms();
        let expiry = self.settings.sensor_expiry_ms;
        // With the caller's `now`: Kafka's rule on the caller's clock. Without: idleness on the
        // kernel's own clock (see `idle`), so no caller's timestamp moves other sensors' expiry.
        let expired = |s: &QuotaSensor| match explicit {
            Some(now) => now.saturating_sub(s.rate.last_seen_ms()) > expiry,
            None => s.idle.idle_ms(s.rate.last_seen_ms(), mono) > expiry,
        };
        let mut removed = 0;
        for t in ClientQuotaType::ALL {
            let rt = &self.types[t.index()];
            let gone = rt.sensors.expire(&self.names, expired, || self.bump_tags_generation(t));
            // The principals' client ids those sensors held are free again (`client_ids`).
            rt.client_ids
                .prune(&gone.iter().map(|s| Arc::as_ptr(s) as usize).collect());
            removed += gone.len();
        }
        removed += self.topics.expire(|s| match explicit {
            Some(now) => now.saturating_sub(s.rate.last_seen_ms()) > expiry,
            None => s.idle.idle_ms(s.rate.last_seen_ms(), mono) > expiry,
        });
        // Address sensors are timed on the callers' clock only (their newest time without one).
        removed += self.connections.expire(explicit);
        Ok(ExpiryReport {
            now_ms: explicit.unwrap_or(mono),
            removed,
        })
    }
}

/// The background expiry thread: runs [`QuotaKernel::expire_sensors`] every `interval` until
/// stopped or dropped (which joins it) or until the kernel is gone.
pub struct ExpiryTask {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ExpiryTask {
    pub fn start(kernel: &Arc<QuotaKernel>, interval: Duration) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let weak: Weak<QuotaKernel> = Arc::downgrade(kernel);
        let signal = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("kquota-expire-sensors".into())
            .spawn(move || loop {
                {
                    let (lock, cvar) = &*signal;
                    let mut stopped = lock.lock();
                    if !*stopped {
                        cvar.wait_for(&mut stopped, interval);
                    }
                    if *stopped {
                        return;
                    }
                }
                match weak.upgrade() {
                    Some(k) => {
                        let _ = k.expire_sensors(None);
                    }
                    None => return,
                }
            })?;
        Ok(ExpiryTask {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (a pass in progress finishes first).
    pub fn stop(&mut self) {
        {
            let (lock, cvar) = &*self.stop;
            *lock.lock() = true;
            cvar.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    pub fn is_running(&self) -> bool {
        self.thread.is_some()
    }
}

impl Drop for ExpiryTask {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::{EntityName, QuotaEntity};
    use crate::settings::{KernelConfig, DEFAULT_SENSOR_EXPIRY_MS};
    use crate::snapshot::QuotaChange;

    #[test]
    fn metric_tag_cache_is_bounded_by_the_cap() {
        let k = QuotaKernel::new(KernelConfig {
            max_sensors: 100,
            ..KernelConfig::default()
        })
        .unwrap();
        // Mixed kinds (a user level and a client-id level): the 8-level walk and its cache.
        let change = |user, client_id| QuotaChange {
            entity: QuotaEntity { user, client_id },
            quota_type: ClientQuotaType::Produce,
            value: Some(1000.0),
        };
        k.alter(
            &[
                change(Some(EntityName::Name("alice".into())), None),
                change(None, Some(EntityName::Default)),
            ],
            false,
        )
        .unwrap();
        for i in 0..1000 {
            k.record_and_get_throttle_time_ms(
                ClientQuotaType::Produce,
                "bob",
                &format!("c{i}"),
                1.0,
                Some(0),
            )
            .unwrap();
        }
        let rt = &k.types[ClientQuotaType::Produce.index()];
        assert_eq!(rt.sensors.len(), 100);
        assert!(rt.cache.len() <= 100, "{}", rt.cache.len());
        // An expiry pass that removes sensors drops the now stale cache entries.
        k.expire_sensors(Some(DEFAULT_SENSOR_EXPIRY_MS + 1)).unwrap();
        assert_eq!(rt.sensors.len(), 0);
        assert_eq!(rt.cache.len(), 0);
    }
}
