//! The broker properties that limit connections (KIP-612 and the older counts), parsed and
//! checked as Kafka's `SocketServerConfigs` and `KafkaConfig` do: `max.connection.creation.rate`,
//! `max.connections`, `max.connections.per.ip`, `max.connections.per.ip.overrides` and the
//! per-listener `listener.name.<listener>.max.connections` /
//! `listener.name.<listener>.max.connection.creation.rate`. Every one is an INT at least 0 whose
//! default, `Int.MaxValue`, means unlimited.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use crate::error::QuotaError;
use crate::ip_address::parse_ip;

/// Kafka's default for every connection limit and for `connection_creation_rate`:
/// `Integer.MAX_VALUE`, which turns the limit off.
pub const UNLIMITED: i32 = i32::MAX;

pub const MAX_CONNECTION_CREATION_RATE: &str = "max.connection.creation.rate";
pub const MAX_CONNECTIONS: &str = "max.connections";
pub const MAX_CONNECTIONS_PER_IP: &str = "max.connections.per.ip";
pub const MAX_CONNECTIONS_PER_IP_OVERRIDES: &str = "max.connections.per.ip.overrides";
/// Prefix of the per-listener forms (`listener.name.<listener>.<key>`).
pub const LISTENER_PREFIX: &str = "listener.name.";

/// One listener's own limits (`ListenerConnectionQuota`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    pub max_connections: i32,
    pub max_connection_creation_rate: i32,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_connections: UNLIMITED,
            max_connection_creation_rate: UNLIMITED,
        }
    }
}

/// The connection limits of one broker (or proxy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connection_creation_rate: i32,
    pub max_connections: i32,
    pub max_connections_per_ip: i32,
    pub max_connections_per_ip_overrides: HashMap<IpAddr, i32>,
    pub listeners: BTreeMap<String, ListenerLimits>,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connection_creation_rate: UNLIMITED,
            max_connections: UNLIMITED,
            max_connections_per_ip: UNLIMITED,
            max_connections_per_ip_overrides: HashMap::new(),
            listeners: BTreeMap::new(),
        }
    }
}

fn invalid(key: &str, value: &str, reason: &str) -> QuotaError {
    QuotaError::InvalidArgument(format!("Invalid value {value} for configuration {key}: {reason}"))
}

/// ConfigDef's INT with `atLeast(0)`: the trimmed text as an `i32` of at least 0.
fn parse_count(key: &str, value: &str) -> Result<i32, QuotaError> {
    let n: i32 = value
        .trim()
        .parse()
        .map_err(|_| invalid(key, value, "Not a number of type INT"))?;
    if n < 0 {
        return Err(invalid(key, value, "Value must be at least 0"));
    }
    Ok(n)
}

/// `max.connections.per.ip.overrides`: `host:count` pairs separated by commas (Kafka's
/// `Csv.parseCsvMap`, split at the last colon so that IPv6 addresses work). Hosts must be IP
/// literals (see `ip_address`); a count is an INT of at least 0.
fn parse_overrides(value: &str) -> Result<HashMap<IpAddr, i32>, QuotaError> {
    let key = MAX_CONNECTIONS_PER_IP_OVERRIDES;
    let mut out = HashMap::new();
    if value.trim().is_empty() {
        return Ok(out);
    }
    for entry in value.split(',') {
        let entry = entry.trim();
        let (host, count) = entry
            .rsplit_once(':')
            .ok_or_else(|| invalid(key, value, &format!("{entry:?} is not host:count")))?;
        let ip = parse_ip(host.trim())
            .map_err(|e| invalid(key, value, &format!("contains invalid addresses: {e}")))?;
        let count = parse_count(key, count)?;
        if out.insert(ip, count).is_some() {
            return Err(invalid(key, value, &format!("{ip} appears more than once")));
        }
    }
    Ok(out)
}

