//! Quota configuration: entities, per-type limits, and the KIP-55 resolution from a
//! (principal, client-id) pair to metric tags and from metric tags to a limit.
//!
//! Mirrors the default callback of Kafka's `ClientQuotaManager.scala`, including its per-type
//! "kinds ever configured" bit set that decides whether tags are fixed or found by the 8-level
//! walk (see docs/semantics-notes.md).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use crate::error::QuotaError;
use crate::sanitize::{needs_escaping, sanitize};
use crate::types::ClientQuotaType;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Kind bits of `quotaTypesEnabled`; once set they stay set, as in Kafka.
pub const CLIENT_ID_QUOTAS: u8 = 1;
pub const USER_QUOTAS: u8 = 2;
pub const USER_CLIENT_ID_QUOTAS: u8 = 4;

/// One side of a quota entity: a named user / client-id, or the `<default>` one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityName {
    Default,
    Name(String),
}

impl EntityName {
    fn describe(&self) -> String {
        match self {
            EntityName::Default => "<default>".to_owned(),
            EntityName::Name(n) => format!("{n:?}"),
        }
    }
}

/// A KIP-546 quota entity: `users/<u>`, `users/<u>/clients/<c>`, `clients/<c>` and the defaults.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

impl fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.user, &self.client_id) {
            (Some(u), Some(c)) => write!(f, "user={}, client-id={}", u.describe(), c.describe()),
            (Some(u), None) => write!(f, "user={}", u.describe()),
            (None, Some(c)) => write!(f, "client-id={}", c.describe()),
            (None, None) => f.write_str("(empty entity)"),
        }
    }
}

impl QuotaEntity {
    pub fn validate(&self) -> Result<(), QuotaError> {
        let bad = |key: &str, reason: &str| QuotaError::InvalidConfig {
            entity: self.to_string(),
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        if self.user.is_none() && self.client_id.is_none() {
            return Err(bad(
                "user/client-id",
                "an entity needs a user, a client-id or both",
            ));
        }
        if matches!(&self.user, Some(EntityName::Name(n)) if n.is_empty()) {
            return Err(bad(
                "user",
                "the user name is empty (use None for the <default> user)",
            ));
        }
        if matches!(&self.client_id, Some(EntityName::Name(n)) if n.is_empty()) {
            return Err(bad(
                "client-id",
                "the client-id is empty (use None for the <default> client-id)",
            ));
        }
        Ok(())
    }

    /// The kind bit that configuring this entity sets.
    fn kind(&self) -> u8 {
        match (&self.user, &self.client_id) {
            (Some(_), Some(_)) => USER_CLIENT_ID_QUOTAS,
            (Some(_), None) => USER_QUOTAS,
            _ => CLIENT_ID_QUOTAS,
        }
    }
}

/// Checks one configuration value for `key`; `capacity_percent` bounds `request_percentage`.
pub fn validate_value(
    entity: &QuotaEntity,
    qtype: ClientQuotaType,
    value: f64,
    capacity_percent: f64,
) -> Result<(), QuotaError> {
    let bad = |reason: String| QuotaError::InvalidConfig {
        entity: entity.to_string(),
        key: qtype.config_key().to_owned(),
        reason,
    };
    if !value.is_finite() {
        return Err(bad(format!("must be a finite number, got {value}")));
    }
    if value <= 0.0 {
        return Err(bad(format!("must be > 0, got {value}")));
    }
    match qtype {
        ClientQuotaType::Produce | ClientQuotaType::Fetch => {
            // Kafka's controller (`getErrorForIntegralQuotaValue`) allows a remainder of up to
            // 1e-6, from values that went through a double; the value is kept as given.
            if (value % 1.0).abs() > 1e-6 {
                return Err(bad(format!(
                    "must be a whole number of bytes per second, got {value}"
                )));
            }
            // Kafka accepts a double whose `toLong` round-trips; 2^63 is the largest such.
            if value > 9_223_372_036_854_775_808.0 {
                return Err(bad(format!("must be at most 2^63 - 1, got {value}")));
            }
        }
        ClientQuotaType::Request => {
            if value > capacity_percent {
                return Err(bad(format!(
                    "must be at most (num_io_threads + num_network_threads) * 100 = {capacity_percent}, got {value}"
                )));
            }
        }
        ClientQuotaType::ControllerMutation => {}
    }
    Ok(())
}

#[derive(Debug, Clone, Default)]
struct UserLevels {
    /// `users/<u>` (or `users/<default>`).
    own: Option<f64>,
    /// `users/<u>/clients/<default>`.
    default_client: Option<f64>,
    /// `users/<u>/clients/<c>`.
    clients: Map<String, f64>,
}

impl UserLevels {
    fn is_empty(&self) -> bool {
        self.own.is_none() && self.default_client.is_none() && self.clients.is_empty()
    }
}

/// One quota type's configuration, immutable once published in a snapshot.
#[derive(Debug, Clone, Default)]
pub struct TypeConfig {
    /// Kinds ever configured (never cleared).
    pub kinds: u8,
    /// Static broker default (`quota.producer.default` / `quota.consumer.default`), KIP-55 step 8.
    pub static_default: Option<f64>,
    /// Users by sanitized name.
    users: Map<String, UserLevels>,
    default_user: UserLevels,
    clients: Map<String, f64>,
    default_client: Option<f64>,
    /// Bumped when the answer of `metric_tags` may change.
    pub tags_generation: u64,
    /// Bumped when the answer of `limit` may change.
    pub limits_generation: u64,
}

/// Metric tags `(user, client-id)`; an empty string is a tag a level leaves out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MetricTags<'a> {
    pub user: Cow<'a, str>,
    pub client_id: Cow<'a, str>,
}

