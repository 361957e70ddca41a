//! The connection-creation rate quotas of KIP-612: the `connection_creation_rate` of `ip`
//! entities (a default and per-address overrides) and the rule a connection-rate sensor applies,
//! as Kafka's `ConnectionQuotas` (SocketServer.scala) does it.
//!
//! A connection-rate sensor is a `Rate` over the quota window (`quota.window.num` x
//! `quota.window.size.seconds`) with a strict upper-bound quota: one connection is recorded, and
//! if the rate then exceeds the bound the delay is Kafka's `QuotaUtils.boundedThrottleTime`, the
//! usual `(rate - bound) / bound * W` capped at one sample window (`maxThrottleTimeMs`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::connection_limits::UNLIMITED;
use crate::error::QuotaError;
use crate::rate::RateSensor;
use crate::throttle::throttle_time_ms;
use crate::types::WindowSpec;

/// The config key of `ip` entities (`QuotaConfig.IP_CONNECTION_RATE_OVERRIDE_CONFIG`).
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// Checks a `connection_creation_rate` value as Kafka's controller (`validateQuotaKeyValue` for
/// an INT key): greater than 0, at most `Int.MaxValue`, whole up to 1e-6. `entity` names the
/// entity in the error.
pub fn validate_connection_rate(entity: &str, value: f64) -> Result<(), QuotaError> {
    let bad = |reason: String| QuotaError::InvalidConfig {
        entity: entity.to_owned(),
        key: CONNECTION_CREATION_RATE.to_owned(),
        reason,
    };
    if !value.is_finite() {
        return Err(bad(format!("must be a finite number, got {value}")));
    }
    if value <= 0.0 {
        return Err(bad(format!(
            "Quota {CONNECTION_CREATION_RATE} must be greater than 0, got {value}"
        )));
    }
    if value > i32::MAX as f64 {
        return Err(bad(format!(
            "Proposed value for {CONNECTION_CREATION_RATE} is too large for an INT, got {value}"
        )));
    }
    if (value % 1.0).abs() > 1e-6 {
        return Err(bad(format!(
            "{CONNECTION_CREATION_RATE} cannot be a fractional value, got {value}"
        )));
    }
    Ok(())
}

/// The quota the broker enforces for a configured value: Kafka hands `ConnectionQuotas` the
/// value's `toInt` (truncated).
#[inline]
pub fn enforced_rate(value: f64) -> i32 {
    value as i32
}

/// `connection_creation_rate` of the `ip` entities: `ips/<default>` and `ips/<ip>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IpRateConfig {
    /// `ips/<default>`; `None` is Kafka's `IP_CONNECTION_RATE_DEFAULT` (unlimited).
    pub default: Option<f64>,
    /// `ips/<ip>`, keyed by canonical address.
    pub ips: BTreeMap<IpAddr, f64>,
}

impl IpRateConfig {
    /// Kafka's `connectionRateForIp`: the address's own quota, else the default's, else
    /// unlimited (`Int.MaxValue`, which turns the IP quota off).
    #[inline]
    pub fn rate_for(&self, ip: &IpAddr) -> i32 {
        match self.ips.get(ip).or(self.default.as_ref()) {
            Some(v) => enforced_rate(*v),
            None => UNLIMITED,
        }
    }

    /// Sets (`Some`) or removes (`None`) the quota of one address, or of the default (`ip`
    /// `None`).
    pub fn set(&mut self, ip: Option<IpAddr>, value: Option<f64>) {
        match (ip, value) {
            (None, v) => self.default = v,
            (Some(ip), Some(v)) => {
                self.ips.insert(ip, v);
            }
            (Some(ip), None) => {
                self.ips.remove(&ip);
            }
        }
    }
}

/// Records one connection into a connection-rate sensor at `now` and returns the delay
/// (Kafka's `recordAndGetThrottleTimeMs`): 0 when the rate stays within `bound`, else
/// `boundedThrottleTime`. The connection stays recorded either way; the caller un-records it
/// where Kafka does.
#[inline]
pub(crate) fn record_and_throttle(
    sensor: &RateSensor,
    spec: &WindowSpec,
    bound: i32,
    max_throttle_ms: i32,
    now: i64,
) -> i32 {
    let m = sensor.record_and_measure(spec, 1.0, now);
    throttle_time_ms(&m, bound as f64).min(max_throttle_ms)
}

/// Takes back one recorded connection (Kafka's `sensor.record(-1.0, timeMs, false)`).
#[inline]
pub(crate) fn unrecord(sensor: &RateSensor, spec: &WindowSpec, now: i64) {
    sensor.record(spec, -1.0, now);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_as_kafkas_controller_does() {
        assert!(validate_connection_rate("ip=<default>", 100.0).is_ok());
        assert!(validate_connection_rate("ip=<default>", 2_147_483_647.0).is_ok());
        let msg = |v: f64| {
            validate_connection_rate("ip=\"10.0.0.1\"", v)
                .unwrap_err()
                .to_string()
        };
        assert!(msg(0.0).contains("must be greater than 0"));
        assert!(msg(-1.0).contains("must be greater than 0"));
        assert!(msg(12.5).contains("cannot be a fractional value"));
        assert!(msg(2_147_483_648.0).contains("too large for an INT"));
        assert!(msg(f64::NAN).contains("finite"));
        assert!(msg(1.5).contains("ip=\"10.0.0.1\""));
    }

    #[test]
    fn an_address_overrides_the_default() {
        let mut c = IpRateConfig::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(c.rate_for(&a), UNLIMITED);
        c.set(None, Some(20.0));
        c.set(Some(a), Some(5.0));
        assert_eq!((c.rate_for(&a), c.rate_for(&b)), (5, 20));
        c.set(Some(a), None);
        assert_eq!(c.rate_for(&a), 20);
        c.set(None, None);
        assert_eq!(c.rate_for(&b), UNLIMITED);
    }

    #[test]
    fn throttle_is_bounded_by_one_sample_window() {
        // 11 samples of 1 s, bound 2/s: the 21st connection at t=0 is over (21/10 s = 2.1/s),
        // throttled (2.1 - 2) / 2 * 10000 = 500 ms.
        let spec = WindowSpec::default();
        let s = RateSensor::new(&spec, 0);
        let delays: Vec<i32> = (0..21)
            .map(|_| record_and_throttle(&s, &spec, 2, 1000, 0))
            .collect();
        assert!(delays[..20].iter().all(|d| *d == 0));
        assert_eq!(delays[20], 500);
        // Far over the bound the delay is capped at one window.
        for _ in 0..100 {
            record_and_throttle(&s, &spec, 2, 1000, 0);
        }
        assert_eq!(record_and_throttle(&s, &spec, 2, 1000, 0), 1000);
        unrecord(&s, &spec, 0);
    }
}