impl ConnectionLimits {
    /// Limits from broker properties; keys that are not connection limits are ignored (a broker
    /// config holds many others). Nothing is half-applied: the first bad value is an error.
    pub fn from_props<'a, I>(props: I) -> Result<Self, QuotaError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut limits = ConnectionLimits::default();
        for (key, value) in props {
            match key {
                MAX_CONNECTION_CREATION_RATE => {
                    limits.max_connection_creation_rate = parse_count(key, value)?
                }
                MAX_CONNECTIONS => limits.max_connections = parse_count(key, value)?,
                MAX_CONNECTIONS_PER_IP => limits.max_connections_per_ip = parse_count(key, value)?,
                MAX_CONNECTIONS_PER_IP_OVERRIDES => {
                    limits.max_connections_per_ip_overrides = parse_overrides(value)?
                }
                _ => {
                    let Some(rest) = key.strip_prefix(LISTENER_PREFIX) else {
                        continue;
                    };
                    let (listener, setting) =
                        if let Some(l) = rest.strip_suffix(".max.connection.creation.rate") {
                            (l, MAX_CONNECTION_CREATION_RATE)
                        } else if let Some(l) = rest.strip_suffix(".max.connections") {
                            (l, MAX_CONNECTIONS)
                        } else {
                            continue;
                        };
                    if listener.is_empty() {
                        return Err(invalid(key, value, "the listener name is empty"));
                    }
                    let n = parse_count(key, value)?;
                    let entry = limits.listeners.entry(listener.to_ascii_uppercase()).or_default();
                    if setting == MAX_CONNECTIONS {
                        entry.max_connections = n;
                    } else {
                        entry.max_connection_creation_rate = n;
                    }
                }
            }
        }
        // KafkaConfig's rule: zero per IP only makes sense with overrides to let some in.
        if limits.max_connections_per_ip == 0 && limits.max_connections_per_ip_overrides.is_empty() {
            return Err(QuotaError::InvalidArgument(format!(
                "{MAX_CONNECTIONS_PER_IP} can be set to zero only if {MAX_CONNECTIONS_PER_IP_OVERRIDES} property is set."
            )));
        }
        Ok(limits)
    }

    /// `max.connections.per.ip.overrides` for `ip`, else `max.connections.per.ip`.
    #[inline]
    pub fn max_for_ip(&self, ip: &IpAddr) -> i32 {
        *self
            .max_connections_per_ip_overrides
            .get(ip)
            .unwrap_or(&self.max_connections_per_ip)
    }

    /// A listener's limits (unlimited for a listener not configured). Listener names are
    /// case-insensitive, as Kafka's `ListenerName.normalised` makes them; a scan, not a lookup,
    /// so that no name is upper-cased (allocated) per connection.
    pub fn listener(&self, name: &str) -> ListenerLimits {
        self.listeners
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, l)| *l)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_properties_parse_as_kafka() {
        let l = ConnectionLimits::from_props([
            ("max.connection.creation.rate", "30"),
            ("max.connections.per.ip", " 5 "),
            ("max.connections.per.ip.overrides", "127.0.0.2:10, ::1:3"),
            ("listener.name.external.max.connections", "100"),
            ("listener.name.EXTERNAL.max.connection.creation.rate", "7"),
            ("num.network.threads", "3"),
        ])
        .unwrap();
        assert_eq!(l.max_connection_creation_rate, 30);
        assert_eq!(l.max_connections, UNLIMITED);
        assert_eq!(l.max_for_ip(&"127.0.0.2".parse().unwrap()), 10);
        assert_eq!(l.max_for_ip(&"::1".parse().unwrap()), 3);
        assert_eq!(l.max_for_ip(&"127.0.0.1".parse().unwrap()), 5);
        assert_eq!(
            l.listener("EXTERNAL"),
            ListenerLimits {
                max_connections: 100,
                max_connection_creation_rate: 7
            }
        );
        assert_eq!(l.listener("external"), l.listener("EXTERNAL"));
        assert_eq!(l.listener("OTHER"), ListenerLimits::default());
    }

    #[test]
    fn bad_properties_are_refused() {
        let err = |props: &[(&str, &str)]| {
            ConnectionLimits::from_props(props.iter().copied())
                .unwrap_err()
                .to_string()
        };
        assert!(err(&[("max.connections", "-1")]).contains("Value must be at least 0"));
        assert!(err(&[("max.connection.creation.rate", "1.5")]).contains("Not a number of type INT"));
        assert!(err(&[("max.connections", "2147483648")]).contains("INT"));
        assert!(err(&[("max.connections.per.ip", "0")]).contains("can be set to zero only if"));
        assert!(err(&[("max.connections.per.ip.overrides", "myhost:3")]).contains("invalid addresses"));
        assert!(err(&[("max.connections.per.ip.overrides", "10.0.0.1")]).contains("host:count"));
        assert!(
            err(&[("max.connections.per.ip.overrides", "10.0.0.1:1,10.0.0.1:2")]).contains("more than once")
        );
        assert!(err(&[("listener.name..max.connections", "1")]).contains("listener name is empty"));
        // Zero per IP with an override letting one address in is Kafka's allowed form.
        let l = ConnectionLimits::from_props([
            ("max.connections.per.ip", "0"),
            ("max.connections.per.ip.overrides", "10.0.0.1:2"),
        ])
        .unwrap();
        assert_eq!(l.max_for_ip(&"10.0.0.2".parse().unwrap()), 0);
    }
}
