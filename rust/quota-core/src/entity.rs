//! Quota entities (KIP-546): `users/<u>`, `users/<u>/clients/<c>`, `clients/<c>` and the
//! `<default>` forms, with the kind of quota each one enables.

use std::fmt;

use crate::error::QuotaError;

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
    pub(crate) fn kind(&self) -> u8 {
        match (&self.user, &self.client_id) {
            (Some(_), Some(_)) => USER_CLIENT_ID_QUOTAS,
            (Some(_), None) => USER_QUOTAS,
            _ => CLIENT_ID_QUOTAS,
        }
    }
}
