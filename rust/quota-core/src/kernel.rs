//! The quota kernel: its state and constructor. What it does lives beside it, one concept per
//! file: `configure` (alter, publish, callbacks), `resolution` (names to sensors), `limits`,
//! `record` (the per-request path), `request_quota` (KIP-124), `mutation_quota` (KIP-599),
//! `expiry` and `metrics`.
//!
//! Reads never lock. Configuration is an immutable snapshot behind an `ArcSwap`; each quota type
//! publishes two generation counters beside it. A cache entry (raw principal, client-id) ->
//! sensor is valid while its tags generation is current; a sensor's cached limit is valid while
//! its limits generation is current. A configuration change therefore costs one snapshot swap
//! and two counter bumps whatever the number of live sensors; stale entries are re-resolved by
//! the next request that touches them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;

use crate::callback::CallbackSlot;
use crate::clock::{monotonic_ms, ClockAnchor};
use crate::connection_quotas::ConnectionQuotas;
use crate::error::QuotaError;
use crate::name_budget::ByteBudget;
use crate::rate::RateSensor;
use crate::sensor::QuotaSensor;
use crate::settings::KernelConfig;
use crate::shares::FleetShares;
use crate::snapshot::ConfigSnapshot;
use crate::throttle_time_avg::{EntityThrottleTimes, ThrottleAvg};
use crate::topic_quotas::{TopicQuotas, MAX_TOPIC_SENSORS};
use crate::type_runtime::TypeRuntime;
use crate::types::{ClientQuotaType, WindowSpec};

// Kept at its old path for the binding.
pub use crate::clock::MAX_ABS_NOW_MS;

#[repr(align(64))]
pub struct QuotaKernel {
    pub(crate) settings: KernelConfig,
    pub(crate) config: ArcSwap<ConfigSnapshot>,
    /// Serializes configuration changes (readers never take it).
    pub(crate) writer: Mutex<()>,
    pub(crate) types: [TypeRuntime; 4],
    /// `ClientRequestQuotaManager.maxThrottleTimeMs`: one window.
    pub(crate) max_request_throttle_ms: i32,
    /// The shared `exempt-request-time` sensor, created by its first record.
    pub(crate) exempt: OnceLock<RateSensor>,
    /// A custom quota callback (KIP-257) deciding tags and limits, if one is installed.
    pub(crate) hook: ArcSwapOption<CallbackSlot>,
    /// Bytes of names held, bounded (see `name_budget`).
    pub(crate) names: ByteBudget,
    /// Set by [`close`](QuotaKernel::close): nothing is recorded or configured after it.
    pub(crate) closed: AtomicBool,
    /// Kafka's `throttle-time` Avg over every entity of a quota type.
    pub(crate) throttle_time: [OnceLock<ThrottleAvg>; 4],
    /// Kafka's per-entity `throttle-time` Avg (tags `user`, `client-id`), per quota type.
    pub(crate) entity_throttle_time: [EntityThrottleTimes; 4],
    /// Where the callers' clock is believed to be (for expiry and metrics without a `now_ms`).
    clock: ClockAnchor,
    /// The connection quotas (KIP-612): a concept of their own beside the client quotas, kept
    /// here so that every embedder of the kernel (the proxy's data plane, the binding) shares
    /// one set.
    pub connections: ConnectionQuotas,
    /// This kernel's fraction of each limit when it is one proxy of a fleet (see `shares`).
    pub(crate) shares: FleetShares,
    /// Topic quotas (KIP-1010), beside the client quotas: every embedder shares one set.
    pub topics: TopicQuotas,
}

impl QuotaKernel {
    pub fn new(settings: KernelConfig) -> Result<Self, QuotaError> {
        settings.validate()?;
        let snapshot =
            ConfigSnapshot::with_static_defaults(settings.producer_default, settings.consumer_default);
        let types = std::array::from_fn(|i| TypeRuntime::new(&snapshot.types[i]));
        Ok(QuotaKernel {
            settings,
            config: ArcSwap::from_pointee(snapshot),
            writer: Mutex::new(()),
            types,
            max_request_throttle_ms: settings.window.window_ms as i32,
            exempt: OnceLock::new(),
            hook: ArcSwapOption::empty(),
            names: ByteBudget::new(settings.max_name_bytes),
            closed: AtomicBool::new(false),
            throttle_time: Default::default(),
            entity_throttle_time: std::array::from_fn(|_| EntityThrottleTimes::new()),
            clock: ClockAnchor::new(),
            connections: ConnectionQuotas::new(
                settings.window,
                settings.metrics_window,
                settings.sensor_expiry_ms,
                settings.max_sensors,
            ),
            shares: FleetShares::default(),
            topics: TopicQuotas::with_cap(settings.max_sensors.min(MAX_TOPIC_SENSORS)),
        })
    }

