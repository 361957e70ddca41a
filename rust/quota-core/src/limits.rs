//! Limits: the bound a sensor is checked against (Kafka's `quotaLimit`), from the default
//! precedence or the installed callback. [`limit_for`](QuotaKernel::limit_for) is the one
//! lookup; the record path caches its answer per sensor, the queries and the metrics ask it
//! (metrics without calling a callback).

use std::sync::atomic::Ordering;

use crate::callback::{CallbackSlot, FAILED_TAGS};
use crate::kernel::QuotaKernel;
use crate::precedence::TypeConfig;
use crate::sensor::QuotaSensor;
use crate::throttle::time_at_bound_ms;
use crate::types::ClientQuotaType;

/// What a limit lookup found.
pub(crate) enum Limit {
    /// `None` unlimited, `Some(bound)` with `bound >= 0` (0 blocks).
    Known(Option<f64>),
    /// The callback failed; `fallback` is its fail-open (`None`) or fail-closed (`Some(0.0)`)
    /// limit.
    Failed { fallback: Option<f64> },
}

impl QuotaKernel {
    /// The limit of a tag set now: the configured (or callback's) limit times this kernel's
    /// fleet share of it (see `shares`).
    fn limit_for(
        &self,
        t: ClientQuotaType,
        cfg: &TypeConfig,
        hook: Option<&CallbackSlot>,
        tag_user: &str,
        tag_client: &str,
    ) -> Limit {
        let share = self.shares.of(t, tag_user, tag_client);
        match self.whole_limit_for(t, cfg, hook, tag_user, tag_client) {
            Limit::Known(l) => Limit::Known(l.map(|v| v * share)),
            Limit::Failed { fallback } => Limit::Failed {
                fallback: fallback.map(|v| v * share),
            },
        }
    }

    /// The configured (or callback's) limit of a tag set, before any fleet share.
    fn whole_limit_for(
        &self,
        t: ClientQuotaType,
        cfg: &TypeConfig,
        hook: Option<&CallbackSlot>,
        tag_user: &str,
        tag_client: &str,
    ) -> Limit {
        match hook {
            None => Limit::Known(cfg.limit(tag_user, tag_client)),
            // Requests the callback could not tag share one sensor, limited by the fallback.
            Some(h) if (tag_user, tag_client) == FAILED_TAGS => Limit::Known(h.0.fallback_limit()),
            Some(h) => match h.0.limit(t, tag_user, tag_client) {
                Some(limit) => Limit::Known(limit),
                None => Limit::Failed {
                    fallback: h.0.fallback_limit(),
                },
            },
        }
    }

    /// The bound for a sensor on the record path, from its cache when current.
    #[inline]
    pub(crate) fn limit_of(&self, t: ClientQuotaType, sensor: &QuotaSensor) -> f64 {
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
        let hook = self.hook.load();
        match self.limit_for(
            t,
            cfg,
            hook.as_deref(),
            sensor.tags.user(),
            sensor.tags.client_id(),
        ) {
            Limit::Known(limit) => {
                let limit = limit.unwrap_or(f64::INFINITY);
                sensor.rate.store_limit(limit, cfg.limits_generation);
                limit
            }
            // The last good limit of this sensor, else the fallback; not cached, so the next
            // request asks again.
            Limit::Failed { fallback } => sensor
                .rate
                .last_limit()
                .unwrap_or_else(|| fallback.unwrap_or(f64::INFINITY)),
        }
    }

    /// The limit a metrics scrape reports for a sensor. A callback's limits are not asked for
    /// here (a scrape must not call into Python per sensor): the limit the sensor last used is
    /// reported.
    pub(crate) fn reported_limit(
        &self,
        t: ClientQuotaType,
        cfg: &TypeConfig,
        has_callback: bool,
        sensor: &QuotaSensor,
    ) -> Option<f64> {
        if has_callback {
            return sensor.rate.last_limit().filter(|l| l.is_finite());
        }
        match self.limit_for(t, cfg, None, sensor.tags.user(), sensor.tags.client_id()) {
            Limit::Known(limit) | Limit::Failed { fallback: limit } => limit,
        }
    }

    /// The limit that applies, `None` for unlimited.
    pub fn quota_limit(&self, t: ClientQuotaType, user: &str, client_id: &str) -> Option<f64> {
        let (u, c) = self.tags_of(t, user, client_id);
        let snap = self.config.load();
        let hook = self.hook.load();
        match self.limit_for(t, &snap.types[t.index()], hook.as_deref(), &u, &c) {
            Limit::Known(limit) | Limit::Failed { fallback: limit } => limit,
        }
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

    /// How long the limit takes to allow `value` (ms; `value / limit` seconds, see
    /// [`time_at_bound_ms`]); 0 when unlimited.
    pub fn time_at_quota_ms(&self, t: ClientQuotaType, user: &str, client_id: &str, value: f64) -> i32 {
        match self.quota_limit(t, user, client_id) {
            Some(l) => time_at_bound_ms(value, l),
            None => 0,
        }
    }
}
