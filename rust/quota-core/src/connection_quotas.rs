//! Kafka's `ConnectionQuotas` (SocketServer.scala): what happens when a connection is accepted.
//!
//! In Kafka's `inc`, under one lock (`counts.synchronized`):
//! 1. `waitForConnectionSlot`: the connection is recorded into the broker-wide rate
//!    (`max.connection.creation.rate`) and its listener's (`listener.name.<l>.max.connection.
//!    creation.rate`); the acceptor then blocks for the longer delay, and until the listener and
//!    the broker have a free slot (`max.connections`). Here [`ConnectionQuotas::record_accept`]
//!    records and returns that delay, [`ConnectionQuotas::slot_available`] says whether a slot
//!    is free: the caller waits (Kafka blocks its acceptor thread). A server that learns the
//!    address only after the accept (the proxy reads a PROXY header first) cannot count the
//!    connection there, as Kafka's `inc` does under its lock; it holds the slot instead
//!    ([`ConnectionQuotas::take_slot`]) until [`ConnectionQuotas::admit_held`] counts the
//!    connection or [`ConnectionQuotas::return_slot`] gives the slot back, so that a burst of
//!    accepts cannot pass `max.connections` between the wait and the count.
//! 2. `recordIpConnectionMaybeThrottle`: if the address has a `connection_creation_rate` quota
//!    the connection is recorded into the address's sensor; over the quota it is taken back from
//!    that sensor and from the broker and listener rates, the listener's
//!    `ip-connection-accept-throttle-time` records the delay, and the connection is closed after
//!    the delay without being counted (`ConnectionThrottledException`).
//! 3. The connection is counted; if the address already had `max.connections.per.ip` (or its
//!    override) it is refused (`TooManyConnectionsException`; Kafka counts it, then closes it and
//!    counts it down, so it is never held). Steps 2 and 3 are [`ConnectionQuotas::admit`];
//!    [`ConnectionQuotas::release`] is Kafka's `dec`.
//!
//! Per-connection cost is a lock and a hash lookup or two: far below the cost of the connection
//! itself (benches/), and connections are rare next to requests, so the lock Kafka also takes is
//! kept here rather than made lock-free.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::clock::resolve_now;
use crate::connection_limits::{ConnectionLimits, UNLIMITED};
use crate::connection_rate::{record_and_throttle, unrecord, IpRateConfig};
use crate::error::QuotaError;
use crate::rate::RateSensor;
use crate::throttle_time_avg::ThrottleAvg;
use crate::types::WindowSpec;

/// What [`ConnectionQuotas::admit`] decided for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Counted: serve it, and call [`ConnectionQuotas::release`] when it closes.
    Accepted,
    /// Over the address's `connection_creation_rate`: not counted; close it after `throttle_ms`
    /// (Kafka's delayed close of a `ConnectionThrottledException`).
    Throttled { throttle_ms: i32 },
    /// The address already holds `max` connections: not counted; close it now.
    TooManyConnections { max: i32 },
}

/// One address's connection-rate sensor.
pub(crate) struct IpSensor {
    pub(crate) rate: RateSensor,
    /// Connections of this address throttled by its quota.
    pub(crate) throttled: u64,
}

/// One listener's state (`ListenerConnectionQuota` and its count).
pub(crate) struct ListenerState {
    pub(crate) count: i64,
    /// Slots taken by `take_slot` and not yet counted or returned.
    pub(crate) held: i64,
    pub(crate) rate: RateSensor,
    /// Connections recorded by `record_accept` and not yet through `admit`: only those are taken
    /// back from the broker and listener rates when the address is throttled.
    pub(crate) pending: u64,
    /// `connection-accept-throttle-time` and `ip-connection-accept-throttle-time` (Avg of the
    /// non-zero delays).
    pub(crate) throttle: ThrottleAvg,
    pub(crate) ip_throttle: ThrottleAvg,
}

pub(crate) struct State {
    pub(crate) limits: ConnectionLimits,
    pub(crate) ip_rates: IpRateConfig,
    pub(crate) sensors: HashMap<IpAddr, IpSensor>,
    /// Shared by addresses that found `sensors` at its cap (the kernel's `max_sensors`).
    pub(crate) overflow: Option<IpSensor>,
    pub(crate) overflowed: u64,
    pub(crate) counts: HashMap<IpAddr, u32>,
    pub(crate) total: i64,
    /// Slots held broker-wide (`take_slot`): counted against `max.connections` with `total`.
    pub(crate) held: i64,
    /// Created by the first connection (a sensor's first sample starts at its first record).
    pub(crate) broker: Option<RateSensor>,
    pub(crate) broker_pending: u64,
    /// By listener name; `""` is "no listener" (counts only broker-wide). A vector: listener
    /// names come from the operator's configuration, not from clients, so there are a handful and
    /// a scan beats hashing the name on every connection.
    pub(crate) listeners: Vec<(String, ListenerState)>,
    /// The newest time seen, for expiry without a caller's time.
    pub(crate) newest_ms: i64,
}

