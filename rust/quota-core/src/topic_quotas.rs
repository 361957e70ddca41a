//! Topic quotas (KIP-1010): a `topics` entity, a named topic or `<default>`, with
//! `producer_byte_rate` / `consumer_byte_rate`, the total rate into (Produce) or out of (Fetch)
//! the topic over all its partitions and clients. Each quoted topic has a sensor per type, a
//! [`StripedRate`] over the quota window (the same sampled `Rate` and throttle formula as a
//! client sensor, recorded by every thread without contention), and its own `throttle-time`.
//!
//! Bounded: a topic with no quota (neither its own nor `<default>`) never gets a sensor, names
//! that are not legal Kafka topic names (which the broker refuses) get none either, and at
//! [`MAX_TOPIC_SENSORS`] live sensors of a type further topics share one overflow sensor (held
//! to the default's bound, so the cap can only throttle more, never less). Idle topic sensors
//! expire like client sensors. The configuration and its rules are `topic_config`'s.
//!
//! In a fleet of proxies (`--quota-scope fleet`) this kernel holds each topic to its share of
//! the quota ([`TopicShareMap`], set by the fleet's coordinator): a sensor's bound is the quota
//! times the share, set again whenever either changes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use foldhash::fast::FixedState;
use parking_lot::Mutex;

use crate::clock::monotonic_ms;
use crate::error::QuotaError;
use crate::idle::IdleMark;
use crate::shares::TopicShareMap;
use crate::throttle::throttle_time_ms;
use crate::throttle_time_avg::ThrottleAvg;
use crate::topic_config::{check, is_legal_topic_name, slot, TopicConfig, TYPES};
use crate::topic_rate::StripedRate;
use crate::types::{ClientQuotaType, WindowSpec};

/// Most live topic sensors per type; past it new topics share the overflow sensor.
pub const MAX_TOPIC_SENSORS: usize = 100_000;

/// The topic name of the shared overflow sensor (not a legal topic name, so no topic has it).
pub const TOPIC_OVERFLOW: &str = "<overflow>";

/// One topic's sensor of one type.
pub struct TopicSensor {
    pub topic: Box<str>,
    pub rate: StripedRate,
    /// The bound (f64 bits; infinity without a quota): the quota times this kernel's fleet share
    /// of it, kept current by configuration and share changes.
    bound: AtomicU64,
    pub(crate) idle: IdleMark,
    /// Made by the first throttle this topic's quota enforces.
    throttle_time: OnceLock<ThrottleAvg>,
}

impl TopicSensor {
    #[inline]
    pub fn bound(&self) -> f64 {
        f64::from_bits(self.bound.load(Ordering::Acquire))
    }
}

type SensorMap = papaya::HashMap<Box<str>, Arc<TopicSensor>, FixedState>;

/// A sensor's bound: its topic's quota (the overflow sensor's: `<default>`'s) times this kernel's
/// fleet share of the topic; infinity without a quota.
fn sensor_bound(cfg: &TopicConfig, shares: &TopicShareMap, topic: &str, i: usize) -> f64 {
    let quota = if topic == TOPIC_OVERFLOW {
        cfg.default[i]
    } else {
        cfg.bound(topic, i)
    };
    quota.map_or(f64::INFINITY, |q| q * shares.of(topic))
}

/// The kernel's topic quotas: configuration and sensors.
pub struct TopicQuotas {
    config: ArcSwap<TopicConfig>,
    /// This kernel's fleet share of each topic's quota, per type (whole outside a fleet).
    shares: [ArcSwap<TopicShareMap>; 2],
    /// Bumped after every configuration or share change (see `sensor`).
    generation: AtomicU64,
    writer: Mutex<()>,
    /// Whether any topic quota of the type exists (the record path's first check).
    enabled: [AtomicBool; 2],
    sensors: [SensorMap; 2],
    overflowed: [AtomicU64; 2],
    expired: AtomicU64,
    /// Most live sensors per type of topics quoted by `<default>` only.
    cap: usize,
}

impl Default for TopicQuotas {
    fn default() -> Self {
        Self::with_cap(MAX_TOPIC_SENSORS)
    }
}

