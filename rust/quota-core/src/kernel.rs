//! The quota kernel: configuration snapshots, the metric-tag cache and the record path.
//!
//! Reads never lock. Configuration is an immutable snapshot behind an `ArcSwap`; each quota type
//! publishes two generation counters beside it. A cache entry (raw principal, client-id) ->
//! sensor is valid while its tags generation is current; a sensor's cached limit is valid while
//! its limits generation is current. A configuration change therefore costs one snapshot swap
//! and two counter bumps whatever the number of live sensors; stale entries are re-resolved by
//! the next request that touches them.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use std::borrow::Cow;
use std::sync::atomic::AtomicBool;

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;

use crate::callback::{CallbackSlot, QuotaCallbackHook, FAILED_TAGS};
use crate::clock::resolve_now;
use crate::entity::QuotaEntity;
use crate::precedence::{direct_tags, TypeConfig};
use crate::validate::{check_mutations, check_record_value, check_unrecord_value, thread_time_percent, validate_value};
use crate::error::QuotaError;
use crate::keys::{shared_str, NamePair, PairRef, SensorEntry};
use crate::sensor::QuotaSensor;
use crate::rate::RateSensor;
use crate::throttle::{mutation_throttle_time_ms, throttle_time_ms};
use crate::token_bucket::StrictTake;
use crate::types::{ClientQuotaType, WindowSpec};

type FastState = foldhash::fast::RandomState;

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
    /// Whether the installed callback wants `quota_reset_required` polled on every record (here,
    /// beside `kinds`, so the record path reads no extra cache line).
    poll_reset: AtomicBool,
    pub(crate) tags_generation: AtomicU64,
    limits_generation: AtomicU64,
    pub(crate) sensors: papaya::HashMap<SensorEntry, (), FastState>,
    pub(crate) cache: papaya::HashMap<NamePair, Resolved, FastState>,
}

