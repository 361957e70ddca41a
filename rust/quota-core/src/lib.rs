//! kquota's kernel: Apache Kafka's client quota semantics (KIP-13, KIP-55, KIP-124, KIP-257,
//! KIP-599) as a pure Rust library. One file per concept; modules lower in this list never use
//! modules higher up (checked by tests/structure/test_structure.py).
//!
//! * Kernel and its operations: [`kernel`] (state, constructor), [`configure`] (alter, publish,
//!   callbacks, close), [`resolution`] (names to tags to sensors), [`limits`] (the one limit
//!   lookup), [`record`] (the per-request path), [`request_quota`] (KIP-124),
//!   [`mutation_quota`] (KIP-599), [`response`] (Kafka's response step: the throttles
//!   combined and enforced, Produce and Fetch answers), [`shadow`] (a second configuration stepped
//!   beside the enforced one, never enforced; `shadow_queue` steps it off the response path), [`expiry`] (idle sensors and the thread), [`metrics`]
//!   (lock-free snapshots), [`utilization`] (KIP-1373, bounded), [`handle`] (per-connection handles).
//! * Connection quotas (KIP-612, Kafka's `ConnectionQuotas`), beside the client quotas:
//!   [`connection_quotas`] (the accept path), [`connection_rate`] (`connection_creation_rate`
//!   of `ip` entities and the rate rule), [`connection_limits`] (the broker properties),
//!   [`connection_metrics`], [`ip_address`] (which names are IP addresses).
//! * Per-type state: [`type_runtime`] (kind bits, generations), [`registry`] (sensor map, cap,
//!   overflow), [`client_ids`] (each principal's client ids, bounded), [`tag_cache`] (metric-tag cache), [`throttle_time_avg`] (`throttle-time` Avg, per type
//!   and per entity).
//! * Configuration: [`settings`] (constructor settings), [`snapshot`] (immutable snapshots),
//!   [`entity`] (KIP-546 entities), [`precedence`] (Kafka's `DefaultQuotaCallback`),
//!   [`validate`] (input rules), [`callback`] (the KIP-257 hook trait), [`sanitize`], [`shares`]
//!   (a fleet member's fraction of each limit).
//! * Sensors: [`sensor`] (Kafka's `Sensor`), [`rate`] (`Rate` over a `SampledStat`), its parts
//!   `sample_ring`, `windowed_sum`, `check_cache`, `limit_cache`, [`measurement`]
//!   (`Rate.windowSize`), [`throttle`] (`QuotaUtils.throttleTime`, mutation throttle),
//!   [`token_bucket`] (KIP-599's `TokenBucket`), [`fetch_answer`] (a proxy's answer to a
//!   recorded Fetch response).
//! * Topic quotas (KIP-1010): [`topic_quotas`] (configuration, sensors, bounds), [`topic_rate`]
//!   (the sampled `Rate` striped over threads).
//! * Leaves: [`types`], [`error`], [`clock`], [`name_budget`], [`idle`], [`keys`],
//!   [`record_mode`].

pub mod callback;
pub mod client_ids;
mod check_cache;
pub mod clock;
pub mod configure;
pub mod connection_limits;
pub mod connection_metrics;
pub mod connection_quotas;
pub mod connection_rate;
pub mod entity;
pub mod error;
pub mod expiry;
pub mod fetch_answer;
pub mod handle;
pub mod idle;
pub mod ip_address;
pub mod kernel;
pub mod keys;
mod limit_cache;
pub mod limits;
pub mod measurement;
pub mod metrics;
pub mod mutation_quota;
pub mod name_budget;
pub mod precedence;
pub mod rate;
pub mod record;
pub mod record_mode;
pub mod registry;
pub mod request_quota;
pub mod resolution;
pub mod response;
mod ring_state;
mod sample_ring;
pub mod sanitize;
pub mod sensor;
pub mod settings;
pub mod shadow;
mod shadow_queue;
pub mod shares;
pub mod snapshot;
pub mod tag_cache;
pub mod throttle;
pub mod throttle_time_avg;
pub mod token_bucket;
pub mod topic_config;
pub mod topic_quotas;
pub mod topic_rate;
mod topic_stripes;
pub mod type_runtime;
pub mod types;
pub mod utilization;
pub mod validate;
mod windowed_sum;

pub use callback::{QuotaCallbackHook, ENCODED_TAGS_PREFIX, FAILED_TAGS, INTERNAL_TAG_PREFIX};
pub use clock::MAX_ABS_NOW_MS;
pub use connection_limits::{ConnectionLimits, ListenerLimits};
pub use connection_metrics::{ConnectionSnapshot, IpRow, ListenerRow};
pub use connection_quotas::{Admission, ConnectionQuotas};
pub use connection_rate::{IpRateConfig, CONNECTION_CREATION_RATE};
pub use entity::{EntityName, QuotaEntity};
pub use error::QuotaError;
pub use expiry::{ExpiryReport, ExpiryTask};
pub use fetch_answer::{fetch_answer, FetchAnswer, FetchAnswerRule, EMPTY_ANSWER_MAX_SHARE};
pub use handle::{ClientHandle, ShadowStep};
pub use kernel::QuotaKernel;
pub use measurement::Measurement;
pub use metrics::{MetricsSnapshot, SensorRow, TypeRow};
pub use precedence::QuotaLevel;
pub use name_budget::{check_name, check_names, MAX_NAME_BYTES};
pub use rate::RateSensor;
pub use response::{combine_throttles, combine_with_topics, FetchStep, ResponseThrottle};
pub use sensor::QuotaSensor;
pub use settings::{KernelConfig, BROKER_DEFAULTS, DEFAULT_MAX_SENSORS, DEFAULT_SENSOR_EXPIRY_MS};
pub use shadow::{ShadowHandle, ShadowKernel, ShadowRow};
pub use shares::{ShareMap, TopicShareMap};
pub use snapshot::{ConfigSnapshot, QuotaChange};
pub use throttle::{mutation_throttle_time_ms, throttle_time_ms, time_at_bound_ms};
pub use token_bucket::{StrictTake, TokenBucket};
pub use topic_config::{is_legal_topic_name, MAX_TOPIC_NAME_LENGTH};
pub use topic_quotas::{TopicQuotas, TopicRow, MAX_TOPIC_SENSORS, TOPIC_OVERFLOW};
pub use topic_rate::StripedRate;
pub use types::{ClientQuotaType, WindowSpec};
pub use utilization::{utilization_percent, UtilizationRest, UtilizationRow, UtilizationSnapshot};
pub use validate::{
    check_mutations, check_nanos, check_record_value, thread_time_percent, validate_changes, NANOS_TO_PERCENT,
};
