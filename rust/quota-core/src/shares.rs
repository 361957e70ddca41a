//! Fleet shares: the fraction of each configured limit this kernel enforces when it is one of
//! several proxies that hold a quota together (`kquota proxy --quota-scope fleet`).
//!
//! Per quota type, an immutable map from a sensor's metric tags `(user, client-id)` to a
//! fraction, plus the fraction for tags the map does not name (a new entity starts there).
//! [`limit_for`](crate::kernel::QuotaKernel) multiplies the limit by it; publishing a new map
//! bumps the type's limits generation, so each sensor re-reads its limit once, on its next
//! record (the cold path). The record path never reads this map. Topic quotas have their own
//! maps ([`TopicShareMap`], kept by `TopicQuotas`): a topic's sensor holds its bound times its
//! share, set again whenever either changes.

use std::collections::HashMap;

use arc_swap::ArcSwap;

use crate::error::QuotaError;
use crate::types::ClientQuotaType;

/// One quota type's shares.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareMap {
    /// The fraction of tags not in `by_tags`.
    pub default: f64,
    /// `(user tag, client-id tag)` -> fraction.
    pub by_tags: HashMap<(String, String), f64>,
}

impl ShareMap {
    /// Every limit whole: the `proxy` scope.
    pub fn whole() -> Self {
        ShareMap {
            default: 1.0,
            by_tags: HashMap::new(),
        }
    }

    /// The fraction for a sensor's tags.
    pub fn of(&self, user: &str, client_id: &str) -> f64 {
        if self.by_tags.is_empty() {
            return self.default;
        }
        // Keyed by owned strings; this runs on the cold path only (limit refresh, metrics).
        self.by_tags
            .get(&(user.to_owned(), client_id.to_owned()))
            .copied()
            .unwrap_or(self.default)
    }
}

/// One quota type's shares of topic quotas: the same rule keyed by topic (a topic quota's sensor
/// is an entity of its own in the fleet's usage).
#[derive(Debug, Clone, PartialEq)]
pub struct TopicShareMap {
    /// The fraction of topics not in `by_topic`.
    pub default: f64,
    /// topic -> fraction.
    pub by_topic: HashMap<String, f64>,
}

impl TopicShareMap {
    /// Every topic quota whole: the `proxy` scope.
    pub fn whole() -> Self {
        TopicShareMap {
            default: 1.0,
            by_topic: HashMap::new(),
        }
    }

    /// The fraction for a topic (a configuration or share change, a new sensor, a Fetch cap).
    pub fn of(&self, topic: &str) -> f64 {
        if self.by_topic.is_empty() {
            return self.default;
        }
        self.by_topic.get(topic).copied().unwrap_or(self.default)
    }

    /// Checks every fraction.
    pub(crate) fn check(&self) -> Result<(), QuotaError> {
        check_fraction(self.default)?;
        self.by_topic.values().try_for_each(|f| check_fraction(*f))
    }
}

/// The shares of every quota type, read when a limit is refreshed.
pub struct FleetShares {
    pub(crate) types: [ArcSwap<ShareMap>; 4],
}

impl Default for FleetShares {
    fn default() -> Self {
        FleetShares {
            types: std::array::from_fn(|_| ArcSwap::from_pointee(ShareMap::whole())),
        }
    }
}

impl FleetShares {
    /// The fraction of type `t`'s limit for tags `(user, client_id)`.
    pub(crate) fn of(&self, t: ClientQuotaType, user: &str, client_id: &str) -> f64 {
        self.types[t.index()].load().of(user, client_id)
    }
}

/// A share is a fraction of the limit.
pub(crate) fn check_fraction(f: f64) -> Result<(), QuotaError> {
    if f.is_finite() && (0.0..=1.0).contains(&f) {
        Ok(())
    } else {
        Err(QuotaError::InvalidValue(format!(
            "a fleet share must be a fraction between 0 and 1, got {f}"
        )))
    }
}
