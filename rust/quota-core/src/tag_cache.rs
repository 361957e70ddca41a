//! The metric-tag cache of one quota type: raw (principal, client-id) -> the sensor its tags
//! select, valid while its tags generation is current. Only resolutions that need the cache are
//! kept (the 8-level walk, a sanitized principal, a callback); it is bounded like the registry,
//! and its keys' bytes count against the kernel's name budget.

use std::sync::Arc;

use crate::keys::{shared_str, NamePair, PairRef};
use crate::name_budget::ByteBudget;
use crate::sensor::QuotaSensor;

type FastState = foldhash::fast::RandomState;

/// A resolved (principal, client-id): the sensor its tags select, stamped with the tags
/// generation it was resolved under. Generation 0 (a failed callback) is never current.
#[derive(Clone)]
pub struct Resolved {
    pub(crate) tags_generation: u64,
    pub(crate) sensor: Arc<QuotaSensor>,
}

pub(crate) struct TagCache(papaya::HashMap<NamePair, Resolved, FastState>);

impl TagCache {
    pub(crate) fn new() -> Self {
        TagCache(papaya::HashMap::with_hasher(FastState::default()))
    }

    /// The cached resolution, whatever its generation.
    #[inline]
    pub(crate) fn get(&self, user: &str, client_id: &str) -> Option<Resolved> {
        self.0.pin().get(&PairRef(user, client_id)).cloned()
    }

    /// The cached resolution if it was made under `generation`.
    #[inline]
    pub(crate) fn current(&self, user: &str, client_id: &str, generation: u64) -> Option<Resolved> {
        match self.0.pin().get(&PairRef(user, client_id)) {
            Some(r) if r.tags_generation == generation => Some(r.clone()),
            _ => None,
        }
    }

    /// Keeps `r` for (user, client_id) if the cache is below `cap` entries and the names fit
    /// `names`.
    pub(crate) fn insert(&self, user: &str, client_id: &str, r: &Resolved, cap: usize, names: &ByteBudget) {
        if self.0.len() >= cap || !names.try_reserve(user.len() + client_id.len()) {
            return;
        }
        let raw = NamePair {
            first: shared_str(user),
            second: shared_str(client_id),
        };
        if self.0.pin().insert(raw, r.clone()).is_some() {
            // Replaced an entry with the same key: its bytes were counted already.
            names.release(user.len() + client_id.len());
        }
    }

    /// Drops the entries not made under `generation` (all of them with `None`), releasing their
    /// names' bytes.
    pub(crate) fn retain_generation(&self, generation: Option<u64>, names: &ByteBudget) {
        self.0.pin().retain(|k, r| {
            let keep = Some(r.tags_generation) == generation;
            if !keep {
                names.release(k.first.len() + k.second.len());
            }
            keep
        });
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}