impl TypeRuntime {
    fn new(cfg: &TypeConfig) -> Self {
        TypeRuntime {
            kinds: AtomicU8::new(cfg.kinds),
            poll_reset: AtomicBool::new(false),
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
    /// The broker's `metrics.num.samples` / `metrics.sample.window.ms`: Kafka measures the
    /// quota-less rates `mutation-rate` and `exempt-request-time` over this window, not the quota
    /// window (their sensors are added without a quota `MetricConfig`).
    pub metrics_window: WindowSpec,
    /// `controller.quota.window.num` / `controller.quota.window.size.seconds`: the quota window of
    /// controller mutations (Kafka configures it apart from `quota.window.*`); it sizes the
    /// token bucket's burst.
    pub controller_window: WindowSpec,
    /// Sensors unused for more than this are removed by [`QuotaKernel::expire_sensors`].
    pub sensor_expiry_ms: i64,
    /// Cap on live sensors per quota type; at the cap new tags share an overflow sensor.
    pub max_sensors: usize,
    /// Budget for the bytes of names held (sensor tags and metric-tag cache keys, all types);
    /// past it new tags share an overflow sensor, as at `max_sensors` (see `budget`).
    pub max_name_bytes: usize,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            window: WindowSpec::default(),
            num_io_threads: 8,
            num_network_threads: 3,
            producer_default: None,
            consumer_default: None,
            metrics_window: WindowSpec::BROKER_METRICS,
            controller_window: WindowSpec::default(),
            sensor_expiry_ms: crate::expiry::DEFAULT_SENSOR_EXPIRY_MS,
            max_sensors: crate::expiry::DEFAULT_MAX_SENSORS,
            max_name_bytes: crate::budget::DEFAULT_MAX_NAME_BYTES_HELD,
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

pub use crate::clock::MAX_ABS_NOW_MS;

#[repr(align(64))]
pub struct QuotaKernel {
    settings: KernelConfig,
    config: ArcSwap<ConfigSnapshot>,
    writer: Mutex<()>,
    pub(crate) types: [TypeRuntime; 4],
    /// `ClientRequestQuotaManager.maxThrottleTimeMs`: one window.
    max_request_throttle_ms: i32,
    /// The shared `exempt-request-time` sensor, created by its first record.
    exempt: OnceLock<RateSensor>,
    /// A custom quota callback (KIP-257) deciding tags and limits, if one is installed.
    hook: ArcSwapOption<CallbackSlot>,
    /// Bytes of names held, bounded (see `budget`).
    names: crate::budget::ByteBudget,
    /// Set by [`close`](QuotaKernel::close): nothing is recorded or configured after it.
    closed: AtomicBool,
    pub(crate) lifecycle: crate::expiry::Lifecycle,
}

/// Kind bit set on every type while a custom callback is installed (Kafka's `CustomQuotas`):
/// quotas are then always enabled and tags always come from the callback, through the cache.
pub(crate) const CUSTOM_QUOTAS: u8 = 8;

/// Kind bit set on every type once the kernel is closed: the record paths then leave their fast
/// paths (the tags generation is bumped too) and meet the closed check in `resolve`, so the
/// cached path pays nothing for it.
pub(crate) const CLOSED: u8 = 16;

/// What a record call should do about the quota.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Record, then return the throttle. For controller mutations this is Kafka's
    /// `ControllerMutationQuotaManager.recordAndGetThrottleTimeMs`: check the bucket first and
    /// record only if it is not in debt, returning the throttle either way.
    Throttle,
    /// Record without any check.
    None,
    /// Controller mutations, permissive: record, then return the throttle if the bucket is now
    /// in debt.
    Permissive,
    /// Controller mutations, strict: if the bucket is already in debt record nothing and fail
    /// with `ThrottlingQuotaExceeded`; otherwise record.
    Strict,
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
            max_request_throttle_ms: settings.window.window_ms as i32,
            exempt: OnceLock::new(),
            hook: ArcSwapOption::empty(),
            names: crate::budget::ByteBudget::new(settings.max_name_bytes),
            closed: AtomicBool::new(false),
            lifecycle: crate::expiry::Lifecycle::new(settings.max_sensors, settings.sensor_expiry_ms),
        })
    }

    pub fn settings(&self) -> &KernelConfig {
        &self.settings
    }

    pub fn window(&self) -> &WindowSpec {
        &self.settings.window
    }

    /// A fresh sensor's stats for type `t`: a `Rate` over the type's window, plus the token bucket
    /// for controller mutations.
    pub(crate) fn new_rate_sensor(&self, t: ClientQuotaType, now: i64) -> RateSensor {
        if t == ClientQuotaType::ControllerMutation {
            RateSensor::with_token_bucket(&self.settings.metrics_window, now)
        } else {
            RateSensor::new(&self.settings.window, now)
        }
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

    // ---------------------------------------------------------------- configuration

    /// Validates every change, then applies them all in one step; on any error nothing changes.
    pub fn alter(&self, changes: &[QuotaChange], validate_only: bool) -> Result<(), QuotaError> {
        self.check_open()?;
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
        self.check_open()?;
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
        self.publish(next);
        Ok(())
    }

    /// Stores `next` and then publishes its kind bits and generations (writer lock held). The
    /// generations go out after the snapshot: a reader that sees a new generation is guaranteed
    /// to load a snapshot at least that new.
    fn publish(&self, next: ConfigSnapshot) {
        let next = Arc::new(next);
        self.config.store(Arc::clone(&next));
        let custom = self.custom_bit() | if self.is_closed() { CLOSED } else { 0 };
        for (rt, cfg) in self.types.iter().zip(next.types.iter()) {
            rt.kinds.store(cfg.kinds | custom, Ordering::Release);
            rt.tags_generation.store(cfg.tags_generation, Ordering::Release);
            rt.limits_generation
                .store(cfg.limits_generation, Ordering::Release);
        }
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
        {
            let _w = self.writer.lock();
            self.bump_locked(&[t], true, false);
        }
        let rt = &self.types[t.index()];
        let generation = rt.tags_generation.load(Ordering::Acquire);
        rt.cache.pin().retain(|k, r| {
            let keep = r.tags_generation == generation;
            if !keep {
                self.names.release(k.first.len() + k.second.len());
            }
            keep
        });
    }

    // ---------------------------------------------------------------- lifecycle

    /// Closes the kernel: every later record, resolution and configuration change fails with
    /// [`QuotaError::Closed`]. Idempotent.
    pub fn close(&self) {
        let _w = self.writer.lock();
        self.closed.store(true, Ordering::Release);
        // Publishing sets the CLOSED kind bit; the generation bump sends every cached
        // resolution (handles, binding caches) back through `resolve`, which refuses.
        self.bump_locked(&ClientQuotaType::ALL, true, true);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    #[inline]
    fn check_open(&self) -> Result<(), QuotaError> {
        if self.is_closed() {
            return Err(QuotaError::Closed);
        }
        Ok(())
    }

    pub(crate) fn names_budget(&self) -> &crate::budget::ByteBudget {
        &self.names
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

    // ---------------------------------------------------------------- resolution

    /// Resolves (principal, client-id) to its sensor. A resolution stamped with generation 0
    /// (a failed callback) is never current: holders use it for this request only.
    #[cold]
    pub(crate) fn resolve(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        now: i64,
    ) -> Result<Resolved, QuotaError> {
        self.check_open()?;
        crate::budget::check_name("user", user)?;
        crate::budget::check_name("client_id", client_id)?;
        let rt = &self.types[t.index()];
        let snap = self.config.load();
        let cfg = &snap.types[t.index()];
        let hook = self.hook.load();
        let (tag_user, tag_client, generation): (Cow<'_, str>, Cow<'_, str>, u64) = match hook.as_deref() {
            None => {
                let tags = cfg.metric_tags(user, client_id);
                (tags.user, tags.client_id, cfg.tags_generation)
            }
            Some(h) => match h.0.metric_tags(t, user, client_id) {
                Some((u, c)) => (u.into(), c.into(), cfg.tags_generation),
                None => {
                    // The callback failed: keep its last good answer for this (principal,
                    // client-id) if there is one, else the shared failure sensor; ask again next time.
                    if let Some(r) = rt.cache.pin().get(&PairRef(user, client_id)) {
                        return Ok(Resolved {
                            tags_generation: 0,
                            sensor: Arc::clone(&r.sensor),
                        });
                    }
                    (FAILED_TAGS.0.into(), FAILED_TAGS.1.into(), 0)
                }
            },
        };
        let sensor = self.register_sensor(t, &rt.sensors, &tag_user, &tag_client, now);
        let resolved = Resolved {
            tags_generation: generation,
            sensor,
        };
        // The cache is bounded like the registry (a flood of names must not grow it).
        if generation != 0
            && (hook.is_some() || direct_tags(cfg.kinds, user, client_id).is_none())
            && rt.cache.len() < self.lifecycle.max_sensors
            && self.names.try_reserve(user.len() + client_id.len())
        {
            let raw = NamePair {
                first: shared_str(user),
                second: shared_str(client_id),
            };
            if rt.cache.pin().insert(raw, resolved.clone()).is_some() {
                // Replaced an entry with the same key: its bytes were counted already.
                self.names.release(user.len() + client_id.len());
            }
        }
        Ok(resolved)
    }

    /// [`resolve`](Self::resolve), answered from the metric-tag cache while its entry is current
    /// (so a callback is asked once per (type, principal, client-id), whichever path asks).
    #[inline]
    pub(crate) fn resolve_current(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        now: i64,
    ) -> Result<Resolved, QuotaError> {
        let rt = &self.types[t.index()];
        let generation = rt.tags_generation.load(Ordering::Acquire);
        if let Some(r) = rt.cache.pin().get(&PairRef(user, client_id)) {
            if r.tags_generation == generation {
                return Ok(r.clone());
            }
        }
        self.resolve(t, user, client_id, now)
    }

    /// The metric tags a request is recorded under now (callback-aware), without creating a
    /// sensor.
    fn tags_of(&self, t: ClientQuotaType, user: &str, client_id: &str) -> (String, String) {
        match self.hook.load().as_deref() {
            None => {
                let snap = self.config.load();
                let tags = snap.types[t.index()].metric_tags(user, client_id);
                (tags.user.into_owned(), tags.client_id.into_owned())
            }
            Some(h) => match h.0.metric_tags(t, user, client_id) {
                Some(tags) => tags,
                None => match self.types[t.index()].cache.pin().get(&PairRef(user, client_id)) {
                    Some(r) => (
                        r.sensor.tags.user().to_owned(),
                        r.sensor.tags.client_id().to_owned(),
                    ),
                    None => (FAILED_TAGS.0.to_owned(), FAILED_TAGS.1.to_owned()),
                },
            },
        }
    }

    /// The limit of a tag set now (callback-aware): `None` unlimited.
    fn limit_of_tags(&self, t: ClientQuotaType, tag_user: &str, tag_client: &str) -> Option<f64> {
        match self.hook.load().as_deref() {
            None => self.config.load().types[t.index()].limit(tag_user, tag_client),
            Some(h) if (tag_user, tag_client) == FAILED_TAGS => h.0.fallback_limit(),
            Some(h) => {
                h.0.limit(t, tag_user, tag_client)
                    .unwrap_or_else(|| h.0.fallback_limit())
            }
        }
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
        let (tag_user, tag_client) = (sensor.tags.user(), sensor.tags.client_id());
        let limit = match self.hook.load().as_deref() {
            None => cfg.limit(tag_user, tag_client),
            Some(h) if (tag_user, tag_client) == FAILED_TAGS => h.0.fallback_limit(),
            Some(h) => match h.0.limit(t, tag_user, tag_client) {
                Some(limit) => limit,
                // The callback failed: the last good limit of this sensor, else the fallback;
                // not cached, so the next request asks again.
                None => {
                    return sensor
                        .rate
                        .last_limit()
                        .unwrap_or_else(|| h.0.fallback_limit().unwrap_or(f64::INFINITY))
                }
            },
        };
        let limit = limit.unwrap_or(f64::INFINITY);
        sensor.rate.store_limit(limit, cfg.limits_generation);
        limit
    }

    // ---------------------------------------------------------------- custom callbacks (KIP-257)

    fn custom_bit(&self) -> u8 {
        if self.hook.load().is_some() {
            CUSTOM_QUOTAS
        } else {
            0
        }
    }

    /// Installs (or with `None` removes) a custom quota callback. Every cached tag and limit is
    /// dropped, so the next request of each connection asks the new callback.
    pub fn set_callback_hook(&self, hook: Option<Box<dyn QuotaCallbackHook>>) {
        let _w = self.writer.lock();
        let polls = hook.as_ref().is_some_and(|h| h.polls_reset());
        self.hook.store(hook.map(|h| Arc::new(CallbackSlot(h))));
        for rt in &self.types {
            rt.poll_reset.store(polls, Ordering::Release);
        }
        for rt in &self.types {
            rt.cache.pin().retain(|k, _| {
                self.names.release(k.first.len() + k.second.len());
                false
            });
        }
        self.bump_locked(&ClientQuotaType::ALL, true, true);
    }

    /// Whether a custom callback is installed.
    pub fn has_callback_hook(&self) -> bool {
        self.hook.load().is_some()
    }

    /// Forgets cached limits (and, with `tags`, cached tags) of the given types, so the next
    /// request asks again: after a quota update, a metadata change, or a callback's reset signal.
    pub fn invalidate(&self, types: &[ClientQuotaType], tags: bool) {
        let _w = self.writer.lock();
        self.bump_locked(types, tags, true);
    }

    /// Publishes a snapshot with the chosen generations of `types` bumped (writer lock held).
    fn bump_locked(&self, types: &[ClientQuotaType], tags: bool, limits: bool) {
        let mut next = (*self.config.load_full()).clone();
        for t in types {
            let cfg = &mut next.types[t.index()];
            if limits {
                cfg.limits_generation += 1;
            }
            if tags {
                cfg.tags_generation += 1;
            }
        }
        self.publish(next);
    }

    /// Kafka polls `quotaResetRequired` after resolving each request's sensors.
    #[cold]
    fn poll_reset_required(&self, t: ClientQuotaType) {
        let reset = match self.hook.load().as_deref() {
            Some(h) => h.0.reset_required(t),
            None => false,
        };
        if reset {
            self.invalidate(&[t], true);
        }
    }

    #[inline]
    pub(crate) fn enabled(&self, t: ClientQuotaType) -> bool {
        self.types[t.index()].kinds.load(Ordering::Acquire) != 0
    }

    /// Records into a resolved sensor and applies the check.
    // Kept small so it inlines into every per-request entry point: the byte-rate path stays
    // straight-line code, the other types branch out to `record_other`.
    #[inline(always)]
    pub(crate) fn record_into(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
        check: Check,
    ) -> Result<i32, QuotaError> {
        if self.types[t.index()].poll_reset.load(Ordering::Relaxed) {
            self.poll_reset_required(t);
        }
        if matches!(t, ClientQuotaType::Produce | ClientQuotaType::Fetch) {
            return Ok(self.record_rate(t, sensor, value, now, check));
        }
        self.record_other(t, sensor, value, now, check)
    }

    /// REQUEST and CONTROLLER_MUTATION records.
    #[inline(never)]
    fn record_other(
        &self,
        t: ClientQuotaType,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
        check: Check,
    ) -> Result<i32, QuotaError> {
        match t {
            ClientQuotaType::ControllerMutation => self.record_mutation(sensor, value, now, check),
            // ClientRequestQuotaManager.throttleTime: bounded by one window.
            _ => Ok(self
                .record_rate(t, sensor, value, now, check)
                .min(self.max_request_throttle_ms)),
        }
    }

    /// The sampled-rate path (PRODUCE, FETCH, REQUEST): record, then check.
    #[inline(always)]
    fn record_rate(
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
        if bound <= 0.0 {
            // A callback's limit of 0 blocks (Kafka would divide by zero and not throttle).
            return i32::MAX;
        }
        throttle_time_ms(&m, bound)
    }

    /// The controller-mutation path: the sensor's `Rate` (`mutation-rate`) records what was
    /// recorded, its token bucket (`tokens`) enforces the quota.
    fn record_mutation(
        &self,
        sensor: &QuotaSensor,
        value: f64,
        now: i64,
        check: Check,
    ) -> Result<i32, QuotaError> {
        let spec = &self.settings.metrics_window;
        let now = sensor.rate.clamp_time(now);
        let quota = self.limit_of(ClientQuotaType::ControllerMutation, sensor);
        let Some(bucket) = sensor.rate.token_bucket() else {
            sensor.rate.record(spec, value, now);
            return Ok(0);
        };
        if quota == f64::INFINITY {
            bucket.fill(now);
            sensor.rate.record(spec, value, now);
            return Ok(0);
        }
        if quota <= 0.0 {
            // A callback's limit of 0 blocks: no tokens ever.
            return match check {
                Check::None => {
                    sensor.rate.record(spec, value, now);
                    Ok(0)
                }
                Check::Permissive => {
                    sensor.rate.record(spec, value, now);
                    Ok(i32::MAX)
                }
                Check::Throttle => Ok(i32::MAX),
                Check::Strict => Err(QuotaError::ThrottlingQuotaExceeded {
                    throttle_time_ms: i32::MAX,
                }),
            };
        }
        let burst = self.burst(quota);
        let throttle = match check {
            Check::None => {
                bucket.record(quota, burst, value, now);
                0
            }
            Check::Permissive => mutation_throttle_time_ms(bucket.record(quota, burst, value, now), quota),
            Check::Throttle | Check::Strict => match bucket.take_strict(quota, burst, value, now) {
                StrictTake::Taken => 0,
                StrictTake::Rejected { tokens } => {
                    let throttle_time_ms = mutation_throttle_time_ms(tokens, quota);
                    if check == Check::Strict {
                        return Err(QuotaError::ThrottlingQuotaExceeded { throttle_time_ms });
                    }
                    return Ok(throttle_time_ms);
                }
            },
        };
        sensor.rate.record(spec, value, now);
        Ok(throttle)
    }

    /// A mutation sensor's tokens at `now` without touching the bucket (metrics); `None` for
    /// other sensors and without a finite quota.
    pub(crate) fn peek_tokens(&self, sensor: &QuotaSensor, limit: Option<f64>, now: i64) -> Option<f64> {
        let quota = limit.filter(|l| l.is_finite() && *l > 0.0)?;
        let bucket = sensor.rate.token_bucket()?;
        Some(bucket.peek(quota, self.burst(quota), now.max(sensor.rate.last_seen_ms())))
    }

    /// The `exempt-request-time` rate at `now` without touching the sensor (metrics).
    pub(crate) fn peek_exempt_rate(&self, now: i64) -> f64 {
        self.exempt
            .get()
            .map_or(0.0, |s| s.peek(&self.settings.metrics_window, now).rate())
    }

    /// `TokenBucket.burst`: `samples * window seconds * quota`.
    fn burst(&self, quota: f64) -> f64 {
        let spec = &self.settings.controller_window;
        spec.samples as f64 * (spec.window_ms as f64 / 1000.0) * quota
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
                    return self.record_into(t, &s.0, value, now, check);
                }
                self.resolve(t, user, client_id, now)?.sensor
            }
            None => self.resolve_current(t, user, client_id, now)?.sensor,
        };
        self.record_into(t, &sensor, value, now, check)
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
        check_unrecord_value(value)?;
        self.record_named(t, user, client_id, -value, now, Check::None)
            .map(|_| ())
    }

    // ---------------------------------------------------------------- request time (KIP-124)

    /// I/O-thread time of a request (`ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs`):
    /// records `nanos` as percent of a thread and returns the throttle, at most one window.
    pub fn record_request_time(
        &self,
        user: &str,
        client_id: &str,
        nanos: f64,
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        let percent = thread_time_percent(nanos)?;
        self.record_named(
            ClientQuotaType::Request,
            user,
            client_id,
            percent,
            now,
            Check::Throttle,
        )
    }

    /// Network-thread time of a request: recorded without a check, it weighs on later requests.
    pub fn record_network_thread_time(
        &self,
        user: &str,
        client_id: &str,
        nanos: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        let percent = thread_time_percent(nanos)?;
        self.record_named(
            ClientQuotaType::Request,
            user,
            client_id,
            percent,
            now,
            Check::None,
        )
        .map(|_| ())
    }

    /// Thread time of a request exempt from quotas, recorded into the one shared
    /// `exempt-request-time` sensor (only while request quotas are enabled, as in Kafka).
    pub fn record_exempt_request_time(&self, nanos: f64, now: Option<i64>) -> Result<(), QuotaError> {
        let percent = thread_time_percent(nanos)?;
        let now = resolve_now(now)?;
        self.check_open()?;
        if !self.enabled(ClientQuotaType::Request) {
            return Ok(());
        }
        let spec = &self.settings.metrics_window;
        // Kafka's Rate starts its first sample at the first record.
        self.exempt
            .get_or_init(|| RateSensor::new(spec, now))
            .record(spec, percent, now);
        Ok(())
    }

    /// The `exempt-request-time` rate (percent); 0.0 before any exempt time was recorded.
    pub fn exempt_request_rate(&self, now: Option<i64>) -> Result<f64, QuotaError> {
        let now = resolve_now(now)?;
        Ok(match self.exempt.get() {
            Some(s) => s.measure(&self.settings.metrics_window, now).rate(),
            None => 0.0,
        })
    }

    // ---------------------------------------------------------------- controller mutations (KIP-599)

    /// Records `mutations` against the (principal, client-id)'s token bucket. Permissive: record,
    /// then return the throttle if the bucket is in debt. Strict: if the bucket is already in
    /// debt, record nothing and fail with [`QuotaError::ThrottlingQuotaExceeded`]; else record
    /// (tokens may go negative) and return 0.
    pub fn record_controller_mutations(
        &self,
        user: &str,
        client_id: &str,
        mutations: f64,
        now: Option<i64>,
        strict: bool,
    ) -> Result<i32, QuotaError> {
        check_mutations(mutations)?;
        let check = if strict { Check::Strict } else { Check::Permissive };
        self.record_named(
            ClientQuotaType::ControllerMutation,
            user,
            client_id,
            mutations,
            now,
            check,
        )
    }

    /// The tokens left in the (principal, client-id)'s bucket at `now` (Kafka's `tokens` metric),
    /// `None` while there is no sensor or no quota.
    pub fn controller_mutation_tokens(
        &self,
        user: &str,
        client_id: &str,
        now: Option<i64>,
    ) -> Result<Option<f64>, QuotaError> {
        let now = resolve_now(now)?;
        let t = ClientQuotaType::ControllerMutation;
        if !self.enabled(t) {
            return Ok(None);
        }
        let (u, c) = self.tags_of(t, user, client_id);
        let sensors = self.types[t.index()].sensors.pin();
        let Some((s, ())) = sensors.get_key_value(&PairRef(&u, &c)) else {
            return Ok(None);
        };
        let quota = self.limit_of(t, &s.0);
        let now = s.0.rate.clamp_time(now);
        Ok(match s.0.rate.token_bucket() {
            Some(b) if quota == f64::INFINITY => {
                // Reading Kafka's `tokens` metric refills it like any use (see `fill`).
                b.fill(now);
                None
            }
            Some(b) => Some(b.measure(quota, self.burst(quota), now)),
            None => None,
        })
    }

    /// The metric tags `(user, client-id)` a request would be recorded under.
    pub fn quota_metric_tags(&self, t: ClientQuotaType, user: &str, client_id: &str) -> (String, String) {
        self.tags_of(t, user, client_id)
    }

    /// The limit that applies, `None` for unlimited.
    pub fn quota_limit(&self, t: ClientQuotaType, user: &str, client_id: &str) -> Option<f64> {
        let (u, c) = self.tags_of(t, user, client_id);
        self.limit_of_tags(t, &u, &c)
    }

    /// Kafka's `getMaxValueInQuotaWindow`; `f64::INFINITY` when unlimited.
    pub fn max_value_in_quota_window(&self, t: ClientQuotaType, user: &str, client_id: &str) -> f64 {
        match self.quota_limit(t, user, client_id) {
            Some(l) => {
                let spec = if t == ClientQuotaType::ControllerMutation {
                    &self.settings.controller_window
                } else {
                    &self.settings.window
                };
                l * spec.max_value_factor()
            }
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
        let (u, c) = self.tags_of(t, user, client_id);
        let sensors = rt.sensors.pin();
        Ok(match sensors.get_key_value(&PairRef(&u, &c)) {
            Some((s, ())) => s.0.rate.measure(self.rate_spec(t), now).rate(),
            None => 0.0,
        })
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
        let now = resolve_now(now)?;
        let rt = &self.types[t.index()];
        // The generation before the kind bits: `publish` stores them in the other order, so a
        // resolution made from older kind bits is stamped with an older (soon stale) generation.
        let generation = rt.tags_generation.load(Ordering::Acquire);
        let kinds = rt.kinds.load(Ordering::Acquire);
        if kinds == 0 {
            return Ok(None);
        }
        // Tags fixed by the kind bits: the registry answers directly (no snapshot, no tag strings).
        if let Some((tu, tc)) = direct_tags(kinds, user, client_id) {
            if let Some((s, ())) = rt.sensors.pin().get_key_value(&PairRef(tu, tc)) {
                return Ok(Some((generation, Arc::clone(&s.0))));
            }
        }
        let r = self.resolve_current(t, user, client_id, now)?;
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
        let now = resolve_now(now)?;
        self.record_into(t, sensor, value, now, Check::Throttle)
    }

    /// [`record_controller_mutations`](Self::record_controller_mutations) into an already
    /// resolved, current sensor.
    #[inline]
    pub fn record_resolved_mutations(
        &self,
        sensor: &QuotaSensor,
        mutations: f64,
        now: Option<i64>,
        strict: bool,
    ) -> Result<i32, QuotaError> {
        check_mutations(mutations)?;
        let now = resolve_now(now)?;
        let check = if strict { Check::Strict } else { Check::Permissive };
        self.record_into(ClientQuotaType::ControllerMutation, sensor, mutations, now, check)
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
