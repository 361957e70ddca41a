//! A read-only snapshot of the connection quotas for metrics: Kafka's `socket-server-metrics`
//! (`connection-accept-rate` per `ip` and per `listener`, `broker-connection-accept-rate`,
//! `connection-accept-throttle-time` and `ip-connection-accept-throttle-time` per listener) and
//! kquota's own counts (connections per address, accepted / throttled / refused totals).
//! Reading peeks at the sensors: a scrape neither purges nor moves any sensor's clock.

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use crate::connection_quotas::ConnectionQuotas;

/// One address: its `connection-accept-rate` (only addresses with a quota have a sensor, as in
/// Kafka), its quota, the connections it had throttled and the connections it holds now.
#[derive(Debug, Clone, PartialEq)]
pub struct IpRow {
    /// `None` for the overflow row (addresses past the cap, sensors shared or counts summed).
    pub ip: Option<IpAddr>,
    pub rate: Option<f64>,
    pub quota: Option<i32>,
    pub throttled: u64,
    pub connections: u64,
}

/// One listener.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerRow {
    pub name: String,
    pub rate: f64,
    pub max_connection_creation_rate: i32,
    pub connections: i64,
    pub max_connections: i32,
    /// Avg of the non-zero accept delays (NaN without any in the metrics window).
    pub throttle_time_avg: f64,
    pub ip_throttle_time_avg: f64,
}

/// Everything a metrics scrape shows of the connection quotas.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionSnapshot {
    pub ips: Vec<IpRow>,
    pub listeners: Vec<ListenerRow>,
    pub broker_rate: f64,
    pub max_connection_creation_rate: i32,
    pub connections: i64,
    pub accepted: u64,
    pub throttled: u64,
    pub refused: u64,
    pub ip_sensors: usize,
    pub overflowed: u64,
    pub expired: u64,
}

impl ConnectionQuotas {
    /// The snapshot at `now` (`None`: the newest time seen). At most `max_ip_sensors` address
    /// rows; the rest of the addresses holding connections are summed into the overflow row.
    pub fn snapshot(&self, now: Option<i64>) -> ConnectionSnapshot {
        let st = self.state.lock();
        let now = now.unwrap_or(st.newest_ms).max(st.newest_ms);
        let spec = &self.spec;
        let mut ips: Vec<IpRow> = Vec::with_capacity(st.sensors.len().min(self.max_ip_sensors));
        for (ip, s) in &st.sensors {
            ips.push(IpRow {
                ip: Some(*ip),
                rate: Some(s.rate.peek(spec, now).rate()),
                quota: Some(st.ip_rates.rate_for(ip)),
                throttled: s.throttled,
                connections: st.counts.get(ip).copied().unwrap_or(0) as u64,
            });
        }
        let mut overflow = st.overflow.as_ref().map(|s| IpRow {
            ip: None,
            rate: Some(s.rate.peek(spec, now).rate()),
            quota: None,
            throttled: s.throttled,
            connections: 0,
        });
        for (ip, n) in &st.counts {
            if st.sensors.contains_key(ip) {
                continue;
            }
            if ips.len() < self.max_ip_sensors {
                ips.push(IpRow {
                    ip: Some(*ip),
                    rate: None,
                    quota: None,
                    throttled: 0,
                    connections: *n as u64,
                });
            } else {
                overflow
                    .get_or_insert(IpRow {
                        ip: None,
                        rate: None,
                        quota: None,
                        throttled: 0,
                        connections: 0,
                    })
                    .connections += *n as u64;
            }
        }
        ips.sort_by_key(|r| r.ip);
        ips.extend(overflow);
        let mut listeners: Vec<ListenerRow> = st
            .listeners
            .iter()
            .map(|(name, l)| {
                let limits = st.limits.listener(name);
                ListenerRow {
                    name: name.clone(),
                    rate: l.rate.peek(spec, now).rate(),
                    max_connection_creation_rate: limits.max_connection_creation_rate,
                    connections: l.count,
                    max_connections: limits.max_connections,
                    throttle_time_avg: l.throttle.average(&self.metrics_spec, now),
                    ip_throttle_time_avg: l.ip_throttle.average(&self.metrics_spec, now),
                }
            })
            .collect();
        listeners.sort_by(|a, b| a.name.cmp(&b.name));
        ConnectionSnapshot {
            ips,
            listeners,
            broker_rate: st.broker.as_ref().map_or(0.0, |b| b.peek(spec, now).rate()),
            max_connection_creation_rate: st.limits.max_connection_creation_rate,
            connections: st.total,
            accepted: self.totals.accepted.load(Ordering::Relaxed),
            throttled: self.totals.throttled.load(Ordering::Relaxed),
            refused: self.totals.refused.load(Ordering::Relaxed),
            ip_sensors: st.sensors.len(),
            overflowed: st.overflowed,
            expired: self.totals.expired.load(Ordering::Relaxed),
        }
    }
}
