//! A point-in-time copy of every quota metric, built without changing any sensor (a scrape is
//! not a use: see [`RateSensor::peek`](crate::rate::RateSensor::peek)) and without locks, so
//! recording threads carry on while it is built.
//!
//! Rows follow Kafka's metric names: group `Produce` / `Fetch` / `Request` /
//! `ControllerMutation`, names such as `byte-rate` and `throttle-time`, tags `user` and
//! `client-id`. A new sensor kind adds its values in [`sensor_values`].

use crate::clock::resolve_now;
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::sensor::QuotaSensor;
use crate::types::{ClientQuotaType, WindowSpec};

/// One sensor's values, tagged `user` / `client-id`.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorRow {
    pub quota_type: ClientQuotaType,
    pub user: Box<str>,
    pub client_id: Box<str>,
    /// `(metric name, value)` pairs, for example `("byte-rate", 512.0)`.
    pub values: Vec<(&'static str, f64)>,
}

/// Values about a whole quota type (no tags).
#[derive(Debug, Clone, PartialEq)]
pub struct TypeRow {
    pub quota_type: ClientQuotaType,
    pub values: Vec<(&'static str, f64)>,
}

/// Everything [`QuotaKernel::metrics_snapshot`] saw.
#[derive(Debug, Clone, Default)]
pub struct MetricsSnapshot {
    /// The time the rates were measured at (each sensor at this time or its own latest time).
    pub now_ms: i64,
    pub sensors: Vec<SensorRow>,
    pub types: Vec<TypeRow>,
    /// Topic sensors (topic quotas), tagged `topic`.
    pub topics: Vec<crate::topic_quotas::TopicRow>,
}

impl MetricsSnapshot {
    /// Number of `(name, value)` pairs in all rows.
    pub fn value_count(&self) -> usize {
        self.sensors.iter().map(|r| r.values.len()).sum::<usize>()
            + self.types.iter().map(|r| r.values.len()).sum::<usize>()
    }
}

/// Per-sensor metric name of the measured value, by quota type.
pub fn value_metric_name(t: ClientQuotaType) -> &'static str {
    match t {
        ClientQuotaType::Produce | ClientQuotaType::Fetch => "byte-rate",
        ClientQuotaType::Request => "request-time",
        ClientQuotaType::ControllerMutation => "mutation-rate",
    }
}

/// kquota's name for the configured bound of a sensor (Kafka keeps it in the metric's config,
/// not as a metric).
pub const LIMIT_METRIC: &str = "quota-limit";

/// The values a sensor reports: its measured rate and, when limited, its bound.
fn sensor_values(
    t: ClientQuotaType,
    sensor: &QuotaSensor,
    spec: &WindowSpec,
    now: i64,
    limit: Option<f64>,
) -> Vec<(&'static str, f64)> {
    let mut v = Vec::with_capacity(2);
    v.push((value_metric_name(t), sensor.rate.peek(spec, now).rate()));
    if let Some(l) = limit {
        v.push((LIMIT_METRIC, l));
    }
    v
}

impl QuotaKernel {
    /// A copy of every metric at `now` (`None`: the kernel's estimate of the callers' clock,
    /// [`estimated_now_ms`](Self::estimated_now_ms)). Touches no sensor's clock or samples.
    pub fn metrics_snapshot(&self, now: Option<i64>) -> Result<MetricsSnapshot, QuotaError> {
        let now = match now {
            Some(t) => resolve_now(Some(t))?,
            None => self.estimated_now_ms(),
        };
        let snap = self.snapshot();
        let has_callback = self.has_callback_hook();
        let mut out = MetricsSnapshot {
            now_ms: now,
            sensors: Vec::with_capacity(ClientQuotaType::ALL.iter().map(|t| self.sensor_count(*t)).sum()),
            types: Vec::with_capacity(4),
            topics: self
                .topics
                .rows(&self.settings.window, &self.settings.metrics_window, now),
        };
        for t in ClientQuotaType::ALL {
            let spec = self.rate_spec(t);
            let registry = &self.types[t.index()].sensors;
            let cfg = &snap.types[t.index()];
            registry.for_each(|s| {
                let limit = self.reported_limit(t, cfg, has_callback, s);
                let mut values = sensor_values(t, s, spec, now, limit);
                if let Some(tokens) = self.peek_tokens(s, limit, now) {
                    values.push(("tokens", tokens));
                }
                out.sensors.push(SensorRow {
                    quota_type: t,
                    user: s.tags.user().into(),
                    client_id: s.tags.client_id().into(),
                    values,
                });
            });
            self.attach_entity_throttle_times(t, &mut out.sensors, now);
            let throttle = self.throttle_time[t.index()]
                .get()
                .map_or(f64::NAN, |a| a.average(&self.settings().metrics_window, now));
            let mut values = Vec::with_capacity(5);
            if t == ClientQuotaType::Request {
                values.push(("exempt-request-time", self.peek_exempt_rate(now)));
            }
            out.types.push(TypeRow {
                quota_type: t,
                values: values
                    .into_iter()
                    .chain([
                        ("throttle-time", throttle),
                        ("sensor-count", registry.live() as f64),
                        ("sensors-expired-total", registry.expired() as f64),
                        ("sensor-overflow-total", registry.overflowed() as f64),
                    ])
                    .collect(),
            });
        }
        Ok(out)
    }

    /// Adds each throttled entity's `throttle-time` to its sensor row of type `t` (the rows of
    /// `t` are the last ones in `rows`). Expired entities are dropped on the way; an entity
    /// whose sensor has expired reports nothing, as in Kafka.
    fn attach_entity_throttle_times(&self, t: ClientQuotaType, rows: &mut [SensorRow], now: i64) {
        let entities =
            self.entity_throttle_time[t.index()].drain_expired_and_list(&self.settings.metrics_window, now);
        if entities.is_empty() {
            return;
        }
        let first = rows.iter().position(|r| r.quota_type == t).unwrap_or(rows.len());
        let index: std::collections::HashMap<(&str, &str), usize> = rows[first..]
            .iter()
            .enumerate()
            .map(|(i, r)| ((&*r.user, &*r.client_id), first + i))
            .collect();
        let found: Vec<(usize, f64)> = entities
            .iter()
            .filter_map(|(u, c, avg)| index.get(&(&**u, &**c)).map(|&i| (i, *avg)))
            .collect();
        drop(index);
        for (i, avg) in found {
            rows[i].values.push(("throttle-time", avg));
        }
    }
}
