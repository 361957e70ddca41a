//! The quota kernel: configuration snapshots, the metric-tag cache and the record path.
//!
//! Reads never lock. Configuration is an immutable snapshot behind an `ArcSwap`; each quota type
//! publishes two generation counters beside it. A cache entry (raw principal, client-id) ->
//! sensor is valid while its tags generation is current; a sensor's cached limit is valid while
//! its limits generation is current. A configuration change therefore costs one snapshot swap
//! and two counter bumps whatever the number of live sensors; stale entries are re-resolved by
//! the next request that touches them.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::clock::monotonic_ms;
use crate::config::{
    validate_value, QuotaEntity, TypeConfig, CLIENT_ID_QUOTAS, USER_CLIENT_ID_QUOTAS, USER_QUOTAS,
};
use crate::error::QuotaError;
use crate::keys::{shared_str, NamePair, PairRef, QuotaSensor, SensorEntry};
use crate::sanitize::needs_escaping;
use crate::sensor::throttle_time_ms;
use crate::types::{ClientQuotaType, WindowSpec};

type FastState = foldhash::fast::RandomState;

/// The metric tags when they follow from the kind bits alone and need no sanitizing.
#[inline]
fn direct_tags<'a>(kinds: u8, user: &'a str, client_id: &'a str) -> Option<(&'a str, &'a str)> {
    match kinds {
        0 | CLIENT_ID_QUOTAS => Some(("", client_id)),
        USER_QUOTAS if !needs_escaping(user) => Some((user, "")),
        USER_CLIENT_ID_QUOTAS if !needs_escaping(user) => Some((user, client_id)),
        _ => None,
    }
}

/// A resolved (principal, client-id): the sensor its tags select, stamped with the tags
/// generation it was resolved under.
#[derive(Clone)]
pub struct Resolved {
    pub(crate) tags_generation: u64,
    pub(crate) sensor: Arc<QuotaSensor>,
}

/// Everything configured, as one immutable value.
#[derive(Clone)]
pub struct ConfigSnapshot {
    pub types: [TypeConfig; 4],
    /// Entities with at least one key, for `describe`: values indexed by `ClientQuotaType`.
    pub entities: std::collections::BTreeMap<QuotaEntity, [Option<f64>; 4]>,
}

// Whole cache lines: sensor writes elsewhere on the heap never share a line with these
// read-on-every-request counters.
#[repr(align(64))]
pub(crate) struct TypeRuntime {
    /// The type's kind bits (`CLIENT_ID_QUOTAS` ...); 0 = no quota of this type yet.
    kinds: AtomicU8,
    pub(crate) tags_generation: AtomicU64,
    limits_generation: AtomicU64,
    pub(crate) sensors: papaya::HashMap<SensorEntry, (), FastState>,
    pub(crate) cache: papaya::HashMap<NamePair, Resolved, FastState>,
}

impl TypeRuntime {
    fn new(cfg: &TypeConfig) -> Self {
        TypeRuntime {
            kinds: AtomicU8::new(cfg.kinds),
            tags_generation: AtomicU64::new(cfg.tags_generation),
            limits_generation: AtomicU64::new(cfg.limits_generation),
            sensors: papaya::HashMap::with_hasher(FastState::default()),
            cache: papaya::HashMap::with_hasher(FastState::default()),
        }
    }
}

/// Constructor settings of a [`QuotaKernel`].
#[derive(Debug, Clone, Copy)]
pub struct KernelConfig {
    pub window: WindowSpec,
    pub num_io_threads: u32,
    pub num_network_threads: u32,
    pub producer_default: Option<f64>,
    pub consumer_default: Option<f64>,
    /// Sensors unused for more than this are removed by [`QuotaKernel::expire_sensors`].
    pub sensor_expiry_ms: i64,
    /// Cap on live sensors per quota type; at the cap new tags share an overflow sensor.
    pub max_sensors: usize,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            window: WindowSpec::default(),
            num_io_threads: 8,
            num_network_threads: 3,
            producer_default: None,
            consumer_default: None,
            sensor_expiry_ms: crate::expiry::DEFAULT_SENSOR_EXPIRY_MS,
            max_sensors: crate::expiry::DEFAULT_MAX_SENSORS,
        }
    }
}

