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
mod check_cache;
pub mod clock;
pub mod entity;
pub mod error;
pub mod expiry;
pub mod handle;
pub mod idle;
pub mod kernel;
pub mod keys;
mod limit_cache;
pub mod measurement;
pub mod metrics;
pub mod precedence;
pub mod rate;
mod sample_ring;
pub mod sanitize;
pub mod sensor;
pub mod throttle;
pub mod token_bucket;
pub mod types;
pub mod validate;
mod windowed_sum;

pub use budget::{check_name, MAX_NAME_BYTES};
pub use callback::{QuotaCallbackHook, FAILED_TAGS};
pub use entity::{EntityName, QuotaEntity};
pub use error::QuotaError;
pub use expiry::{ExpiryReport, ExpiryTask};
pub use handle::ClientHandle;
pub use kernel::{KernelConfig, QuotaChange, QuotaKernel};
pub use validate::{check_mutations, check_nanos, check_record_value, thread_time_percent, NANOS_TO_PERCENT};
pub use measurement::Measurement;
pub use rate::RateSensor;
pub use sensor::QuotaSensor;
pub use throttle::{mutation_throttle_time_ms, throttle_time_ms};
pub use metrics::{MetricsSnapshot, SensorRow, TypeRow};
pub use token_bucket::{StrictTake, TokenBucket};
pub use types::{ClientQuotaType, WindowSpec};