impl TopicQuotas {
    /// Topic quotas whose `<default>`-quoted topics hold at most `cap` sensors per type.
    pub fn with_cap(cap: usize) -> Self {
        TopicQuotas {
            config: ArcSwap::from_pointee(TopicConfig::default()),
            shares: std::array::from_fn(|_| ArcSwap::from_pointee(TopicShareMap::whole())),
            generation: AtomicU64::new(0),
            writer: Mutex::new(()),
            enabled: Default::default(),
            sensors: std::array::from_fn(|_| SensorMap::with_hasher(FixedState::default())),
            overflowed: Default::default(),
            expired: AtomicU64::new(0),
            cap: cap.max(1),
        }
    }
}

impl TopicQuotas {
    /// Sets (`Some`) or removes (`None`) the quota `t` of `topic` (`None` = `<default>`).
    /// Checked like a client byte-rate quota; a named topic must be a legal Kafka topic name.
    pub fn set(&self, topic: Option<&str>, t: ClientQuotaType, value: Option<f64>) -> Result<(), QuotaError> {
        let i = check(topic, t, value)?;
        let _w = self.writer.lock();
        let next = self.config.load().with(topic, i, value);
        let next = Arc::new(next);
        for (j, e) in self.enabled.iter().enumerate() {
            e.store(next.any(j), Ordering::Release);
        }
        self.config.store(Arc::clone(&next));
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.publish_bounds(&next);
        Ok(())
    }

    /// Replaces this kernel's fleet shares of the topic quotas of type `t` in one step (every
    /// fraction checked first: on an error nothing changes); every live sensor of the type takes
    /// its new bound at once.
    pub fn set_shares(&self, t: ClientQuotaType, shares: TopicShareMap) -> Result<(), QuotaError> {
        let Some(i) = slot(t) else {
            return Err(QuotaError::InvalidValue(format!(
                "a topic quota is a Produce or Fetch quota, not {}",
                t.metric_group()
            )));
        };
        shares.check()?;
        let _w = self.writer.lock();
        self.shares[i].store(Arc::new(shares));
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.publish_bounds(&self.config.load());
        Ok(())
    }

    /// This kernel's fleet shares of the topic quotas of type `t` now.
    pub fn shares(&self, t: ClientQuotaType) -> TopicShareMap {
        slot(t).map_or_else(TopicShareMap::whole, |i| {
            TopicShareMap::clone(&self.shares[i].load())
        })
    }

    /// Every live sensor takes its bound from `cfg` and the shares (called under the writer lock).
    fn publish_bounds(&self, cfg: &TopicConfig) {
        for (j, map) in self.sensors.iter().enumerate() {
            let shares = self.shares[j].load();
            for (_, s) in map.pin().iter() {
                let b = sensor_bound(cfg, &shares, &s.topic, j);
                s.bound.store(b.to_bits(), Ordering::Release);
            }
        }
    }

    /// Every configured topic quota: `(topic, type, value)`, `None` for `<default>`.
    pub fn describe(&self) -> Vec<(Option<String>, ClientQuotaType, f64)> {
        let cfg = self.config.load();
        let mut out = Vec::new();
        for (i, t) in TYPES.iter().enumerate() {
            if let Some(v) = cfg.default[i] {
                out.push((None, *t, v));
            }
        }
        for (name, b) in cfg.named.iter() {
            for (i, t) in TYPES.iter().enumerate() {
                if let Some(v) = b[i] {
                    out.push((Some(name.to_string()), *t, v));
                }
            }
        }
        out
    }

    /// Whether any topic quota of type `t` exists.
    #[inline]
    pub fn enabled(&self, t: ClientQuotaType) -> bool {
        slot(t).is_some_and(|i| self.enabled[i].load(Ordering::Acquire))
    }

