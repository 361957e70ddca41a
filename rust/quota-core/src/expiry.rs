//! Sensor lifecycle: registration under a hard cap on live sensors, the overflow sensors used at
//! the cap, expiry of idle sensors (Kafka's `ExpireSensorTask`) and the background thread that
//! runs it.
//!
//! Nothing here adds a per-sensor field: expiry reads each sensor's latest time, and the cap is
//! one counter per quota type.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::clock::monotonic_ms;
use crate::error::QuotaError;
use crate::clock::resolve_now;
use crate::kernel::QuotaKernel;
use crate::keys::{PairRef, SensorEntry};
use crate::sensor::QuotaSensor;
use crate::rate::RateSensor;
use crate::types::{ClientQuotaType, WindowSpec};

type FastState = foldhash::fast::RandomState;
pub(crate) type Registry = papaya::HashMap<SensorEntry, (), FastState>;

/// Tag value of the overflow sensors. No sanitized user tag can hold `<`, so an overflow user
/// tag never equals a real one; limits are looked up from these tags like any others.
pub const OVERFLOW_TAG: &str = "<overflow>";

/// Kafka's `ClientQuotaManager.InactiveSensorExpirationTimeSeconds`.
pub const DEFAULT_SENSOR_EXPIRY_MS: i64 = 3_600_000;
/// Default cap on live sensors per quota type (about 0.5 GB of sensors at 502 B each).
pub const DEFAULT_MAX_SENSORS: usize = 1_000_000;

/// Per-type lifecycle state.
#[derive(Default)]
pub(crate) struct TypeLifecycle {
    /// Sensors in the registry (reserved before insertion, so the cap is exact).
    pub(crate) live: AtomicUsize,
    /// Resolutions that found the registry full and were given an overflow sensor.
    pub(crate) overflowed: AtomicU64,
    /// Sensors removed by expiry since start.
    pub(crate) expired: AtomicU64,
    /// Overflow sensors by tag shape: index `user non-empty * 2 + client-id non-empty`.
    pub(crate) overflow: [OnceLock<Arc<QuotaSensor>>; 4],
    /// Kafka's per-entity `throttle-time` Avg, kept per quota type (see docs/semantics-notes.md).
    pub(crate) throttle: OnceLock<ThrottleAvg>,
}

/// A windowed average of throttle times: sum and count over the quota's sampled windows, which
/// is what Kafka's `Avg` (a `SampledStat`) computes.
pub(crate) struct ThrottleAvg {
    sum: RateSensor,
    count: RateSensor,
}

impl ThrottleAvg {
    fn new(spec: &WindowSpec, now: i64) -> Self {
        ThrottleAvg {
            sum: RateSensor::new(spec, now),
            count: RateSensor::new(spec, now),
        }
    }

    /// Average throttle (ms) of the throttled responses in the window; NaN when there were none
    /// (Kafka's `Avg` of no samples).
    pub(crate) fn average(&self, spec: &WindowSpec, now: i64) -> f64 {
        let count = self.count.peek(spec, now).sum;
        if count <= 0.0 {
            return f64::NAN;
        }
        self.sum.peek(spec, now).sum / count
    }
}

/// Where the caller's clock is believed to be: the newest time any sensor has seen, and the
/// kernel's own clock when that was observed.
#[derive(Clone, Copy)]
struct Anchor {
    newest_ms: i64,
    observed_at_mono_ms: i64,
}

/// Lifecycle settings and state of a kernel.
pub(crate) struct Lifecycle {
    pub(crate) max_sensors: usize,
    pub(crate) expiry_ms: i64,
    pub(crate) types: [TypeLifecycle; 4],
    anchor: Mutex<Option<Anchor>>,
}

impl Lifecycle {
    pub(crate) fn new(max_sensors: usize, expiry_ms: i64) -> Self {
        Lifecycle {
            max_sensors,
            expiry_ms,
            types: Default::default(),
            anchor: Mutex::new(None),
        }
    }
}

