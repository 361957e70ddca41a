//! Kafka's `throttle-time` metric: an `Avg` of the throttles applied to responses, recorded by
//! `ClientQuotaManager.throttle` for the entity whose quota was enforced (tags `user`,
//! `client-id`), kept here per quota type too (see docs/semantics-notes.md).

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::rate::RateSensor;
use crate::types::WindowSpec;

/// A windowed average of throttle times: sum and count over sampled windows, which is what
/// Kafka's `Avg` (a `SampledStat`) computes.
pub(crate) struct ThrottleAvg {
    sum: RateSensor,
    count: RateSensor,
}

impl ThrottleAvg {
    pub(crate) fn new(spec: &WindowSpec, now: i64) -> Self {
        ThrottleAvg {
            sum: RateSensor::new(spec, now),
            count: RateSensor::new(spec, now),
        }
    }

    /// Adds one throttled response of `throttle_ms`.
    pub(crate) fn record(&self, spec: &WindowSpec, throttle_ms: f64, now: i64) {
        self.sum.record(spec, throttle_ms, now);
        self.count.record(spec, 1.0, now);
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

/// The per-entity `throttle-time` averages of one quota type, keyed by the metric tags of the
/// sensor whose quota was enforced. Touched only by throttled responses (each followed by a mute
/// of at least 1 ms), never by the record path, so a lock is fine here. Bounded: an entity
/// whose average has no sample left in the window is dropped when room is needed or by expiry,
/// and past `cap` live entities a new one is not tracked (the type's average still is).
pub(crate) struct EntityThrottleTimes {
    map: Mutex<HashMap<EntityTags, ThrottleAvg>>,
}

/// `(user, client-id)` metric tags.
type EntityTags = (Box<str>, Box<str>);

impl EntityThrottleTimes {
    pub(crate) fn new() -> Self {
        EntityThrottleTimes {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Records `throttle_ms` for the entity tagged `(user, client_id)`.
    pub(crate) fn record(
        &self,
        spec: &WindowSpec,
        user: &str,
        client_id: &str,
        throttle_ms: f64,
        now: i64,
        cap: usize,
    ) {
        let mut map = self.map.lock();
        if let Some(avg) = map.get(&(Box::from(user), Box::from(client_id))) {
            avg.record(spec, throttle_ms, now);
            return;
        }
        if map.len() >= cap {
            map.retain(|_, a| !a.average(spec, now).is_nan());
            if map.len() >= cap {
                return;
            }
        }
        let avg = ThrottleAvg::new(spec, now);
        avg.record(spec, throttle_ms, now);
        map.insert((Box::from(user), Box::from(client_id)), avg);
    }

    #[cfg(test)]
    /// The entity's average at `now` (NaN: none in the window, or not tracked).
    pub(crate) fn average(&self, spec: &WindowSpec, user: &str, client_id: &str, now: i64) -> f64 {
        self.map
            .lock()
            .get(&(Box::from(user), Box::from(client_id)))
            .map_or(f64::NAN, |a| a.average(spec, now))
    }

    /// Every tracked entity's `(user, client_id, average)` at `now`, dropping those with no
    /// sample left in the window (Kafka's expired sensors report nothing).
    pub(crate) fn drain_expired_and_list(
        &self,
        spec: &WindowSpec,
        now: i64,
    ) -> Vec<(Box<str>, Box<str>, f64)> {
        let mut map = self.map.lock();
        map.retain(|_, a| !a.average(spec, now).is_nan());
        map.iter()
            .map(|((u, c), a)| (u.clone(), c.clone(), a.average(spec, now)))
            .collect()
    }

    #[cfg(test)]
    /// Number of entities tracked now.
    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_throttled_responses_in_the_window() {
        let spec = WindowSpec::default();
        let avg = ThrottleAvg::new(&spec, 0);
        assert!(avg.average(&spec, 0).is_nan());
        avg.record(&spec, 100.0, 0);
        avg.record(&spec, 300.0, 500);
        assert_eq!(avg.average(&spec, 500), 200.0);
        // 11 windows of 1 s later the samples are gone.
        assert!(avg.average(&spec, 12_000).is_nan());
    }

    #[test]
    fn entities_are_kept_apart_bounded_and_dropped_once_empty() {
        let spec = WindowSpec::default();
        let e = EntityThrottleTimes::new();
        e.record(&spec, "alice", "", 100.0, 0, 2);
        e.record(&spec, "alice", "", 300.0, 10, 2);
        e.record(&spec, "", "app", 50.0, 10, 2);
        assert_eq!(e.average(&spec, "alice", "", 10), 200.0);
        assert_eq!(e.average(&spec, "", "app", 10), 50.0);
        // Full: a third entity is not tracked while both others have samples.
        e.record(&spec, "bob", "", 10.0, 20, 2);
        assert!(e.average(&spec, "bob", "", 20).is_nan());
        // Once their samples have left the window, room is made.
        e.record(&spec, "bob", "", 10.0, 20_000, 2);
        assert_eq!(e.average(&spec, "bob", "", 20_000), 10.0);
        assert_eq!(e.drain_expired_and_list(&spec, 20_000).len(), 1);
        assert_eq!(e.len(), 1);
    }
}