/// One requested configuration change: set (`Some`) or remove (`None`) one key of one entity.
#[derive(Debug, Clone)]
pub struct QuotaChange {
    pub entity: QuotaEntity,
    pub quota_type: ClientQuotaType,
    pub value: Option<f64>,
}

#[repr(align(64))]
pub struct QuotaKernel {
    settings: KernelConfig,
    config: ArcSwap<ConfigSnapshot>,
    writer: Mutex<()>,
    pub(crate) types: [TypeRuntime; 4],
    pub(crate) lifecycle: crate::expiry::Lifecycle,
}

/// What a record call should do after adding the value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    Throttle,
    None,
}

pub(crate) fn check_record_value(value: f64) -> Result<(), QuotaError> {
    if value.is_nan() || value.is_infinite() || value < 0.0 {
        return Err(QuotaError::InvalidValue(format!(
            "recorded value must be a finite number >= 0, got {value} (use unrecord to take a value back)"
        )));
    }
    Ok(())
}

/// Times are exact within 2^46 ms (about 2,200 years) of 0; anything further is refused
/// rather than silently clamped.
pub const MAX_ABS_NOW_MS: i64 = 1 << 46;

#[inline]
pub(crate) fn resolve_now(now: Option<i64>) -> Result<i64, QuotaError> {
    match now {
        None => Ok(monotonic_ms()),
        Some(t) if t.unsigned_abs() < MAX_ABS_NOW_MS as u64 => Ok(t),
        Some(t) => Err(QuotaError::InvalidValue(format!(
            "now_ms must be within ±2^46 ms of 0 (integer milliseconds on a monotonic clock), got {t}"
        ))),
    }
}

pub(crate) fn check_byte_type(t: ClientQuotaType) -> Result<(), QuotaError> {
    match t {
        ClientQuotaType::Produce | ClientQuotaType::Fetch => Ok(()),
        other => Err(QuotaError::Unsupported(format!(
            "{} quotas are not yet supported by this kquota release",
            other.name()
        ))),
    }
}

impl QuotaKernel {
    pub fn new(settings: KernelConfig) -> Result<Self, QuotaError> {
        let capacity = settings.capacity_percent();
        for (t, v) in [
            (ClientQuotaType::Produce, settings.producer_default),
            (ClientQuotaType::Fetch, settings.consumer_default),
        ] {
            if let Some(v) = v {
                let broker = QuotaEntity {
                    user: None,
                    client_id: None,
                };
                validate_value(&broker, t, v, capacity).map_err(|_| {
                    QuotaError::InvalidArgument(format!(
                        "{} must be a whole number of bytes per second > 0, got {v}",
                        if t == ClientQuotaType::Produce {
                            "producer_default"
                        } else {
                            "consumer_default"
                        }
                    ))
                })?;
            }
        }
        if settings.num_io_threads == 0 || settings.num_network_threads == 0 {
            return Err(QuotaError::InvalidArgument(
                "num_io_threads and num_network_threads must be >= 1".into(),
            ));
        }
        crate::expiry::validate(settings.max_sensors, settings.sensor_expiry_ms)?;
        let types = [
            TypeConfig::with_static_default(settings.producer_default),
            TypeConfig::with_static_default(settings.consumer_default),
            TypeConfig::with_static_default(None),
            TypeConfig::with_static_default(None),
        ];
        let runtimes = [
            TypeRuntime::new(&types[0]),
            TypeRuntime::new(&types[1]),
            TypeRuntime::new(&types[2]),
            TypeRuntime::new(&types[3]),
        ];
        Ok(QuotaKernel {
            settings,
            config: ArcSwap::from_pointee(ConfigSnapshot {
                types,
                entities: Default::default(),
            }),
            writer: Mutex::new(()),
            types: runtimes,
            lifecycle: crate::expiry::Lifecycle::new(settings.max_sensors, settings.sensor_expiry_ms),
        })
    }