/// Accepted / throttled / refused totals since start.
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) accepted: AtomicU64,
    pub(crate) throttled: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) expired: AtomicU64,
}

/// The connection quotas of one broker or proxy (see the module docs).
pub struct ConnectionQuotas {
    pub(crate) spec: WindowSpec,
    /// The broker's metrics window (`metrics.num.samples` x `metrics.sample.window.ms`): Kafka's
    /// throttle-time `Avg` sensors are created without a quota config and use it.
    pub(crate) metrics_spec: WindowSpec,
    /// `maxThrottleTimeMs`: one sample window.
    pub(crate) max_throttle_ms: i32,
    pub(crate) expiry_ms: i64,
    pub(crate) max_ip_sensors: usize,
    pub(crate) state: Mutex<State>,
    pub(crate) totals: Totals,
}

impl ConnectionQuotas {
    /// Quotas over the quota window `spec`; address sensors idle for more than `expiry_ms` are
    /// removed by [`expire`](Self::expire); at most `max_ip_sensors` live at once.
    pub fn new(spec: WindowSpec, metrics_spec: WindowSpec, expiry_ms: i64, max_ip_sensors: usize) -> Self {
        ConnectionQuotas {
            spec,
            metrics_spec,
            max_throttle_ms: spec.window_ms.min(i32::MAX as i64) as i32,
            expiry_ms,
            max_ip_sensors: max_ip_sensors.max(1),
            state: Mutex::new(State {
                limits: ConnectionLimits::default(),
                ip_rates: IpRateConfig::default(),
                sensors: HashMap::new(),
                overflow: None,
                overflowed: 0,
                counts: HashMap::new(),
                total: 0,
                held: 0,
                broker: None,
                broker_pending: 0,
                listeners: Vec::new(),
                newest_ms: i64::MIN,
            }),
            totals: Totals::default(),
        }
    }

    /// Replaces the broker properties (Kafka's dynamic update of each); connections already
    /// counted stay counted.
    pub fn set_limits(&self, limits: ConnectionLimits) {
        self.state.lock().limits = limits;
    }

    pub fn limits(&self) -> ConnectionLimits {
        self.state.lock().limits.clone()
    }

    /// Sets (`Some`) or removes (`None`) `connection_creation_rate` of an address or, with `ip`
    /// `None`, of `ips/<default>` (Kafka's `updateIpConnectionRateQuota`): live sensors measure
    /// against the new quota from the next connection on.
    pub fn set_ip_rate(&self, ip: Option<IpAddr>, value: Option<f64>) {
        self.state.lock().ip_rates.set(ip, value);
    }

    pub fn ip_rates(&self) -> IpRateConfig {
        self.state.lock().ip_rates.clone()
    }

    /// Kafka's `connectionRateForIp`.
    pub fn connection_rate_for_ip(&self, ip: &IpAddr) -> i32 {
        self.state.lock().ip_rates.rate_for(ip)
    }

    /// Step 1 (Kafka's `recordConnectionAndGetThrottleTimeMs`): records a new connection on
    /// `listener` into the broker-wide and listener rates and returns how long to hold it before
    /// going on (the longer of the two delays, each capped at one window). Kafka has no
    /// listener-exempt case here except the inter-broker listener, which a proxy does not have.
    pub fn record_accept(&self, listener: &str, now: Option<i64>) -> Result<i32, QuotaError> {
        let now = resolve_now(now)?;
        let mut st = self.state.lock();
        let st = &mut *st;
        st.newest_ms = st.newest_ms.max(now);
        let broker_bound = st.limits.max_connection_creation_rate;
        let broker = st.broker.get_or_insert_with(|| RateSensor::new(&self.spec, now));
        let broker_ms = record_and_throttle(broker, &self.spec, broker_bound, self.max_throttle_ms, now);
        st.broker_pending += 1;
        let bound = st.limits.listener(listener).max_connection_creation_rate;
        let l = listener_state(&mut st.listeners, listener, &self.spec, &self.metrics_spec, now);
        let listener_ms = record_and_throttle(&l.rate, &self.spec, bound, self.max_throttle_ms, now);
        l.pending += 1;
        let delay = broker_ms.max(listener_ms);
        if delay > 0 {
            l.throttle.record(&self.metrics_spec, delay as f64, now);
        }
        Ok(delay)
    }

