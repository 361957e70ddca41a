//! kquota's kernel: Apache Kafka's client quota semantics (KIP-13, KIP-55) as a pure Rust library.
//!
//! * [`sensor`]: lock-free sampled-window rate sensors (Kafka's `Rate` over `WindowedSum`) and
//!   the throttle formula of `QuotaUtils`.
//! * [`config`]: quota entities, validation, the 8-level precedence and metric tags.
//! * [`kernel`]: configuration snapshots, the concurrent registry of sensors, the metric-tag
//!   cache and the record path; [`keys`]: its map keys; [`handle`]: per-connection handles.
//! * [`expiry`]: the cap on live sensors, overflow sensors, idle-sensor expiry and its thread;
//!   [`metrics`]: lock-free metric snapshots.

pub mod budget;
pub mod callback;
pub mod clock;
pub mod config;
pub mod error;
pub mod expiry;
pub mod handle;
pub mod idle;
pub mod kernel;
pub mod keys;
pub mod metrics;
pub mod sanitize;
pub mod sensor;
pub mod token_bucket;
pub mod types;

pub use budget::{check_name, MAX_NAME_BYTES};
pub use callback::{QuotaCallbackHook, FAILED_TAGS};
pub use config::{EntityName, QuotaEntity};
pub use error::QuotaError;
pub use expiry::{ExpiryReport, ExpiryTask};
pub use handle::ClientHandle;
pub use kernel::{
    check_mutations, check_nanos, check_record_value, validate_changes, KernelConfig, QuotaChange,
    QuotaKernel, NANOS_TO_PERCENT,
};
pub use keys::QuotaSensor;
pub use metrics::{MetricsSnapshot, SensorRow, TypeRow};
pub use sensor::{throttle_time_ms, Measurement, RateSensor};
pub use token_bucket::{mutation_throttle_time_ms, StrictTake, TokenBucket};
pub use types::{ClientQuotaType, WindowSpec};