    /// The live sensor of `topic`, or a new one if the topic has a quota; `None` without one.
    fn sensor(&self, i: usize, topic: &str, spec: &WindowSpec, now: i64) -> Option<Arc<TopicSensor>> {
        let map = self.sensors[i].pin();
        if let Some(s) = map.get(topic) {
            return Some(Arc::clone(s));
        }
        let cfg = self.config.load();
        cfg.bound(topic, i)?;
        if !is_legal_topic_name(topic) {
            // The broker refuses the name: nothing reaches a partition, nothing to meter.
            return None;
        }
        // Named topics are bounded by the configuration; those quoted by `<default>` only by
        // the cap.
        let named = cfg.named.get(topic).is_some_and(|b| b[i].is_some());
        drop(cfg);
        let name = if named || map.len() < self.cap {
            topic
        } else {
            self.overflowed[i].fetch_add(1, Ordering::Relaxed);
            if let Some(s) = map.get(TOPIC_OVERFLOW) {
                return Some(Arc::clone(s));
            }
            TOPIC_OVERFLOW
        };
        let fresh = Arc::new(TopicSensor {
            topic: name.into(),
            rate: StripedRate::new(spec, now),
            bound: AtomicU64::new(f64::INFINITY.to_bits()),
            idle: IdleMark::new(now, monotonic_ms()),
            throttle_time: OnceLock::new(),
        });
        let s = match map.try_insert(name.into(), Arc::clone(&fresh)) {
            Ok(s) => Arc::clone(s),
            Err(e) => Arc::clone(e.current),
        };
        // A change published while this sensor was made may have missed it: its bound is read
        // until no change happened in between.
        loop {
            let g = self.generation.load(Ordering::Acquire);
            let b = sensor_bound(&self.config.load(), &self.shares[i].load(), &s.topic, i);
            s.bound.store(b.to_bits(), Ordering::Release);
            if self.generation.load(Ordering::Acquire) == g {
                break;
            }
        }
        Some(s)
    }

    /// Records `bytes` of `topic` for type `t` at `now` (resolved) and returns its throttle, or
    /// `None` when the topic has no quota of the type.
    // The live sensor is used under the map's guard, without touching its reference count: a
    // count every recording thread raised and dropped would be one cache line they all write.
    #[inline]
    pub fn record(
        &self,
        t: ClientQuotaType,
        topic: &str,
        bytes: f64,
        spec: &WindowSpec,
        now: i64,
    ) -> Option<i32> {
        let i = slot(t)?;
        if !self.enabled[i].load(Ordering::Acquire) {
            return None;
        }
        {
            let map = self.sensors[i].pin();
            if let Some(s) = map.get(topic) {
                return Some(Self::record_into(s, bytes, spec, now));
            }
        }
        let s = self.sensor(i, topic, spec, now)?;
        Some(Self::record_into(&s, bytes, spec, now))
    }

    #[inline]
    fn record_into(sensor: &TopicSensor, bytes: f64, spec: &WindowSpec, now: i64) -> i32 {
        let m = sensor.rate.record_and_measure(spec, bytes, now);
        let bound = sensor.bound();
        if bound == f64::INFINITY {
            0
        } else {
            throttle_time_ms(&m, bound)
        }
    }

    /// The throttle recording `value` into `topic` at `now` would give, recording nothing and
    /// making no sensor (a topic not recorded yet has none to throttle it: 0, as without a quota).
    pub fn peek_throttle(&self, t: ClientQuotaType, topic: &str, value: f64, spec: &WindowSpec, now: i64) -> i32 {
        let Some(i) = slot(t) else {
            return 0;
        };
        if !self.enabled[i].load(Ordering::Acquire) {
            return 0;
        }
        let map = self.sensors[i].pin();
        let Some(s) = map.get(topic) else {
            return 0;
        };
        let bound = s.bound();
        if bound == f64::INFINITY {
            return 0;
        }
        let mut m = s.rate.peek(spec, now);
        m.sum += value;
        throttle_time_ms(&m, bound)
    }

    /// The live sensor of `topic` of type `t`, if it has one.
    pub fn record_sensor(&self, t: ClientQuotaType, topic: &str) -> Option<Arc<TopicSensor>> {
        slot(t).and_then(|i| self.sensors[i].pin().get(topic).cloned())
    }

    /// Takes back `bytes` recorded into `topic` (an empty Fetch answer delivers nothing).
    pub fn unrecord(&self, t: ClientQuotaType, topic: &str, bytes: f64, spec: &WindowSpec, now: i64) {
        if let Some(i) = slot(t) {
            if let Some(s) = self.sensors[i].pin().get(topic) {
                s.rate.record(spec, -bytes, now);
            }
        }
    }

    /// Kafka's `getMaxValueInQuotaWindow` for a topic: the most bytes of the topic the quota
    /// window allows (of this kernel's fleet share of the quota); infinite without a quota.
    pub fn max_value_in_quota_window(&self, t: ClientQuotaType, topic: &str, spec: &WindowSpec) -> f64 {
        let Some(i) = slot(t) else {
            return f64::INFINITY;
        };
        if !self.enabled[i].load(Ordering::Acquire) {
            return f64::INFINITY;
        }
        match self.config.load().bound(topic, i) {
            Some(b) => b * self.shares[i].load().of(topic) * spec.max_value_factor(),
            None => f64::INFINITY,
        }
    }

