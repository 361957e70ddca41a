//! Topic quotas' configuration (KIP-1010): per named topic and for `<default>`, a bound per
//! type (`producer_byte_rate`, `consumer_byte_rate`), and the rules a topic quota is checked by.

use std::collections::BTreeMap;

use crate::error::QuotaError;
use crate::types::ClientQuotaType;
use crate::validate::validate_value;

/// Kafka's `Topic.MAX_NAME_LENGTH`.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// Kafka's legal topic names (`Topic.validate`): 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn is_legal_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOPIC_NAME_LENGTH
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// The two types a topic quota has.
#[inline]
pub(crate) fn slot(t: ClientQuotaType) -> Option<usize> {
    match t {
        ClientQuotaType::Produce => Some(0),
        ClientQuotaType::Fetch => Some(1),
        _ => None,
    }
}

pub(crate) const TYPES: [ClientQuotaType; 2] = [ClientQuotaType::Produce, ClientQuotaType::Fetch];

/// The configured topic quotas: per named topic and for `<default>`, a bound per type.
#[derive(Default, Clone)]
pub struct TopicConfig {
    pub(crate) named: BTreeMap<Box<str>, [Option<f64>; 2]>,
    pub(crate) default: [Option<f64>; 2],
}

impl TopicConfig {
    /// The bound for `topic` of type index `i`: its own, else `<default>`'s.
    #[inline]
    pub(crate) fn bound(&self, topic: &str, i: usize) -> Option<f64> {
        match self.named.get(topic) {
            Some(b) if b[i].is_some() => b[i],
            _ => self.default[i],
        }
    }

    pub(crate) fn any(&self, i: usize) -> bool {
        self.default[i].is_some() || self.named.values().any(|b| b[i].is_some())
    }

    /// This configuration with the quota of type index `i` of `topic` set (`Some`) or removed.
    pub(crate) fn with(&self, topic: Option<&str>, i: usize, value: Option<f64>) -> TopicConfig {
        let mut next = self.clone();
        match topic {
            None => next.default[i] = value,
            Some(name) => {
                let entry = next.named.entry(name.into()).or_default();
                entry[i] = value;
                if entry.iter().all(Option::is_none) {
                    next.named.remove(name);
                }
            }
        }
        next
    }
}

/// Checks the quota `t` = `value` of `topic` (`None` = `<default>`) like a client byte-rate
/// quota, a named topic being a legal Kafka topic name; returns the type's index.
pub(crate) fn check(
    topic: Option<&str>,
    t: ClientQuotaType,
    value: Option<f64>,
) -> Result<usize, QuotaError> {
    let entity = match topic {
        Some(name) => format!("topic={name}"),
        None => "topic=<default>".to_owned(),
    };
    let bad = |reason: String| QuotaError::InvalidConfig {
        entity: entity.clone(),
        key: t.config_key().to_owned(),
        reason,
    };
    let Some(i) = slot(t) else {
        return Err(bad(
            "a topic quota is producer_byte_rate or consumer_byte_rate".into()
        ));
    };
    if let Some(name) = topic {
        if !is_legal_topic_name(name) {
            return Err(bad(
                "not a legal topic name (1 to 249 of [a-zA-Z0-9._-], not '.' or '..')".into(),
            ));
        }
    }
    if let Some(v) = value {
        let broker = crate::entity::QuotaEntity {
            user: None,
            client_id: None,
        };
        validate_value(&broker, t, v, f64::INFINITY).map_err(|e| match e {
            QuotaError::InvalidConfig { reason, .. } => bad(reason),
            other => other,
        })?;
    }
    Ok(i)
}