impl TypeConfig {
    pub fn with_static_default(static_default: Option<f64>) -> Self {
        TypeConfig {
            kinds: if static_default.is_some() {
                CLIENT_ID_QUOTAS
            } else {
                0
            },
            static_default,
            tags_generation: 1,
            limits_generation: 1,
            ..Default::default()
        }
    }

    /// True once any quota of this type has been configured (Kafka's `quotasEnabled`).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.kinds != 0
    }

    fn user_levels(&self, sanitized_user: &str) -> Option<&UserLevels> {
        self.users.get(sanitized_user)
    }

    /// The metric tags for a request of `principal` with `client_id` (default callback's
    /// `quotaMetricTags`). `principal` is the raw name; the user tag is its sanitized form.
    pub fn metric_tags<'a>(&self, principal: &'a str, client_id: &'a str) -> MetricTags<'a> {
        let user: Cow<'a, str> = if needs_escaping(principal) {
            Cow::Owned(sanitize(principal))
        } else {
            Cow::Borrowed(principal)
        };
        let client: Cow<'a, str> = Cow::Borrowed(client_id);
        let empty = || Cow::Borrowed("");
        let (u, c) = match self.kinds {
            0 | CLIENT_ID_QUOTAS => (empty(), client),
            USER_QUOTAS => (user, empty()),
            USER_CLIENT_ID_QUOTAS => (user, client),
            _ => {
                let levels = self.user_levels(&user);
                if levels.is_some_and(|l| l.clients.contains_key(client_id) || l.default_client.is_some()) {
                    (user, client) // levels 1, 2
                } else if levels.is_some_and(|l| l.own.is_some()) {
                    (user, empty()) // level 3
                } else if self.default_user.clients.contains_key(client_id)
                    || self.default_user.default_client.is_some()
                {
                    (user, client) // levels 4, 5
                } else if self.default_user.own.is_some() {
                    (user, empty()) // level 6
                } else {
                    (empty(), client) // levels 7, 8, static default
                }
            }
        };
        MetricTags {
            user: u,
            client_id: c,
        }
    }

    /// The limit for a sensor with these tags (default callback's `quotaLimit`); `None` means
    /// unlimited.
    pub fn limit(&self, user_tag: &str, client_tag: &str) -> Option<f64> {
        match (user_tag.is_empty(), client_tag.is_empty()) {
            (false, false) => {
                let levels = self.user_levels(user_tag);
                levels
                    .and_then(|l| l.clients.get(client_tag).copied())
                    .or_else(|| levels.and_then(|l| l.default_client))
                    .or_else(|| self.default_user.clients.get(client_tag).copied())
                    .or(self.default_user.default_client)
            }
            (false, true) => self
                .user_levels(user_tag)
                .and_then(|l| l.own)
                .or(self.default_user.own),
            (true, false) => self
                .clients
                .get(client_tag)
                .copied()
                .or(self.default_client)
                .or(self.static_default),
            (true, true) => None,
        }
    }

    /// The value configured on exactly this entity.
    pub fn get(&self, entity: &QuotaEntity) -> Option<f64> {
        match (&entity.user, &entity.client_id) {
            (Some(u), c) => {
                let levels = match u {
                    EntityName::Default => Some(&self.default_user),
                    EntityName::Name(n) => self.users.get(sanitize(n).as_str()),
                }?;
                match c {
                    None => levels.own,
                    Some(EntityName::Default) => levels.default_client,
                    Some(EntityName::Name(c)) => levels.clients.get(c.as_str()).copied(),
                }
            }
            (None, Some(EntityName::Default)) => self.default_client,
            (None, Some(EntityName::Name(c))) => self.clients.get(c.as_str()).copied(),
            (None, None) => None,
        }
    }

    /// Sets (`Some`) or removes (`None`) this entity's value; returns whether the set of
    /// configured entities changed (which can change tags, not only limits).
    pub fn set(&mut self, entity: &QuotaEntity, value: Option<f64>) -> bool {
        fn put<K: std::hash::Hash + Eq>(map: &mut Map<K, f64>, k: K, v: Option<f64>) -> bool {
            match v {
                Some(v) => map.insert(k, v).is_none(),
                None => map.remove(&k).is_some(),
            }
        }
        fn put_opt(slot: &mut Option<f64>, v: Option<f64>) -> bool {
            let was = slot.is_some();
            *slot = v;
            was != v.is_some()
        }
        if value.is_some() {
            self.kinds |= entity.kind();
        }
        match (&entity.user, &entity.client_id) {
            (Some(u), c) => {
                let (levels, key) = match u {
                    EntityName::Default => (&mut self.default_user, None),
                    EntityName::Name(n) => {
                        let key = sanitize(n);
                        (self.users.entry(key.clone()).or_default(), Some(key))
                    }
                };
                let changed = match c {
                    None => put_opt(&mut levels.own, value),
                    Some(EntityName::Default) => put_opt(&mut levels.default_client, value),
                    Some(EntityName::Name(c)) => put(&mut levels.clients, c.clone(), value),
                };
                if let Some(key) = key {
                    if levels.is_empty() {
                        self.users.remove(&key);
                    }
                }
                changed
            }
            (None, Some(EntityName::Default)) => put_opt(&mut self.default_client, value),
            (None, Some(EntityName::Name(c))) => put(&mut self.clients, c.clone(), value),
            (None, None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(n: &str) -> Option<EntityName> {
        Some(EntityName::Name(n.into()))
    }
    fn client(n: &str) -> Option<EntityName> {
        Some(EntityName::Name(n.into()))
    }
    const DEF: Option<EntityName> = Some(EntityName::Default);

    fn tags(cfg: &TypeConfig, u: &str, c: &str) -> (String, String) {
        let t = cfg.metric_tags(u, c);
        (t.user.into_owned(), t.client_id.into_owned())
    }

    fn limit_for(cfg: &TypeConfig, u: &str, c: &str) -> Option<f64> {
        let (ut, ct) = tags(cfg, u, c);
        cfg.limit(&ut, &ct)
    }

    #[test]
    fn eight_levels_in_precedence_order() {
        let levels = [
            (
                QuotaEntity {
                    user: user("u"),
                    client_id: client("c"),
                },
                1.0,
            ),
            (
                QuotaEntity {
                    user: user("u"),
                    client_id: DEF,
                },
                2.0,
            ),
            (
                QuotaEntity {
                    user: user("u"),
                    client_id: None,
                },
                3.0,
            ),
            (
                QuotaEntity {
                    user: DEF,
                    client_id: client("c"),
                },
                4.0,
            ),
            (
                QuotaEntity {
                    user: DEF,
                    client_id: DEF,
                },
                5.0,
            ),
            (
                QuotaEntity {
                    user: DEF,
                    client_id: None,
                },
                6.0,
            ),
            (
                QuotaEntity {
                    user: None,
                    client_id: client("c"),
                },
                7.0,
            ),
            (
                QuotaEntity {
                    user: None,
                    client_id: DEF,
                },
                8.0,
            ),
        ];
        let mut cfg = TypeConfig::with_static_default(Some(9.0));
        for (e, v) in &levels {
            cfg.set(e, Some(*v));
        }
        let expected_tags = [
            ("u", "c"),
            ("u", "c"),
            ("u", ""),
            ("u", "c"),
            ("u", "c"),
            ("u", ""),
            ("", "c"),
            ("", "c"),
            ("", "c"),
        ];
        for (i, (e, _)) in levels.iter().enumerate() {
            assert_eq!(limit_for(&cfg, "u", "c"), Some((i + 1) as f64), "level {}", i + 1);
            let (ut, ct) = tags(&cfg, "u", "c");
            assert_eq!(
                (ut.as_str(), ct.as_str()),
                expected_tags[i],
                "tags at level {}",
                i + 1
            );
            cfg.set(e, None);
        }
        assert_eq!(limit_for(&cfg, "u", "c"), Some(9.0));
        assert_eq!(tags(&cfg, "u", "c"), ("".into(), "c".into()));
    }

    #[test]
    fn fixed_tags_per_single_kind() {
        let mut cfg = TypeConfig::with_static_default(None);
        assert_eq!(tags(&cfg, "a b", "c"), ("".into(), "c".into()));
        cfg.set(
            &QuotaEntity {
                user: user("x"),
                client_id: None,
            },
            Some(1.0),
        );
        assert_eq!(tags(&cfg, "a b", "c"), ("a%20b".into(), "".into()));
        assert_eq!(limit_for(&cfg, "a b", "c"), None);
        // Removing keeps the kind bit, as Kafka does.
        cfg.set(
            &QuotaEntity {
                user: user("x"),
                client_id: None,
            },
            None,
        );
        assert_eq!(tags(&cfg, "a b", "c"), ("a%20b".into(), "".into()));
    }

    #[test]
    fn empty_client_id_under_client_quotas_is_unlimited() {
        let mut cfg = TypeConfig::with_static_default(None);
        cfg.set(
            &QuotaEntity {
                user: None,
                client_id: DEF,
            },
            Some(10.0),
        );
        assert_eq!(limit_for(&cfg, "u", ""), None);
        assert_eq!(limit_for(&cfg, "u", "x"), Some(10.0));
    }

    #[test]
    fn literal_default_user_is_not_the_default_entity() {
        let mut cfg = TypeConfig::with_static_default(None);
        cfg.set(
            &QuotaEntity {
                user: user("<default>"),
                client_id: None,
            },
            Some(10.0),
        );
        assert_eq!(limit_for(&cfg, "<default>", "c"), Some(10.0));
        assert_eq!(limit_for(&cfg, "bob", "c"), None);
        assert_eq!(tags(&cfg, "<default>", "c").0, "%3Cdefault%3E");
    }

    #[test]
    fn validation_rules() {
        let e = QuotaEntity {
            user: user("u"),
            client_id: None,
        };
        assert!(validate_value(&e, ClientQuotaType::Produce, 1024.0, 1100.0).is_ok());
        assert!(validate_value(&e, ClientQuotaType::Produce, 1.5, 1100.0).is_err());
        assert!(validate_value(&e, ClientQuotaType::Produce, 1024.000001, 1100.0).is_err());
        assert!(validate_value(&e, ClientQuotaType::Produce, 1235.0000001, 1100.0).is_ok());
        assert!(validate_value(&e, ClientQuotaType::Produce, 0.0, 1100.0).is_err());
        assert!(validate_value(&e, ClientQuotaType::Fetch, f64::NAN, 1100.0).is_err());
        assert!(validate_value(&e, ClientQuotaType::Request, 1100.0, 1100.0).is_ok());
        assert!(validate_value(&e, ClientQuotaType::Request, 1100.5, 1100.0).is_err());
        assert!(validate_value(&e, ClientQuotaType::ControllerMutation, f64::INFINITY, 1.0).is_err());
        let err = validate_value(&e, ClientQuotaType::Produce, -1.0, 1.0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("producer_byte_rate") && err.contains("user=\"u\""),
            "{err}"
        );
        assert!(QuotaEntity {
            user: user(""),
            client_id: None
        }
        .validate()
        .is_err());
        assert!(QuotaEntity {
            user: None,
            client_id: None
        }
        .validate()
        .is_err());
    }
}
