//! An entity as the Python layer passes it to `_alter` and gets it from `_describe`: each side
//! is a code and a name. The codes are `kquota.manager`'s `_ABSENT`, `_DEFAULT`, `_NAMED`.

use quota_core::EntityName;

use crate::errors::{config_error, PyQuotaResult};

/// One side of an entity: 0 = absent, 1 = `<default>`, 2 = named.
pub fn entity_name(kind: u8, name: String) -> PyQuotaResult<Option<EntityName>> {
    match kind {
        0 => Ok(None),
        1 => Ok(Some(EntityName::Default)),
        2 => Ok(Some(EntityName::Name(name))),
        k => Err(config_error(format!(
            "bad entity kind {k} (expected 0 absent, 1 <default>, 2 named)"
        ))),
    }
}

/// The code and name of one side, as [`entity_name`] takes them.
pub fn entity_parts(name: &Option<EntityName>) -> (u8, &str) {
    match name {
        None => (0, ""),
        Some(EntityName::Default) => (1, ""),
        Some(EntityName::Name(n)) => (2, n.as_str()),
    }
}
