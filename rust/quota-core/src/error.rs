//! The kernel's single error type; the Python binding maps each variant to one exception class.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum QuotaError {
    /// A rejected quota configuration (Python: `QuotaConfigError`).
    InvalidConfig {
        entity: String,
        key: String,
        reason: String,
    },
    /// A bad recorded value such as NaN or a negative byte count (Python: `ValueError`).
    InvalidValue(String),
    /// A bad constructor or call argument that is not configuration (Python: `ValueError`).
    InvalidArgument(String),
    /// A feature that a later release provides (Python: `KQuotaError`).
    Unsupported(String),
    /// A strict controller-mutation request met a bucket already in debt; nothing was recorded
    /// (Python: `ThrottlingQuotaExceededError`).
    ThrottlingQuotaExceeded { throttle_time_ms: i32 },
    /// The kernel was closed; it records and configures nothing more (Python: `KQuotaError`).
    Closed,
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::InvalidConfig { entity, key, reason } => {
                write!(f, "invalid quota for entity {entity}, key {key}: {reason}")
            }
            QuotaError::InvalidValue(m) | QuotaError::InvalidArgument(m) | QuotaError::Unsupported(m) => {
                f.write_str(m)
            }
            QuotaError::Closed => f.write_str(
                "the QuotaManager is closed (close() stopped its expiry thread and callback); \
                 create a new one",
            ),
            QuotaError::ThrottlingQuotaExceeded { throttle_time_ms } => write!(
                f,
                "The throttling quota has been exceeded (controller mutation quota; retry after \
                 {throttle_time_ms} ms)"
            ),
        }
    }
}

impl std::error::Error for QuotaError {}
