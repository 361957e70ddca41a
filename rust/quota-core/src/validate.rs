//! Input rules shared by every entry point: recorded values, thread time, mutation counts and
//! configuration values. Each rule is written once here; the kernel, the per-connection handle
//! and the binding all call these.

use crate::entity::QuotaEntity;
use crate::error::QuotaError;
use crate::snapshot::QuotaChange;
use crate::types::ClientQuotaType;

/// The largest value one `unrecord` takes back (2^63, the largest quota). Kafka subtracts any
/// double, so two `unrecord(1e308)` drive a sample to -inf and lift throttling for a window;
/// bounded, the sums stay finite (a documented fix, see docs/semantics-notes.md).
pub const MAX_UNRECORD_VALUE: f64 = 9_223_372_036_854_775_808.0;

/// `Ok` for a finite number >= 0, else `InvalidValue` with `message(value)`.
#[inline]
fn check_non_negative(value: f64, message: impl FnOnce(f64) -> String) -> Result<(), QuotaError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(QuotaError::InvalidValue(message(value)))
    }
}

/// [`check_record_value`] for `unrecord`, also bounded by [`MAX_UNRECORD_VALUE`].
pub fn check_unrecord_value(value: f64) -> Result<(), QuotaError> {
    check_non_negative(value, |v| {
        format!("unrecorded value must be a finite number >= 0, got {v}")
    })?;
    if value > MAX_UNRECORD_VALUE {
        return Err(QuotaError::InvalidValue(format!(
            "unrecorded value must be at most 2^63 (the largest quota), got {value}"
        )));
    }
    Ok(())
}

pub fn check_record_value(value: f64) -> Result<(), QuotaError> {
    check_non_negative(value, |v| {
        format!("recorded value must be a finite number >= 0, got {v} (use unrecord to take a value back)")
    })
}

/// Kafka's `ClientRequestQuotaManager.NanosToPercentagePerSecond`: thread time is recorded as
/// percent of one thread over each second of the window.
pub const NANOS_TO_PERCENT: f64 = 100.0 / 1e9;

pub fn check_nanos(nanos: f64) -> Result<(), QuotaError> {
    check_non_negative(nanos, |v| {
        format!("thread time must be a finite number of nanoseconds >= 0, got {v}")
    })
}

pub fn check_mutations(mutations: f64) -> Result<(), QuotaError> {
    check_non_negative(mutations, |v| {
        format!("mutation count must be a finite number >= 0, got {v}")
    })
}

/// Checks thread time and converts it to what a request-time sensor records: Kafka's
/// `ClientRequestQuotaManager` records `nanos * NanosToPercentagePerSecond`.
#[inline]
pub fn thread_time_percent(nanos: f64) -> Result<f64, QuotaError> {
    check_nanos(nanos)?;
    Ok(nanos * NANOS_TO_PERCENT)
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

/// Checks a whole alter request before anything is applied: each entity, each value, and that no
/// (entity, type) appears twice; `capacity_percent` bounds `request_percentage`.
pub fn validate_changes(changes: &[QuotaChange], capacity_percent: f64) -> Result<(), QuotaError> {
    let mut seen = std::collections::HashSet::new();
    for ch in changes {
        ch.entity.validate()?;
        if !seen.insert((ch.entity.clone(), ch.quota_type)) {
            return Err(QuotaError::InvalidConfig {
                entity: ch.entity.to_string(),
                key: ch.quota_type.config_key().into(),
                reason: "appears more than once in one alter call".into(),
            });
        }
        if let Some(v) = ch.value {
            validate_value(&ch.entity, ch.quota_type, v, capacity_percent)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::EntityName;

    fn user(n: &str) -> Option<EntityName> {
        Some(EntityName::Name(n.into()))
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

    #[test]
    fn thread_time_is_checked_then_converted_to_percent() {
        assert_eq!(thread_time_percent(1e9).unwrap(), 100.0);
        assert!(thread_time_percent(-1.0).is_err());
        assert!(thread_time_percent(f64::NAN).is_err());
    }
}
