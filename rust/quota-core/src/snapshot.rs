//! Everything configured, as one immutable value: the kernel publishes a new snapshot for each
//! change (see `configure`) and readers never lock. A snapshot carries, per quota type, the two
//! generation counters that tell cached tags and cached limits whether they still hold.

use std::collections::BTreeMap;

use crate::entity::QuotaEntity;
use crate::precedence::TypeConfig;
use crate::types::ClientQuotaType;

/// One requested configuration change: set (`Some`) or remove (`None`) one key of one entity.
#[derive(Debug, Clone)]
pub struct QuotaChange {
    pub entity: QuotaEntity,
    pub quota_type: ClientQuotaType,
    pub value: Option<f64>,
}

/// Everything configured, as one immutable value.
#[derive(Clone)]
pub struct ConfigSnapshot {
    pub types: [TypeConfig; 4],
    /// Entities with at least one key, for `describe`: values indexed by `ClientQuotaType`.
    pub entities: BTreeMap<QuotaEntity, [Option<f64>; 4]>,
}

impl ConfigSnapshot {
    /// The snapshot of a new kernel: only the static broker defaults.
    pub fn with_static_defaults(producer_default: Option<f64>, consumer_default: Option<f64>) -> Self {
        ConfigSnapshot {
            types: [
                TypeConfig::with_static_default(producer_default),
                TypeConfig::with_static_default(consumer_default),
                TypeConfig::with_static_default(None),
                TypeConfig::with_static_default(None),
            ],
            entities: BTreeMap::new(),
        }
    }

    /// This snapshot with (already validated) `changes` applied. A changed type's limits
    /// generation is bumped; its tags generation only when the tags can change: when its kind
    /// bits change, or when the 8-level walk (several kinds) gains or loses an entity.
    pub fn with_changes(&self, changes: &[QuotaChange]) -> ConfigSnapshot {
        let mut next = self.clone();
        let mut touched = [false; 4];
        let mut tags_changed = [false; 4];
        for ch in changes {
            let i = ch.quota_type.index();
            let cfg = &mut next.types[i];
            if cfg.get(&ch.entity) == ch.value {
                continue;
            }
            let kinds_before = cfg.kinds;
            let set_changed = cfg.set(&ch.entity, ch.value);
            touched[i] = true;
            let mixed = cfg.kinds.count_ones() > 1;
            tags_changed[i] |= cfg.kinds != kinds_before || (mixed && set_changed);
            let slot = next.entities.entry(ch.entity.clone()).or_insert([None; 4]);
            slot[i] = ch.value;
            if slot.iter().all(Option::is_none) {
                next.entities.remove(&ch.entity);
            }
        }
        for i in 0..4 {
            if touched[i] {
                next.types[i].limits_generation += 1;
                if tags_changed[i] {
                    next.types[i].tags_generation += 1;
                }
            }
        }
        next
    }

    /// This snapshot with the chosen generations of `types` bumped.
    pub fn with_bumped(&self, types: &[ClientQuotaType], tags: bool, limits: bool) -> ConfigSnapshot {
        let mut next = self.clone();
        for t in types {
            let cfg = &mut next.types[t.index()];
            if limits {
                cfg.limits_generation += 1;
            }
            if tags {
                cfg.tags_generation += 1;
            }
        }
        next
    }

    /// Every configured entity with its keys.
    pub fn describe(&self) -> Vec<(QuotaEntity, Vec<(ClientQuotaType, f64)>)> {
        self.entities
            .iter()
            .map(|(e, vals)| {
                let kv = ClientQuotaType::ALL
                    .iter()
                    .filter_map(|t| vals[t.index()].map(|v| (*t, v)))
                    .collect();
                (e.clone(), kv)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::EntityName;

    fn change(user: Option<&str>, client: Option<&str>, value: Option<f64>) -> QuotaChange {
        let name = |n: Option<&str>| n.map(|n| EntityName::Name(n.into()));
        QuotaChange {
            entity: QuotaEntity {
                user: name(user),
                client_id: name(client),
            },
            quota_type: ClientQuotaType::Produce,
            value,
        }
    }

    #[test]
    fn generations_follow_what_can_change() {
        let s0 = ConfigSnapshot::with_static_defaults(None, None);
        let p = |s: &ConfigSnapshot| (s.types[0].tags_generation, s.types[0].limits_generation);
        assert_eq!(p(&s0), (1, 1));
        // A first client-id quota sets a kind bit: tags and limits.
        let s1 = s0.with_changes(&[change(None, Some("a"), Some(10.0))]);
        assert_eq!(p(&s1), (2, 2));
        // Another client-id under the same single kind: limits only.
        let s2 = s1.with_changes(&[change(None, Some("b"), Some(10.0))]);
        assert_eq!(p(&s2), (2, 3));
        // Unchanged value: nothing.
        assert_eq!(
            p(&s2.with_changes(&[change(None, Some("b"), Some(10.0))])),
            (2, 3)
        );
        // A user quota mixes kinds: tags too; then each new entity moves tags.
        let s3 = s2.with_changes(&[change(Some("u"), None, Some(5.0))]);
        assert_eq!(p(&s3), (3, 4));
        let s4 = s3.with_changes(&[change(Some("v"), None, Some(5.0))]);
        assert_eq!(p(&s4), (4, 5));
        assert_eq!(s4.describe().len(), 4);
        // Removing the last key of an entity drops it from describe; the other types are untouched.
        let s5 = s4.with_changes(&[change(Some("v"), None, None)]);
        assert_eq!(s5.describe().len(), 3);
        assert_eq!(s5.types[1].limits_generation, 1);
        assert_eq!(
            p(&s5.with_bumped(&[ClientQuotaType::Produce], true, false)),
            (6, 6)
        );
    }
}