    pub fn settings(&self) -> &KernelConfig {
        &self.settings
    }

    pub fn window(&self) -> &WindowSpec {
        &self.settings.window
    }

    /// A fresh sensor for tags `(user, client_id)` of type `t`: a `Rate` over the type's window,
    /// plus the token bucket for controller mutations.
    pub(crate) fn new_sensor(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        now: i64,
    ) -> QuotaSensor {
        let rate = if t == ClientQuotaType::ControllerMutation {
            RateSensor::with_token_bucket(&self.settings.metrics_window, now)
        } else {
            RateSensor::new(&self.settings.window, now)
        };
        QuotaSensor::new(user, client_id, rate, now, monotonic_ms())
    }

    /// The window a type's sensors measure their `Rate` over: the quota window, except for
    /// controller mutations, whose `mutation-rate` has no quota and uses the broker's metrics
    /// window like Kafka's.
    pub fn rate_spec(&self, t: ClientQuotaType) -> &WindowSpec {
        if t == ClientQuotaType::ControllerMutation {
            &self.settings.metrics_window
        } else {
            &self.settings.window
        }
    }

    /// The current configuration snapshot.
    pub fn snapshot(&self) -> Arc<ConfigSnapshot> {
        self.config.load_full()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn check_open(&self) -> Result<(), QuotaError> {
        if self.is_closed() {
            return Err(QuotaError::Closed);
        }
        Ok(())
    }

    /// Whether any quota of type `t` (or a callback) exists: Kafka's `quotasEnabled`.
    #[inline]
    pub(crate) fn enabled(&self, t: ClientQuotaType) -> bool {
        self.types[t.index()].kinds.load(Ordering::Acquire) != 0
    }

    /// Bytes of names held now (sensor tags and metric-tag cache keys).
    pub fn name_bytes_held(&self) -> usize {
        self.names.held()
    }

    /// The budget for the bytes of names held.
    pub fn max_name_bytes(&self) -> usize {
        self.names.limit()
    }

    /// How often a new sensor or cache entry did not fit the name budget.
    pub fn name_bytes_refused(&self) -> u64 {
        self.names.refused()
    }

    /// Number of live sensors of a type.
    pub fn sensor_count(&self, t: ClientQuotaType) -> usize {
        self.types[t.index()].sensors.len()
    }

    /// Sensors resolutions were sent to the overflow sensor because the type was at its cap.
    pub fn overflowed_resolutions(&self, t: ClientQuotaType) -> u64 {
        self.types[t.index()].sensors.overflowed()
    }

    /// `(principals holding client ids, client ids held, resolutions sent to a principal's
    /// overflow client id)` of a type (see `client_ids`).
    pub fn client_ids(&self, t: ClientQuotaType) -> (usize, usize, u64) {
        let ids = &self.types[t.index()].client_ids;
        (ids.principals(), ids.entries(), ids.overflowed())
    }

    /// Sensors of the type removed by expiry since start.
    pub fn expired_sensors(&self, t: ClientQuotaType) -> u64 {
        self.types[t.index()].sensors.expired()
    }

    /// The configured cap on live sensors per quota type.
    pub fn max_sensors(&self) -> usize {
        self.settings.max_sensors
    }

    /// The configured expiry time of idle sensors, in ms.
    pub fn sensor_expiry_ms(&self) -> i64 {
        self.settings.sensor_expiry_ms
    }

    /// The kernel's estimate of "now" on the clock callers record with: the newest time any
    /// sensor has seen, advanced by the time elapsed on the kernel's own clock since that time
    /// was first observed (see `clock::ClockAnchor`). Without any sensor it is the kernel's own
    /// clock.
    pub fn estimated_now_ms(&self) -> i64 {
        let mono = monotonic_ms();
        let newest = self.types.iter().filter_map(|rt| rt.sensors.newest_seen()).max();
        self.clock.estimate(newest, mono)
    }
}