    pub fn settings(&self) -> &KernelConfig {
        &self.settings
    }

    pub fn window(&self) -> &WindowSpec {
        &self.settings.window
    }

    /// The current configuration snapshot.
    pub fn snapshot(&self) -> Arc<ConfigSnapshot> {
        self.config.load_full()
    }

    // ---------------------------------------------------------------- configuration

    /// Validates every change, then applies them all in one step; on any error nothing changes.
    pub fn alter(&self, changes: &[QuotaChange], validate_only: bool) -> Result<(), QuotaError> {
        let capacity = self.settings.capacity_percent();
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
                validate_value(&ch.entity, ch.quota_type, v, capacity)?;
            }
        }
        if validate_only || changes.is_empty() {
            return Ok(());
        }
        let _w = self.writer.lock();
        let old = self.config.load_full();
        let mut next = (*old).clone();
        let mut touched = [false; 4];
        let mut tags_changed = [false; 4];
        for ch in changes {
            let i = ch.quota_type.index();
            let cfg = &mut next.types[i];
            let before = cfg.get(&ch.entity);
            if before == ch.value {
                continue;
            }
            let kinds_before = cfg.kinds;
            let set_changed = cfg.set(&ch.entity, ch.value);
            touched[i] = true;
            // Tags are fixed while one kind of level is configured; only the 8-level walk
            // (several kinds) depends on which entities exist.
            let mixed = cfg.kinds.count_ones() > 1;
            tags_changed[i] |= cfg.kinds != kinds_before || (mixed && set_changed);
            let slot = next.entities.entry(ch.entity.clone()).or_insert([None; 4]);
            slot[i] = ch.value;
            if slot.iter().all(Option::is_none) {
                next.entities.remove(&ch.entity);
            }
        }
        for i in 0..4 {
            if touched[i] {
                next.types[i].limits_generation += 1;
                if tags_changed[i] {
                    next.types[i].tags_generation += 1;
                }
            }
        }
        let next = Arc::new(next);
        self.config.store(Arc::clone(&next));
        // Publish the generations after the snapshot: a reader that sees a new generation is
        // guaranteed to load a snapshot at least that new.
        for i in 0..4 {
            let rt = &self.types[i];
            let cfg = &next.types[i];
            rt.kinds.store(cfg.kinds, Ordering::Release);
            rt.tags_generation.store(cfg.tags_generation, Ordering::Release);
            rt.limits_generation
                .store(cfg.limits_generation, Ordering::Release);
        }
        Ok(())
    }

    /// Every configured entity with its keys.
    pub fn describe(&self) -> Vec<(QuotaEntity, Vec<(ClientQuotaType, f64)>)> {
        let snap = self.config.load();
        snap.entities
            .iter()
            .map(|(e, vals)| {
                let kv = ClientQuotaType::ALL
                    .iter()
                    .filter_map(|t| vals[t.index()].map(|v| (*t, v)))
                    .collect();
                (e.clone(), kv)
            })
            .collect()
    }

    /// Makes every resolution of type `t` stale (after sensors were removed) and drops the
    /// metric-tag cache entries that thereby became useless. Goes through the snapshot so the
    /// snapshot and the published counter never disagree.
    pub(crate) fn bump_tags_generation(&self, t: ClientQuotaType) {
        let i = t.index();
        {
            let _w = self.writer.lock();
            let mut next = (*self.config.load_full()).clone();
            next.types[i].tags_generation += 1;
            let generation = next.types[i].tags_generation;
            self.config.store(Arc::new(next));
            self.types[i].tags_generation.store(generation, Ordering::Release);
        }
        let generation = self.types[i].tags_generation.load(Ordering::Acquire);
        self.types[i]
            .cache
            .pin()
            .retain(|_, r| r.tags_generation == generation);
    }

    // ---------------------------------------------------------------- resolution

    #[cold]
    pub(crate) fn resolve(&self, t: ClientQuotaType, user: &str, client_id: &str, now: i64) -> Resolved {
        let rt = &self.types[t.index()];
        let snap = self.config.load();
        let cfg = &snap.types[t.index()];
        let tags = cfg.metric_tags(user, client_id);
        let sensor = self.register_sensor(t, &rt.sensors, &tags.user, &tags.client_id, now);
        let resolved = Resolved {
            tags_generation: cfg.tags_generation,
            sensor,
        };
        // The cache is bounded like the registry (a flood of names must not grow it).
        if direct_tags(cfg.kinds, user, client_id).is_none() && rt.cache.len() < self.lifecycle.max_sensors {
            let raw = NamePair {
                first: shared_str(user),
                second: shared_str(client_id),
            };
            rt.cache.pin().insert(raw, resolved.clone());
        }
        resolved
    }

    /// The sensor for (principal, client-id) from the metric-tag cache while its entry is
    /// current, else resolved afresh. (Fixed-tag lookups are done by the caller.)
    #[inline]
    fn cached_or_resolved(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        now: i64,
    ) -> Arc<QuotaSensor> {
        let rt = &self.types[t.index()];
        let generation = rt.tags_generation.load(Ordering::Acquire);
        if let Some(r) = rt.cache.pin().get(&PairRef(user, client_id)) {
            if r.tags_generation == generation {
                return Arc::clone(&r.sensor);
            }
        }
        self.resolve(t, user, client_id, now).sensor
    }

    /// The bound for a sensor, from its cache when current.
    #[inline]
    fn limit_of(&self, t: ClientQuotaType, sensor: &QuotaSensor) -> f64 {
        let generation = self.types[t.index()].limits_generation.load(Ordering::Acquire);
        match sensor.rate.cached_limit(generation) {
            Some(l) => l,
            None => self.refresh_limit(t, sensor),
        }
    }

    #[cold]
    fn refresh_limit(&self, t: ClientQuotaType, sensor: &QuotaSensor) -> f64 {
        let snap = self.config.load();
        let cfg = &snap.types[t.index()];
        let limit = cfg
            .limit(sensor.tags.user(), sensor.tags.client_id())
            .unwrap_or(f64::INFINITY);
        sensor.rate.store_limit(limit, cfg.limits_generation);
        limit
    }

    #[inline]
    pub(crate) fn enabled(&self, t: ClientQuotaType) -> bool {
        self.types[t.index()].kinds.load(Ordering::Acquire) != 0
    }

    /// Records into a resolved sensor and applies the check.
    #[inline]
    pub(crate) fn record_into(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
        check: Check,
    ) -> i32 {
        let spec = &self.settings.window;
        if check == Check::None {
            sensor.rate.record(spec, value, now);
            return 0;
        }
        let m = sensor.rate.record_and_measure(spec, value, now);
        let bound = self.limit_of(t, sensor);
        if bound == f64::INFINITY {
            return 0;
        }
        throttle_time_ms(&m, bound)
    }

    fn record_named(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: Option<i64>,
        check: Check,
    ) -> Result<i32, QuotaError> {
        check_byte_type(t)?;
        let now = resolve_now(now)?;
        let rt = &self.types[t.index()];
        let kinds = rt.kinds.load(Ordering::Acquire);
        if kinds == 0 {
            return Ok(0);
        }
        // While tags are fixed by the kind bits and the user name needs no escaping, the tags
        // are the names themselves: search the registry directly, recording while its guard is
        // held (no reference-count traffic). Otherwise the metric-tag cache answers.
        let sensor = match direct_tags(kinds, user, client_id) {
            Some((tu, tc)) => {
                if let Some((s, ())) = rt.sensors.pin().get_key_value(&PairRef(tu, tc)) {
                    return Ok(self.record_into(t, &s.0, value, now, check));
                }
                self.resolve(t, user, client_id, now).sensor
            }
            None => self.cached_or_resolved(t, user, client_id, now),
        };
        Ok(self.record_into(t, &sensor, value, now, check))
    }

    // ---------------------------------------------------------------- per-request API

    /// Records `value` and returns the throttle in ms (0 = none).
    pub fn record_and_get_throttle_time_ms(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        check_record_value(value)?;
        self.record_named(t, user, client_id, value, now, Check::Throttle)
    }

    pub fn record_no_throttle(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        check_record_value(value)?;
        self.record_named(t, user, client_id, value, now, Check::None)
            .map(|_| ())
    }

    pub fn unrecord(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        check_record_value(value)?;
        self.record_named(t, user, client_id, -value, now, Check::None)
            .map(|_| ())
    }

    /// The metric tags `(user, client-id)` a request would be recorded under.
    pub fn quota_metric_tags(&self, t: ClientQuotaType, user: &str, client_id: &str) -> (String, String) {
        let snap = self.config.load();
        let tags = snap.types[t.index()].metric_tags(user, client_id);
        (tags.user.into_owned(), tags.client_id.into_owned())
    }

    /// The limit that applies, `None` for unlimited.
    pub fn quota_limit(&self, t: ClientQuotaType, user: &str, client_id: &str) -> Option<f64> {
        let snap = self.config.load();
        let cfg = &snap.types[t.index()];
        let tags = cfg.metric_tags(user, client_id);
        cfg.limit(&tags.user, &tags.client_id)
    }

    /// Kafka's `getMaxValueInQuotaWindow`; `f64::INFINITY` when unlimited.
    pub fn max_value_in_quota_window(&self, t: ClientQuotaType, user: &str, client_id: &str) -> f64 {
        match self.quota_limit(t, user, client_id) {
            Some(l) => l * self.settings.window.max_value_factor(),
            None => f64::INFINITY,
        }
    }

    /// The sensor's rate as Kafka's metric reports it at `now` (0.0 when there is no sensor).
    pub fn measured_rate(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        now: Option<i64>,
    ) -> Result<f64, QuotaError> {
        let now = resolve_now(now)?;
        if !self.enabled(t) {
            return Ok(0.0);
        }
        let rt = &self.types[t.index()];
        let snap = self.config.load();
        let tags = snap.types[t.index()].metric_tags(user, client_id);
        let sensors = rt.sensors.pin();
        Ok(
            match sensors.get_key_value(&PairRef(&tags.user, &tags.client_id)) {
                Some((s, ())) => s.0.rate.measure(&self.settings.window, now).rate(),
                None => 0.0,
            },
        )
    }

    // ---------------------------------------------------------------- for caching callers

    /// The sensor (principal, client-id) resolves to now, with the tags generation it stays
    /// valid for; `None` while no quota of the type exists. For bindings that keep their own
    /// cache of resolutions (see [`is_current`](Self::is_current)).
    pub fn resolution(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        now: Option<i64>,
    ) -> Result<Option<(u64, Arc<QuotaSensor>)>, QuotaError> {
        check_byte_type(t)?;
        let now = resolve_now(now)?;
        if !self.enabled(t) {
            return Ok(None);
        }
        let r = self.resolve(t, user, client_id, now);
        Ok(Some((r.tags_generation, r.sensor)))
    }

    /// Whether a resolution made under `generation` still holds.
    #[inline]
    pub fn is_current(&self, t: ClientQuotaType, generation: u64) -> bool {
        self.types[t.index()].tags_generation.load(Ordering::Acquire) == generation
    }

    /// `record_and_get_throttle_time_ms` into an already resolved, current sensor.
    #[inline]
    pub fn record_resolved(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        check_record_value(value)?;
        check_byte_type(t)?;
        let now = resolve_now(now)?;
        Ok(self.record_into(t, sensor, value, now, Check::Throttle))
    }

    /// Number of live sensors of a type.
    pub fn sensor_count(&self, t: ClientQuotaType) -> usize {
        self.types[t.index()].sensors.len()
    }
}

impl KernelConfig {
    /// `(num_io_threads + num_network_threads) * 100`: the most `request_percentage` can be.
    pub fn capacity_percent(&self) -> f64 {
        (self.num_io_threads as f64 + self.num_network_threads as f64) * 100.0
    }
}
