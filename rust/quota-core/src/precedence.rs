//! KIP-55 precedence: Kafka's `DefaultQuotaCallback` (`ClientQuotaManager.scala`), resolving a
//! (principal, client-id) to metric tags and metric tags to a limit, with its per-type "kinds
//! ever configured" bit set that decides whether tags are fixed or found by the 8-level walk
//! (see docs/semantics-notes.md).

use std::borrow::Cow;
use std::collections::HashMap;

use crate::entity::{EntityName, QuotaEntity, CLIENT_ID_QUOTAS, USER_CLIENT_ID_QUOTAS, USER_QUOTAS};
use crate::sanitize::{needs_escaping, sanitize};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Which tags the kind bits alone fix: `Some((keep user, keep client-id))` while at most one kind
/// of level is configured (the tags then never depend on which entities exist), `None` when the
/// 8-level walk decides (several kinds, or the kernel's custom/closed bits).
#[inline]
pub(crate) fn fixed_tags(kinds: u8) -> Option<(bool, bool)> {
    match kinds {
        0 | CLIENT_ID_QUOTAS => Some((false, true)),
        USER_QUOTAS => Some((true, false)),
        USER_CLIENT_ID_QUOTAS => Some((true, true)),
        _ => None,
    }
}

/// The metric tags when they follow from the kind bits alone and the principal needs no
/// sanitizing: the names themselves (no allocation), for lookups straight in the registry.
#[inline]
pub(crate) fn direct_tags<'a>(kinds: u8, user: &'a str, client_id: &'a str) -> Option<(&'a str, &'a str)> {
    let (keep_user, keep_client) = fixed_tags(kinds)?;
    if keep_user && needs_escaping(user) {
        return None;
    }
    Some((
        if keep_user { user } else { "" },
        if keep_client { client_id } else { "" },
    ))
}

/// The level a quota was found at: KIP-55's eight levels, in precedence order, then the static
/// broker default; [`Callback`](QuotaLevel::Callback) when a KIP-257 callback gives the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaLevel {
    UserClient,
    UserDefaultClient,
    User,
    DefaultUserClient,
    DefaultUserDefaultClient,
    DefaultUser,
    Client,
    DefaultClient,
    StaticDefault,
    Callback,
}

impl QuotaLevel {
    /// The level as KIP-55 names it: the configuration path of the matched entity (with
    /// `<user>` / `<client-id>` standing for the sensor's own names), `static-default` for
    /// `quota.producer.default` / `quota.consumer.default`, `callback` for a callback's limit.
    pub fn name(self) -> &'static str {
        match self {
            QuotaLevel::UserClient => "/config/users/<user>/clients/<client-id>",
            QuotaLevel::UserDefaultClient => "/config/users/<user>/clients/<default>",
            QuotaLevel::User => "/config/users/<user>",
            QuotaLevel::DefaultUserClient => "/config/users/<default>/clients/<client-id>",
            QuotaLevel::DefaultUserDefaultClient => "/config/users/<default>/clients/<default>",
            QuotaLevel::DefaultUser => "/config/users/<default>",
            QuotaLevel::Client => "/config/clients/<client-id>",
            QuotaLevel::DefaultClient => "/config/clients/<default>",
            QuotaLevel::StaticDefault => "static-default",
            QuotaLevel::Callback => "callback",
        }
    }
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
        let (u, c) = match fixed_tags(self.kinds) {
            Some((keep_user, keep_client)) => (
                if keep_user { user } else { empty() },
                if keep_client { client } else { empty() },
            ),
            None => {
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
    #[inline]
    pub fn limit(&self, user_tag: &str, client_tag: &str) -> Option<f64> {
        self.limit_and_level(user_tag, client_tag).map(|(limit, _)| limit)
    }

    /// The limit for a sensor with these tags and the level it was found at, in KIP-55's order
    /// (the one walk [`limit`](Self::limit) answers from); `None` means unlimited.
    pub fn limit_and_level(&self, user_tag: &str, client_tag: &str) -> Option<(f64, QuotaLevel)> {
        use QuotaLevel::*;
        let at = |level: QuotaLevel| move |v: f64| (v, level);
        match (user_tag.is_empty(), client_tag.is_empty()) {
            (false, false) => {
                let levels = self.user_levels(user_tag);
                levels
                    .and_then(|l| l.clients.get(client_tag).copied())
                    .map(at(UserClient))
                    .or_else(|| levels.and_then(|l| l.default_client).map(at(UserDefaultClient)))
                    .or_else(|| self.default_user.clients.get(client_tag).copied().map(at(DefaultUserClient)))
                    .or_else(|| self.default_user.default_client.map(at(DefaultUserDefaultClient)))
            }
            (false, true) => self
                .user_levels(user_tag)
                .and_then(|l| l.own)
                .map(at(User))
                .or_else(|| self.default_user.own.map(at(DefaultUser))),
            (true, false) => self
                .clients
                .get(client_tag)
                .copied()
                .map(at(Client))
                .or_else(|| self.default_client.map(at(DefaultClient)))
                .or_else(|| self.static_default.map(at(StaticDefault))),
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
    const LEVELS: [QuotaLevel; 8] = [
        QuotaLevel::UserClient,
        QuotaLevel::UserDefaultClient,
        QuotaLevel::User,
        QuotaLevel::DefaultUserClient,
        QuotaLevel::DefaultUserDefaultClient,
        QuotaLevel::DefaultUser,
        QuotaLevel::Client,
        QuotaLevel::DefaultClient,
    ];

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
            let (_, level) = cfg.limit_and_level(&ut, &ct).expect("limited");
            assert_eq!(level, LEVELS[i], "level {}", i + 1);
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
        assert_eq!(cfg.limit_and_level("", "c"), Some((9.0, QuotaLevel::StaticDefault)));
        assert_eq!(cfg.limit_and_level("", ""), None);
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
}
