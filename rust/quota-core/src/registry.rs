//! The registry of live sensors of one quota type, owned by the kernel: the sensor map, the
//! hard cap on live sensors (at the cap, or past the name budget, new tags share an overflow
//! sensor of their shape), and the counters expiry and metrics report.
//!
//! Nothing here adds a per-sensor field: the cap is one counter per quota type.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use papaya::Equivalent;

use crate::keys::PairRef;
use crate::name_budget::ByteBudget;
use crate::sensor::QuotaSensor;

type FastState = foldhash::fast::RandomState;

/// Tag value of the overflow sensors. No sanitized user tag can hold `<`, so an overflow user
/// tag never equals a real one; limits are looked up from these tags like any others.
pub const OVERFLOW_TAG: &str = "<overflow>";

/// A registry entry: the sensor, hashed and compared by its tags (so the tags are stored once).
pub(crate) struct SensorEntry(pub(crate) Arc<QuotaSensor>);

impl Hash for SensorEntry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        PairRef(self.0.tags.user(), self.0.tags.client_id()).hash(state)
    }
}

impl PartialEq for SensorEntry {
    fn eq(&self, other: &Self) -> bool {
        self.0.tags == other.0.tags
    }
}

impl Eq for SensorEntry {}

impl Equivalent<SensorEntry> for PairRef<'_> {
    fn equivalent(&self, key: &SensorEntry) -> bool {
        key.0.tags.is(self.0, self.1)
    }
}

/// The sensors of one quota type.
pub(crate) struct SensorRegistry {
    map: papaya::HashMap<SensorEntry, (), FastState>,
    /// Sensors in the map (reserved before insertion, so the cap is exact).
    live: AtomicUsize,
    /// Resolutions that found the registry full and were given an overflow sensor.
    overflowed: AtomicU64,
    /// Sensors removed by expiry since start.
    expired: AtomicU64,
    /// Overflow sensors by tag shape: index `user non-empty * 2 + client-id non-empty`.
    overflow: [OnceLock<Arc<QuotaSensor>>; 4],
}

impl SensorRegistry {
    pub(crate) fn new() -> Self {
        SensorRegistry {
            map: papaya::HashMap::with_hasher(FastState::default()),
            live: AtomicUsize::new(0),
            overflowed: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            overflow: Default::default(),
        }
    }

    /// Calls `f` with the sensor registered under these tags, if any, while the map's guard is
    /// held (no reference-count traffic: the record path records inside `f`).
    #[inline]
    pub(crate) fn with<R>(
        &self,
        user: &str,
        client_id: &str,
        f: impl FnOnce(&Arc<QuotaSensor>) -> R,
    ) -> Option<R> {
        let pinned = self.map.pin();
        pinned
            .get_key_value(&PairRef(user, client_id))
            .map(|(s, ())| f(&s.0))
    }

