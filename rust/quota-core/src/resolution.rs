//! Resolution: from a (principal, client-id) to the metric tags it is recorded under (the
//! default precedence or a custom callback) and to the sensor of those tags, through the
//! metric-tag cache. One tag lookup serves both the resolving path and the read-only queries.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::callback::{CallbackSlot, FAILED_TAGS};
use crate::client_ids::Admission;
use crate::clock::resolve_now;
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::precedence::{direct_tags, TypeConfig};
use crate::sensor::QuotaSensor;
use crate::tag_cache::Resolved;
use crate::types::ClientQuotaType;

/// The answer of a tag lookup.
enum Tagged<'a> {
    /// The tags and the tags generation they hold for (0: the callback failed and there was no
    /// earlier answer, so these are [`FAILED_TAGS`], for this request only).
    Tags(Cow<'a, str>, Cow<'a, str>, u64),
    /// The callback failed: its last good answer for this (principal, client-id).
    Earlier(Resolved),
}

impl QuotaKernel {
    /// The metric tags of (principal, client-id) now: Kafka's `quotaMetricTags`, from the
    /// default precedence or the installed callback.
    fn lookup_tags<'a>(
        &self,
        t: ClientQuotaType,
        user: &'a str,
        client_id: &'a str,
        cfg: &TypeConfig,
        hook: Option<&CallbackSlot>,
    ) -> Tagged<'a> {
        match hook {
            None => {
                let tags = cfg.metric_tags(user, client_id);
                Tagged::Tags(tags.user, tags.client_id, cfg.tags_generation)
            }
            Some(h) => match h.0.metric_tags(t, user, client_id) {
                Some((u, c)) => Tagged::Tags(u.into(), c.into(), cfg.tags_generation),
                // The callback failed: keep its last good answer for this (principal,
                // client-id) if there is one, else the shared failure sensor; ask again next time.
                None => match self.types[t.index()].cache.get(user, client_id) {
                    Some(r) => Tagged::Earlier(r),
                    None => Tagged::Tags(FAILED_TAGS.0.into(), FAILED_TAGS.1.into(), 0),
                },
            },
        }
    }

    /// The sensor registered under these tags, registered now if there is none (see
    /// `SensorRegistry::register` for the cap and the overflow sensors).
    pub(crate) fn register_sensor(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        now: i64,
    ) -> Arc<QuotaSensor> {
        self.types[t.index()].sensors.register(
            user,
            client_id,
            self.settings.max_sensors,
            &self.names,
            |u, c| self.new_sensor(t, u, c, now),
        )
    }

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
        crate::name_budget::check_names(user, client_id)?;
        let rt = &self.types[t.index()];
        // A principal past its bound of client ids resolves its new ones as its overflow
        // client id (`client_ids`): its own sensor, never another principal's.
        let admission = rt.client_ids.admit(
            user,
            client_id,
            self.settings.max_client_ids_per_principal,
            self.settings.max_sensors,
        );
        let client_id = admission.client_id(client_id);
        let snap = self.config.load();
        let cfg = &snap.types[t.index()];
        let hook = self.hook.load();
        let (tag_user, tag_client, generation) =
            match self.lookup_tags(t, user, client_id, cfg, hook.as_deref()) {
                Tagged::Tags(u, c, generation) => (u, c, generation),
                Tagged::Earlier(r) => {
                    return Ok(Resolved {
                        tags_generation: 0,
                        sensor: r.sensor,
                    })
                }
            };
        let resolved = Resolved {
            tags_generation: generation,
            sensor: self.register_sensor(t, &tag_user, &tag_client, now),
        };
        if let Admission::Kept(key) = admission {
            rt.client_ids.resolved(key, &resolved.sensor);
        }
        // Names whose tags are the names themselves are found in the registry directly; the
        // cache keeps the rest (bounded like the registry: a flood of names must not grow it).
        if generation != 0 && (hook.is_some() || direct_tags(cfg.kinds, user, client_id).is_none()) {
            rt.cache
                .insert(user, client_id, &resolved, self.settings.max_sensors, &self.names);
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
        match rt.cache.current(user, client_id, generation) {
            Some(r) => Ok(r),
            None => self.resolve(t, user, client_id, now),
        }
    }

    /// The metric tags a request is recorded under now (callback-aware), without creating a
    /// sensor.
    pub(crate) fn tags_of(&self, t: ClientQuotaType, user: &str, client_id: &str) -> (String, String) {
        let snap = self.config.load();
        let hook = self.hook.load();
        match self.lookup_tags(t, user, client_id, &snap.types[t.index()], hook.as_deref()) {
            Tagged::Tags(u, c, _) => (u.into_owned(), c.into_owned()),
            Tagged::Earlier(r) => (
                r.sensor.tags.user().to_owned(),
                r.sensor.tags.client_id().to_owned(),
            ),
        }
    }

    /// The throttle recording `value` for (principal, client-id) at `now` would give
    /// (sampled-rate types), creating no sensor: Kafka creates one at its first record, so
    /// before that the answer is a new sensor's.
    #[cold]
    pub(crate) fn peek_named(
        &self,
        t: ClientQuotaType,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
    ) -> Result<i32, QuotaError> {
        crate::name_budget::check_names(user, client_id)?;
        let (u, c) = self.tags_of(t, user, client_id);
        let peek = |s: &QuotaSensor| self.peek_rate_throttle(t, s, value, now);
        Ok(match self.types[t.index()].sensors.with(&u, &c, |s| peek(s)) {
            Some(throttle) => throttle,
            None => peek(&self.new_sensor(t, &u, &c, now)),
        })
    }

    /// The metric tags `(user, client-id)` a request would be recorded under.
    pub fn quota_metric_tags(&self, t: ClientQuotaType, user: &str, client_id: &str) -> (String, String) {
        self.tags_of(t, user, client_id)
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
        let (u, c) = self.tags_of(t, user, client_id);
        Ok(self.types[t.index()]
            .sensors
            .with(&u, &c, |s| s.rate.measure(self.rate_spec(t), now).rate())
            .unwrap_or(0.0))
    }

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
        crate::name_budget::check_names(user, client_id)?;
        if let Some((tu, tc)) = direct_tags(kinds, user, client_id) {
            if let Some(s) = rt.sensors.with(tu, tc, Arc::clone) {
                return Ok(Some((generation, s)));
            }
        }
        let r = self.resolve_current(t, user, client_id, now)?;
        Ok(Some((r.tags_generation, r.sensor)))
    }

    /// Whether a resolution made under `generation` still holds.
    #[inline]
    pub fn is_current(&self, t: ClientQuotaType, generation: u64) -> bool {
        self.tags_generation(t) == generation
    }

    /// The tags generation resolutions of type `t` are made under now (see `is_current`).
    #[inline]
    pub fn tags_generation(&self, t: ClientQuotaType) -> u64 {
        self.types[t.index()].tags_generation.load(Ordering::Acquire)
    }
}
