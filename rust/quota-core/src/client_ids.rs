//! Each principal's distinct client ids, bounded (`kquota.max.client.ids.per.principal`).
//!
//! A client id is a string any client picks, so one principal (ANONYMOUS included) could give
//! every request a new one: each would hold a sensor and a metric-tag cache entry until expiry,
//! until the sensor cap or the name budget sends everyone's new names to the shared overflow
//! sensors. Here a principal keeps at most `max` distinct client ids of a quota type; past
//! that its new client ids are resolved as the client id [`OVERFLOW_TAG`] of that principal,
//! so they share one sensor of its own, limited by the quota that principal's client ids get
//! from the precedence (see docs/semantics.md). Other principals never share it.
//!
//! Only the resolving path (a handle's or cache's first sight of a name) comes here, never the
//! cached record path. Entries are hashes (the names themselves are counted where they are
//! held, by the name budget) and hold the sensor they resolved to: when expiry removes that
//! sensor the entry goes too, freeing the place. The whole table is bounded by the sensor cap.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::registry::OVERFLOW_TAG;
use crate::sensor::QuotaSensor;

/// Kafka has no such bound; 1000 client ids per principal is far more than any real tenant runs.
pub const DEFAULT_MAX_CLIENT_IDS_PER_PRINCIPAL: usize = 1000;

/// A principal's entry: (principal hash, client-id hash).
#[derive(Clone, Copy)]
pub(crate) struct IdKey(u64, u64);

/// What a resolution of (principal, client id) may do.
pub(crate) enum Admission {
    /// The client id is one of the principal's (or has just become one): resolve it.
    Kept(IdKey),
    /// The principal is at its bound (or the table at its cap): resolve [`OVERFLOW_TAG`].
    Overflow,
    /// No principal named: resolve the client id, keep no entry.
    Unbounded,
}

impl Admission {
    /// The client id to resolve.
    pub(crate) fn client_id<'a>(&self, client_id: &'a str) -> &'a str {
        match self {
            Admission::Kept(_) | Admission::Unbounded => client_id,
            Admission::Overflow => OVERFLOW_TAG,
        }
    }
}

#[derive(Default)]
struct Table {
    principals: HashMap<u64, HashMap<u64, Option<Arc<QuotaSensor>>>>,
    entries: usize,
    overflowed: u64,
}

/// The client ids of every principal, for one quota type.
pub(crate) struct ClientIds {
    /// Keyed per kernel, so no chosen pair of names collides.
    hasher: foldhash::quality::RandomState,
    table: Mutex<Table>,
}

impl ClientIds {
    pub(crate) fn new() -> Self {
        ClientIds {
            hasher: foldhash::quality::RandomState::default(),
            table: Mutex::new(Table::default()),
        }
    }

    /// Admits `client_id` for `user` if it is already one of the principal's, or if the
    /// principal holds fewer than `max` client ids and the table fewer than `cap` entries.
    /// A caller that names no principal (`user` empty: an embedder quoting by client id only;
    /// Kafka's principal is never empty, a proxy's is `ANONYMOUS` at least) is not bounded here:
    /// only by the sensor cap and the name budget, as before.
    pub(crate) fn admit(&self, user: &str, client_id: &str, max: usize, cap: usize) -> Admission {
        if user.is_empty() {
            return Admission::Unbounded;
        }
        let key = IdKey(self.hasher.hash_one(user), self.hasher.hash_one(client_id));
        let mut table = self.table.lock();
        let Table {
            principals,
            entries,
            overflowed,
        } = &mut *table;
        let known = principals.get(&key.0).is_some_and(|ids| ids.contains_key(&key.1));
        if known {
            return Admission::Kept(key);
        }
        let held = principals.get(&key.0).map_or(0, HashMap::len);
        if held >= max || *entries >= cap {
            *overflowed += 1;
            return Admission::Overflow;
        }
        principals.entry(key.0).or_default().insert(key.1, None);
        *entries += 1;
        Admission::Kept(key)
    }

    /// The sensor an admitted client id resolved to (expiry's removal of it frees the place).
    pub(crate) fn resolved(&self, key: IdKey, sensor: &Arc<QuotaSensor>) {
        let mut table = self.table.lock();
        if let Some(slot) = table.principals.get_mut(&key.0).and_then(|ids| ids.get_mut(&key.1)) {
            if !slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, sensor)) {
                *slot = Some(Arc::clone(sensor));
            }
        }
    }

    /// Drops every entry whose sensor expiry removed (`gone`, by address).
    pub(crate) fn prune(&self, gone: &HashSet<usize>) {
        if gone.is_empty() {
            return;
        }
        let mut table = self.table.lock();
        let mut dropped = 0;
        table.principals.retain(|_, ids| {
            ids.retain(|_, s| {
                let keep = !s.as_ref().is_some_and(|s| gone.contains(&(Arc::as_ptr(s) as usize)));
                dropped += usize::from(!keep);
                keep
            });
            !ids.is_empty()
        });
        table.entries -= dropped;
    }

    /// Principals holding client ids now.
    pub(crate) fn principals(&self) -> usize {
        self.table.lock().principals.len()
    }

    /// Client ids held now, all principals.
    pub(crate) fn entries(&self) -> usize {
        self.table.lock().entries
    }

    /// Resolutions sent to their principal's overflow client id since start.
    pub(crate) fn overflowed(&self) -> u64 {
        self.table.lock().overflowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::RateSensor;
    use crate::types::WindowSpec;

    fn sensor(c: &str) -> Arc<QuotaSensor> {
        Arc::new(QuotaSensor::new("", c, RateSensor::new(&WindowSpec::default(), 0), 0, 0))
    }

    #[test]
    fn a_principal_past_its_bound_overflows_alone() {
        let ids = ClientIds::new();
        for i in 0..3 {
            assert!(matches!(ids.admit("A", &i.to_string(), 3, 100), Admission::Kept(_)));
        }
        // A's known ids stay its own; its new ones overflow; B is untouched by A's flood.
        assert!(matches!(ids.admit("A", "1", 3, 100), Admission::Kept(_)));
        let over = ids.admit("A", "new", 3, 100);
        assert_eq!(over.client_id("new"), OVERFLOW_TAG);
        assert!(matches!(ids.admit("B", "new", 3, 100), Admission::Kept(_)));
        assert!(matches!(ids.admit("", "new", 3, 100), Admission::Unbounded));
        assert_eq!((ids.principals(), ids.entries(), ids.overflowed()), (2, 4, 1));
    }

    #[test]
    fn the_table_cap_holds_across_principals() {
        let ids = ClientIds::new();
        for p in 0..5 {
            ids.admit(&p.to_string(), "c", 10, 3);
        }
        assert_eq!((ids.entries(), ids.overflowed()), (3, 2));
    }

    #[test]
    fn expiry_of_the_sensor_frees_the_place() {
        let ids = ClientIds::new();
        let s = sensor("a");
        let Admission::Kept(key) = ids.admit("A", "a", 1, 10) else {
            panic!("admitted")
        };
        ids.resolved(key, &s);
        assert!(matches!(ids.admit("A", "b", 1, 10), Admission::Overflow));
        ids.prune(&HashSet::from([Arc::as_ptr(&sensor("x")) as usize]));
        assert_eq!(ids.entries(), 1);
        ids.prune(&HashSet::from([Arc::as_ptr(&s) as usize]));
        assert_eq!((ids.principals(), ids.entries()), (0, 0));
        assert!(matches!(ids.admit("A", "b", 1, 10), Admission::Kept(_)));
    }
}