    /// Kafka's `connectionSlotAvailable`: the listener is under its `max.connections` and the
    /// broker under its own (held slots count as connections).
    pub fn slot_available(&self, listener: &str) -> bool {
        slot_free(&self.state.lock(), listener)
    }

    /// [`slot_available`](Self::slot_available) and, when it is, the slot held for one
    /// connection on `listener` at `now` in the same step: the caller then calls
    /// [`admit_held`](Self::admit_held) or [`return_slot`](Self::return_slot) exactly once.
    pub fn take_slot(&self, listener: &str, now: Option<i64>) -> Result<bool, QuotaError> {
        let now = resolve_now(now)?;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if !slot_free(st, listener) {
            return Ok(false);
        }
        st.newest_ms = st.newest_ms.max(now);
        st.held += 1;
        listener_state(&mut st.listeners, listener, &self.spec, &self.metrics_spec, now).held += 1;
        Ok(true)
    }

    /// A slot taken by [`take_slot`](Self::take_slot) given back unused (the connection closed
    /// before it could be admitted).
    pub fn return_slot(&self, listener: &str) {
        let mut st = self.state.lock();
        unhold(&mut st, listener);
    }

    /// Steps 2 and 3 for a connection from `ip` on `listener` at `now` (see the module docs).
    pub fn admit(&self, ip: IpAddr, listener: &str, now: Option<i64>) -> Result<Admission, QuotaError> {
        self.admit_inner(ip, listener, now, false)
    }

    /// [`admit`](Self::admit) for a connection that holds a slot (`take_slot`): the slot becomes
    /// the connection's count when it is accepted, and is given back otherwise.
    pub fn admit_held(&self, ip: IpAddr, listener: &str, now: Option<i64>) -> Result<Admission, QuotaError> {
        self.admit_inner(ip, listener, now, true)
    }

    fn admit_inner(&self, ip: IpAddr, listener: &str, now: Option<i64>, held: bool) -> Result<Admission, QuotaError> {
        let now = resolve_now(now)?;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if held {
            unhold(st, listener);
        }
        st.newest_ms = st.newest_ms.max(now);
        // Whether step 1 recorded this connection (so that it can be taken back).
        let from_accept = st.broker_pending > 0;
        st.broker_pending = st.broker_pending.saturating_sub(1);
        let listener_recorded = match find_mut(&mut st.listeners, listener) {
            Some(l) if l.pending > 0 => {
                l.pending -= 1;
                true
            }
            _ => false,
        };
        let quota = st.ip_rates.rate_for(&ip);
        if quota != UNLIMITED {
            let sensor = ip_sensor(st, ip, self.max_ip_sensors, &self.spec, now);
            let throttle_ms = record_and_throttle(&sensor.rate, &self.spec, quota, self.max_throttle_ms, now);
            if throttle_ms > 0 {
                unrecord(&sensor.rate, &self.spec, now);
                sensor.throttled += 1;
                if let (true, Some(broker)) = (from_accept, &st.broker) {
                    unrecord(broker, &self.spec, now);
                }
                let l = listener_state(&mut st.listeners, listener, &self.spec, &self.metrics_spec, now);
                if listener_recorded {
                    unrecord(&l.rate, &self.spec, now);
                }
                l.ip_throttle.record(&self.metrics_spec, throttle_ms as f64, now);
                self.totals.throttled.fetch_add(1, Ordering::Relaxed);
                return Ok(Admission::Throttled { throttle_ms });
            }
        }
        let max = st.limits.max_for_ip(&ip);
        let count = st.counts.get(&ip).copied().unwrap_or(0);
        if count as i64 >= max as i64 {
            self.totals.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(Admission::TooManyConnections { max });
        }
        st.counts.insert(ip, count + 1);
        st.total += 1;
        listener_state(&mut st.listeners, listener, &self.spec, &self.metrics_spec, now).count += 1;
        self.totals.accepted.fetch_add(1, Ordering::Relaxed);
        Ok(Admission::Accepted)
    }