pub(crate) fn validate(max_sensors: usize, expiry_ms: i64) -> Result<(), QuotaError> {
    if max_sensors == 0 {
        return Err(QuotaError::InvalidArgument(
            "max_sensors must be >= 1 (None for the default)".into(),
        ));
    }
    if expiry_ms <= 0 {
        return Err(QuotaError::InvalidArgument(format!(
            "sensor expiry must be > 0 ms, got {expiry_ms}"
        )));
    }
    Ok(())
}

/// What a scan of the registries saw.
pub struct ExpiryReport {
    /// The time the pass expired against.
    pub now_ms: i64,
    /// Sensors removed.
    pub removed: usize,
}

impl QuotaKernel {
    /// The sensor registered under these tags, registering `make()` if there is none and the
    /// type is below its cap; at the cap, the overflow sensor of the tags' shape.
    ///
    /// Only the first of several racing creators registers its sensor; the others adopt it. (An
    /// insert that replaced the entry would orphan a sensor already recorded into, losing those
    /// records: papaya's `HashSet::insert` replaces, hence a map with `try_insert`.)
    pub(crate) fn register_sensor(
        &self,
        t: ClientQuotaType,
        sensors: &Registry,
        user: &str,
        client_id: &str,
        now: i64,
    ) -> Arc<QuotaSensor> {
        let life = &self.lifecycle.types[t.index()];
        let sensors = sensors.pin();
        let key = PairRef(user, client_id);
        let mut fresh: Option<Arc<QuotaSensor>> = None;
        loop {
            if let Some((s, ())) = sensors.get_key_value(&key) {
                return Arc::clone(&s.0);
            }
            // Reserve a place first so that racing creators cannot overshoot the cap.
            if life.live.fetch_add(1, Ordering::AcqRel) >= self.lifecycle.max_sensors {
                life.live.fetch_sub(1, Ordering::AcqRel);
                life.overflowed.fetch_add(1, Ordering::Relaxed);
                return self.overflow_sensor(t, !user.is_empty(), !client_id.is_empty(), now);
            }
            // The count fits; the bytes of its tags must fit the name budget too.
            let bytes = user.len() + 1 + client_id.len();
            if !self.names_budget().try_reserve(bytes) {
                life.live.fetch_sub(1, Ordering::AcqRel);
                life.overflowed.fetch_add(1, Ordering::Relaxed);
                return self.overflow_sensor(t, !user.is_empty(), !client_id.is_empty(), now);
            }
            let s = fresh.get_or_insert_with(|| {
                Arc::new(QuotaSensor::new(user, client_id, self.new_rate_sensor(t, now), now, monotonic_ms()))
            });
            if sensors.try_insert(SensorEntry(Arc::clone(s)), ()).is_ok() {
                return Arc::clone(s);
            }
            // Another creator won; adopt its sensor (or, if expiry removed it meanwhile, retry).
            self.names_budget().release(bytes);
            life.live.fetch_sub(1, Ordering::AcqRel);
        }
    }

    #[cold]
    fn overflow_sensor(&self, t: ClientQuotaType, user: bool, client: bool, now: i64) -> Arc<QuotaSensor> {
        let slot = &self.lifecycle.types[t.index()].overflow[usize::from(user) * 2 + usize::from(client)];
        Arc::clone(slot.get_or_init(|| {
            let tag = |on: bool| if on { OVERFLOW_TAG } else { "" };
            Arc::new(QuotaSensor::new(tag(user), tag(client), self.new_rate_sensor(t, now), now, monotonic_ms()))
        }))
    }

    /// Records a throttle applied to a response of type `t` into the type's `throttle-time`
    /// average (Kafka records it in `ClientQuotaManager.throttle`, only when > 0).
    pub fn record_throttle_time(
        &self,
        t: ClientQuotaType,
        throttle_ms: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        crate::validate::check_record_value(throttle_ms)?;
        let now = resolve_now(now)?;
        if throttle_ms <= 0.0 {
            return Ok(());
        }
        // Kafka's throttle-time sensor (an `Avg`) has no quota config: the broker's metrics window.
        let spec = &self.settings().metrics_window;
        let avg = self.lifecycle.types[t.index()]
            .throttle
            .get_or_init(|| ThrottleAvg::new(spec, now));
        avg.sum.record(spec, throttle_ms, now);
        avg.count.record(spec, 1.0, now);
        Ok(())
    }

