//! An entity as the Python layer passes it (to `_alter`, `validate_quota_changes`,
//! `QuotaConfig.set`) and gets it back from `_describe`: each side is a code and a name. The
//! codes are exported as `ENTITY_ABSENT`, `ENTITY_DEFAULT`, `ENTITY_NAMED` (see `rules.rs`).

use quota_core::{ClientQuotaType as CoreType, EntityName, QuotaChange, QuotaEntity, QuotaError};

use crate::errors::{config_error, PyQuotaResult};

/// Entity-side codes: absent, `<default>`, named.
pub const ENTITY_ABSENT: u8 = 0;
pub const ENTITY_DEFAULT: u8 = 1;
pub const ENTITY_NAMED: u8 = 2;

/// One side of an entity from its code and name; an unknown code is a `QuotaConfigError`.
pub fn entity_name(kind: u8, name: String) -> PyQuotaResult<Option<EntityName>> {
    match kind {
        ENTITY_ABSENT => Ok(None),
        ENTITY_DEFAULT => Ok(Some(EntityName::Default)),
        ENTITY_NAMED => Ok(Some(EntityName::Name(name))),
        k => Err(config_error(format!(
            "unknown entity kind {k} (expected {ENTITY_ABSENT} absent, {ENTITY_DEFAULT} <default> or {ENTITY_NAMED} named)"
        ))),
    }
}

/// The code and name of one side, as [`entity_name`] takes them.
pub fn entity_parts(name: &Option<EntityName>) -> (u8, &str) {
    match name {
        None => (ENTITY_ABSENT, ""),
        Some(EntityName::Default) => (ENTITY_DEFAULT, ""),
        Some(EntityName::Name(n)) => (ENTITY_NAMED, n.as_str()),
    }
}

/// A change tuple `(user_kind, user, client_kind, client, config_key, value)`.
pub type ChangeTuple = (u8, String, u8, String, String, Option<f64>);

/// Core changes from the Python layer's tuples; an unknown code or config key is a
/// `QuotaConfigError` naming it.
pub fn quota_changes(changes: Vec<ChangeTuple>) -> PyQuotaResult<Vec<QuotaChange>> {
    changes
        .into_iter()
        .map(|(uk, u, ck, c, key, value)| {
            let entity = QuotaEntity {
                user: entity_name(uk, u)?,
                client_id: entity_name(ck, c)?,
            };
            let Some(quota_type) = CoreType::from_config_key(&key) else {
                return Err(QuotaError::InvalidConfig {
                    entity: entity.to_string(),
                    key,
                    reason: format!(
                        "unknown config key (expected one of {})",
                        config_keys().join(", ")
                    ),
                }
                .into());
            };
            Ok(QuotaChange {
                entity,
                quota_type,
                value,
            })
        })
        .collect()
}

/// The dynamic config keys, in quota-type order.
pub fn config_keys() -> Vec<&'static str> {
    CoreType::ALL.iter().map(|t| t.config_key()).collect()
}