    /// Records a throttle enforced because of `topic`'s quota of type `t` into its
    /// `throttle-time` (the overflow sensor's for a topic sent there).
    pub fn record_throttle_time(
        &self,
        t: ClientQuotaType,
        topic: &str,
        throttle_ms: f64,
        spec: &WindowSpec,
        now: i64,
    ) {
        let Some(i) = slot(t) else {
            return;
        };
        if throttle_ms <= 0.0 {
            return;
        }
        let map = self.sensors[i].pin();
        if let Some(s) = map.get(topic).or_else(|| map.get(TOPIC_OVERFLOW)) {
            s.throttle_time
                .get_or_init(|| ThrottleAvg::new(spec, now))
                .record(spec, throttle_ms, now);
        }
    }

    /// Live topic sensors of type `t`.
    pub fn sensor_count(&self, t: ClientQuotaType) -> usize {
        slot(t).map_or(0, |i| self.sensors[i].len())
    }

    /// Topics sent to the overflow sensor because the type was at its cap.
    pub fn overflowed(&self, t: ClientQuotaType) -> u64 {
        slot(t).map_or(0, |i| self.overflowed[i].load(Ordering::Relaxed))
    }

    /// Topic sensors removed by expiry since start.
    pub fn expired(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    /// Removes sensors `expired` says are idle; returns how many.
    pub(crate) fn expire(&self, expired: impl Fn(&TopicSensor) -> bool) -> usize {
        let mut removed = 0;
        for map in &self.sensors {
            let m = map.pin();
            let gone: Vec<Box<str>> = m
                .iter()
                .filter(|(_, s)| expired(s))
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                if m.remove(&k).is_some() {
                    removed += 1;
                }
            }
        }
        self.expired.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// `(type, topic, byte-rate, throttle-time, quota-limit)` of every live sensor at `now`,
    /// changing nothing.
    pub fn rows(&self, spec: &WindowSpec, metrics: &WindowSpec, now: i64) -> Vec<TopicRow> {
        let mut out = Vec::new();
        for (i, map) in self.sensors.iter().enumerate() {
            for (_, s) in map.pin().iter() {
                out.push(TopicRow {
                    quota_type: TYPES[i],
                    topic: s.topic.clone(),
                    byte_rate: s.rate.peek(spec, now).rate(),
                    throttle_time: s
                        .throttle_time
                        .get()
                        .map_or(f64::NAN, |a| a.average(metrics, now)),
                    limit: s.bound(),
                });
            }
        }
        out
    }
}

/// One topic sensor's metric values.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicRow {
    pub quota_type: ClientQuotaType,
    pub topic: Box<str>,
    pub byte_rate: f64,
    pub throttle_time: f64,
    pub limit: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ClientQuotaType = ClientQuotaType::Produce;

    #[test]
    fn at_the_cap_new_topics_share_the_overflow_sensor() {
        const CAP: usize = 1000;
        let q = TopicQuotas::with_cap(CAP);
        let sp = WindowSpec::new(1, 1).unwrap();
        q.set(None, P, Some(1000.0)).unwrap();
        q.set(Some("named"), P, Some(5.0)).unwrap();
        for i in 0..CAP {
            q.record(P, &format!("t{i}"), 1.0, &sp, 0).unwrap();
        }
        q.record(P, "one-more", 1.0, &sp, 0).unwrap();
        let o = q.record_sensor(P, TOPIC_OVERFLOW).unwrap();
        assert_eq!(o.bound(), 1000.0);
        assert!(q.record_sensor(P, "one-more").is_none());
        q.record(P, "and-another", 1.0, &sp, 0).unwrap();
        assert_eq!(o.rate.measure(&sp, 0).sum, 2.0);
        // A named topic keeps its own sensor past the cap.
        q.record(P, "named", 1.0, &sp, 0).unwrap();
        assert_eq!(q.record_sensor(P, "named").unwrap().bound(), 5.0);
        assert_eq!(q.sensor_count(P), CAP + 2);
        assert_eq!(q.overflowed(P), 2);
        assert_eq!(q.expire(|_| true), CAP + 2);
        assert_eq!(q.sensor_count(P), 0);
    }
}