    /// The newest time any sensor has seen, or `None` without sensors.
    fn newest_seen(&self) -> Option<i64> {
        let mut newest: Option<i64> = None;
        for rt in &self.types {
            for (s, ()) in rt.sensors.pin().iter() {
                let t = s.0.rate.last_seen_ms();
                newest = Some(newest.map_or(t, |n| n.max(t)));
            }
        }
        newest
    }

    /// The kernel's estimate of "now" on the clock callers record with: the newest time any
    /// sensor has seen, advanced by the time elapsed on the kernel's own clock since that time
    /// was first observed. Callers may pass their own `now_ms` (any monotonic ms clock: the
    /// kernel's, Unix-epoch ms, a simulated one), so the kernel clock alone cannot be compared
    /// with sensor times. The estimate never runs ahead of a clock that advances in real time.
    /// Without any sensor it is the kernel's own clock.
    pub fn estimated_now_ms(&self) -> i64 {
        let mono = monotonic_ms();
        let newest = self.newest_seen();
        let mut anchor = self.lifecycle.anchor.lock();
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
        let expiry = self.lifecycle.expiry_ms;
        // With the caller's `now`: Kafka's rule on the caller's clock. Without: idleness on the
        // kernel's own clock (see `idle`), so no caller's timestamp moves other sensors' expiry.
        let expired = |s: &QuotaSensor| match explicit {
            Some(now) => now.saturating_sub(s.rate.last_seen_ms()) > expiry,
            None => s.idle.idle_ms(s.rate.last_seen_ms(), mono) > expiry,
        };
        let now = explicit.unwrap_or(mono);
        let mut removed_total = 0;
        for t in ClientQuotaType::ALL {
            let rt = &self.types[t.index()];
            let life = &self.lifecycle.types[t.index()];
            let mut removed: Vec<Arc<QuotaSensor>> = Vec::new();
            {
                let sensors = rt.sensors.pin();
                sensors.retain(|s, ()| {
                    if expired(&s.0) {
                        removed.push(Arc::clone(&s.0));
                        false
                    } else {
                        true
                    }
                });
            }
            if removed.is_empty() {
                continue;
            }
            life.live.fetch_sub(removed.len(), Ordering::AcqRel);
            let bytes: usize = removed.iter().map(|s| s.tags.byte_len()).sum();
            self.names_budget().release(bytes);
            self.bump_tags_generation(t);
            // A record that raced with the removal went into a sensor no longer registered.
            // Kafka loses such a record; here the sensor is put back if nobody has registered a
            // new one for its tags since (holders resolve again after the bump above).
            let sensors = rt.sensors.pin();
            let mut gone = 0;
            for s in removed {
                if !expired(&s) {
                    let bytes = s.tags.byte_len();
                    life.live.fetch_add(1, Ordering::AcqRel);
                    if self.names_budget().try_reserve(bytes) {
                        if sensors.try_insert(SensorEntry(s), ()).is_ok() {
                            continue;
                        }
                        self.names_budget().release(bytes);
                    }
                    life.live.fetch_sub(1, Ordering::AcqRel);
                }
                gone += 1;
            }
            life.expired.fetch_add(gone as u64, Ordering::Relaxed);
            removed_total += gone;
        }
        Ok(ExpiryReport {
            now_ms: now,
            removed: removed_total,
        })
    }

    /// Sensors resolutions were sent to the overflow sensor because the type was at its cap.
    pub fn overflowed_resolutions(&self, t: ClientQuotaType) -> u64 {
        self.lifecycle.types[t.index()].overflowed.load(Ordering::Relaxed)
    }

    /// Sensors of the type removed by expiry since start.
    pub fn expired_sensors(&self, t: ClientQuotaType) -> u64 {
        self.lifecycle.types[t.index()].expired.load(Ordering::Relaxed)
    }

    /// The configured cap on live sensors per quota type.
    pub fn max_sensors(&self) -> usize {
        self.lifecycle.max_sensors
    }

    /// The configured expiry time of idle sensors, in ms.
    pub fn sensor_expiry_ms(&self) -> i64 {
        self.lifecycle.expiry_ms
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
    use crate::kernel::{KernelConfig, QuotaChange};

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