    /// The sensor registered under these tags, registering `make()` if there is none and the
    /// registry is below `cap` and the tags fit `names`; else the overflow sensor of the tags'
    /// shape.
    ///
    /// Only the first of several racing creators registers its sensor; the others adopt it. (An
    /// insert that replaced the entry would orphan a sensor already recorded into, losing those
    /// records: papaya's `HashSet::insert` replaces, hence a map with `try_insert`.)
    pub(crate) fn register(
        &self,
        user: &str,
        client_id: &str,
        cap: usize,
        names: &ByteBudget,
        make: impl Fn(&str, &str) -> QuotaSensor,
    ) -> Arc<QuotaSensor> {
        let sensors = self.map.pin();
        let key = PairRef(user, client_id);
        let mut fresh: Option<Arc<QuotaSensor>> = None;
        loop {
            if let Some((s, ())) = sensors.get_key_value(&key) {
                return Arc::clone(&s.0);
            }
            // Reserve a place first so that racing creators cannot overshoot the cap.
            if self.live.fetch_add(1, Ordering::AcqRel) >= cap {
                self.live.fetch_sub(1, Ordering::AcqRel);
                return self.overflow_sensor(user, client_id, make);
            }
            // The count fits; the bytes of its tags must fit the name budget too.
            let bytes = user.len() + 1 + client_id.len();
            if !names.try_reserve(bytes) {
                self.live.fetch_sub(1, Ordering::AcqRel);
                return self.overflow_sensor(user, client_id, make);
            }
            let s = fresh.get_or_insert_with(|| Arc::new(make(user, client_id)));
            if sensors.try_insert(SensorEntry(Arc::clone(s)), ()).is_ok() {
                return Arc::clone(s);
            }
            // Another creator won; adopt its sensor (or, if expiry removed it meanwhile, retry).
            names.release(bytes);
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
    }

    #[cold]
    fn overflow_sensor(
        &self,
        user: &str,
        client_id: &str,
        make: impl Fn(&str, &str) -> QuotaSensor,
    ) -> Arc<QuotaSensor> {
        self.overflowed.fetch_add(1, Ordering::Relaxed);
        let (user, client) = (!user.is_empty(), !client_id.is_empty());
        let slot = &self.overflow[usize::from(user) * 2 + usize::from(client)];
        Arc::clone(slot.get_or_init(|| {
            let tag = |on: bool| if on { OVERFLOW_TAG } else { "" };
            Arc::new(make(tag(user), tag(client)))
        }))
    }

    /// Removes every sensor `expired` says is, releasing their tags' bytes from `names`, and
    /// calls `removed_some` once if any was removed (before the put-back below). A record that
    /// raced with the removal went into a sensor no longer registered; Kafka loses such a record,
    /// here the sensor is put back if it no longer counts as expired and nobody has registered a
    /// new one for its tags since. Returns those that stayed removed.
    pub(crate) fn expire(
        &self,
        names: &ByteBudget,
        expired: impl Fn(&QuotaSensor) -> bool,
        removed_some: impl FnOnce(),
    ) -> Vec<Arc<QuotaSensor>> {
        let mut removed: Vec<Arc<QuotaSensor>> = Vec::new();
        self.map.pin().retain(|s, ()| {
            if expired(&s.0) {
                removed.push(Arc::clone(&s.0));
                false
            } else {
                true
            }
        });
        if removed.is_empty() {
            return removed;
        }
        self.live.fetch_sub(removed.len(), Ordering::AcqRel);
        names.release(removed.iter().map(|s| s.tags.byte_len()).sum());
        removed_some();
        let sensors = self.map.pin();
        let mut gone = Vec::new();
        for s in removed {
            if !expired(&s) {
                let bytes = s.tags.byte_len();
                self.live.fetch_add(1, Ordering::AcqRel);
                if names.try_reserve(bytes) {
                    if sensors.try_insert(SensorEntry(Arc::clone(&s)), ()).is_ok() {
                        continue;
                    }
                    names.release(bytes);
                }
                self.live.fetch_sub(1, Ordering::AcqRel);
            }
            gone.push(s);
        }
        self.expired.fetch_add(gone.len() as u64, Ordering::Relaxed);
        gone
    }

    /// Calls `f` on every registered sensor, then on every overflow sensor in use.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&QuotaSensor)) {
        for (s, ()) in self.map.pin().iter() {
            f(&s.0);
        }
        for slot in &self.overflow {
            if let Some(s) = slot.get() {
                f(s);
            }
        }
    }

    /// The newest time any registered sensor has seen.
    pub(crate) fn newest_seen(&self) -> Option<i64> {
        self.map.pin().iter().map(|(s, ())| s.0.rate.last_seen_ms()).max()
    }

    /// Registered sensors.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Sensors counted against the cap (as `len`, read from the counter).
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    pub(crate) fn overflowed(&self) -> u64 {
        self.overflowed.load(Ordering::Relaxed)
    }

    pub(crate) fn expired(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::RateSensor;
    use crate::types::WindowSpec;

    fn make(user: &str, client_id: &str) -> QuotaSensor {
        QuotaSensor::new(user, client_id, RateSensor::new(&WindowSpec::default(), 0), 0, 0)
    }

    #[test]
    fn cap_sends_new_tags_to_the_overflow_sensor_of_their_shape() {
        let (r, names) = (SensorRegistry::new(), ByteBudget::new(1 << 20));
        let a = r.register("", "a", 2, &names, make);
        assert!(Arc::ptr_eq(&a, &r.register("", "a", 2, &names, make)));
        r.register("u", "", 2, &names, make);
        let o = r.register("", "c", 2, &names, make);
        assert_eq!((o.tags.user(), o.tags.client_id()), ("", OVERFLOW_TAG));
        let o2 = r.register("v", "", 2, &names, make);
        assert_eq!((o2.tags.user(), o2.tags.client_id()), (OVERFLOW_TAG, ""));
        assert_eq!((r.len(), r.live(), r.overflowed()), (2, 2, 2));
        let mut seen = 0;
        r.for_each(|_| seen += 1);
        assert_eq!(seen, 4);
    }

    #[test]
    fn expiry_releases_the_place_and_the_bytes() {
        let (r, names) = (SensorRegistry::new(), ByteBudget::new(1 << 20));
        r.register("", "abc", 10, &names, make);
        assert_eq!(names.held(), 4);
        let mut bumped = false;
        assert_eq!(r.expire(&names, |_| true, || bumped = true).len(), 1);
        assert!(bumped);
        assert_eq!((r.len(), r.live(), r.expired(), names.held()), (0, 0, 1, 0));
        assert!(r.expire(&names, |_| true, || panic!("nothing removed")).is_empty());
    }
}