    /// Kafka's `dec`: a counted connection closed. False (and nothing changed) when `ip` had no
    /// counted connection, where Kafka throws.
    pub fn release(&self, ip: IpAddr, listener: &str) -> bool {
        let mut st = self.state.lock();
        match st.counts.get_mut(&ip) {
            None => return false,
            Some(1) => {
                st.counts.remove(&ip);
            }
            Some(n) => *n -= 1,
        }
        st.total -= 1;
        if let Some(l) = find_mut(&mut st.listeners, listener) {
            l.count = (l.count - 1).max(0);
        }
        true
    }

    /// Connections counted for `ip` now (Kafka's `get`).
    pub fn count(&self, ip: &IpAddr) -> u32 {
        self.state.lock().counts.get(ip).copied().unwrap_or(0)
    }

    /// Connections counted now, all addresses.
    pub fn total(&self) -> i64 {
        self.state.lock().total
    }

    /// Removes address sensors unused for more than the expiry time at `now` (Kafka: an IP
    /// sensor expires after an hour), or at the newest time seen when `now` is `None`; returns
    /// how many.
    pub fn expire(&self, now: Option<i64>) -> usize {
        let mut st = self.state.lock();
        let now = now.unwrap_or(st.newest_ms);
        let before = st.sensors.len();
        let expiry = self.expiry_ms;
        st.sensors
            .retain(|_, s| now.saturating_sub(s.rate.last_seen_ms()) <= expiry);
        if st
            .overflow
            .as_ref()
            .is_some_and(|s| now.saturating_sub(s.rate.last_seen_ms()) > expiry)
        {
            st.overflow = None;
        }
        let removed = before - st.sensors.len();
        self.totals.expired.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }
}

/// Kafka's `connectionSlotAvailable` over `st`, held slots counted as connections.
fn slot_free(st: &State, listener: &str) -> bool {
    let in_listener = find(&st.listeners, listener).map_or(0, |l| l.count + l.held);
    in_listener < st.limits.listener(listener).max_connections as i64
        && st.total + st.held < st.limits.max_connections as i64
}

fn unhold(st: &mut State, listener: &str) {
    st.held = (st.held - 1).max(0);
    if let Some(l) = find_mut(&mut st.listeners, listener) {
        l.held = (l.held - 1).max(0);
    }
}

/// Listener-name equality, case-insensitive as Kafka's listener names, without a `memcmp` call:
/// names are a few bytes, and the call (through the PLT) cost more than the compare on every
/// connection.
#[inline]
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x.eq_ignore_ascii_case(&y))
}

fn find<'a>(listeners: &'a [(String, ListenerState)], name: &str) -> Option<&'a ListenerState> {
    listeners.iter().find(|(n, _)| same(n, name)).map(|(_, l)| l)
}

fn find_mut<'a>(listeners: &'a mut [(String, ListenerState)], name: &str) -> Option<&'a mut ListenerState> {
    listeners.iter_mut().find(|(n, _)| same(n, name)).map(|(_, l)| l)
}

fn listener_state<'a>(
    listeners: &'a mut Vec<(String, ListenerState)>,
    name: &str,
    spec: &WindowSpec,
    metrics_spec: &WindowSpec,
    now: i64,
) -> &'a mut ListenerState {
    let i = match listeners.iter().position(|(n, _)| same(n, name)) {
        Some(i) => i,
        None => {
            listeners.push((
                name.to_owned(),
                ListenerState {
                    count: 0,
                    held: 0,
                    rate: RateSensor::new(spec, now),
                    pending: 0,
                    throttle: ThrottleAvg::new(metrics_spec, now),
                    ip_throttle: ThrottleAvg::new(metrics_spec, now),
                },
            ));
            listeners.len() - 1
        }
    };
    &mut listeners[i].1
}

/// The address's sensor; at the cap a new address shares the overflow sensor (the same
/// cap-and-overflow rule as the client sensors), which throttles such addresses together:
/// fail-safe under a spray of source addresses.
fn ip_sensor<'a>(st: &'a mut State, ip: IpAddr, cap: usize, spec: &WindowSpec, now: i64) -> &'a mut IpSensor {
    if !st.sensors.contains_key(&ip) && st.sensors.len() >= cap {
        st.overflowed += 1;
        return st.overflow.get_or_insert_with(|| IpSensor {
            rate: RateSensor::new(spec, now),
            throttled: 0,
        });
    }
    st.sensors.entry(ip).or_insert_with(|| IpSensor {
        rate: RateSensor::new(spec, now),
        throttled: 0,
    })
}
