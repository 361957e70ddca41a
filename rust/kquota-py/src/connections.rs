//! `kquota._kquota.ConnectionQuotas`: the kernel's connection quotas (KIP-612, `quota-core`'s
//! `connection_quotas`) as a Python object; `QuotaManager` holds one and exposes
//! `record_connection` and friends. Argument conversion only.

use std::net::IpAddr;
use std::sync::Arc;

use pyo3::prelude::*;
use std::borrow::Cow;

use pyo3::types::{PyDict, PyList, PyString};
use quota_core::ip_address::{canonical_ip_text, parse_ip};
use quota_core::{Admission, ConnectionLimits, QuotaError, QuotaKernel as CoreKernel};

use crate::errors::{config_error, invalid_argument, PyQuotaResult, TooManyConnectionsError};
use crate::numeric_args::{ms, Int, Real};

/// A text argument; a lone surrogate (no UTF-8 form, so no client could send it) is a
/// `QuotaValueError` naming the argument, never a `UnicodeEncodeError`.
fn text<'a>(s: &'a Bound<'_, PyString>, what: &str) -> PyQuotaResult<Cow<'a, str>> {
    s.to_cow()
        .map_err(|_| invalid_argument(format!("{what} holds a lone surrogate (it has no UTF-8 form)")))
}

/// A listener argument (`None`: no listener, only the broker-wide limits).
fn listener_name<'a>(l: Option<&'a Bound<'_, PyString>>) -> PyQuotaResult<Cow<'a, str>> {
    Ok(match l {
        Some(l) => text(l, "the listener")?,
        None => Cow::Borrowed(""),
    })
}

/// An address argument: an IP literal, canonicalized (`QuotaValueError` otherwise).
fn address(ip: &Bound<'_, PyString>) -> PyQuotaResult<IpAddr> {
    parse_ip(&text(ip, "the address")?).map_err(invalid_argument)
}

/// The connection quotas of one kernel (Kafka's ``ConnectionQuotas``).
#[pyclass(frozen, module = "kquota._kquota", name = "ConnectionQuotas")]
pub struct PyConnectionQuotas {
    pub(crate) kernel: Arc<CoreKernel>,
}

impl PyConnectionQuotas {
    /// A closed manager records nothing more, connections included.
    fn check_open(&self) -> PyQuotaResult<()> {
        if self.kernel.is_closed() {
            return Err(QuotaError::Closed.into());
        }
        Ok(())
    }
}

#[pymethods]
impl PyConnectionQuotas {
    /// Records a new connection on ``listener`` into the broker-wide and listener rates and
    /// returns the delay (ms) before serving it (Kafka's acceptor blocks that long).
    #[pyo3(signature = (listener=None, now_ms=None))]
    fn record_accept(
        &self,
        listener: Option<&Bound<'_, PyString>>,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<i32> {
        self.check_open()?;
        Ok(self
            .kernel
            .connections
            .record_accept(&listener_name(listener)?, ms(now_ms))?)
    }

    /// Whether ``listener`` and the broker are under their ``max.connections``.
    #[pyo3(signature = (listener=None))]
    fn slot_available(&self, listener: Option<&Bound<'_, PyString>>) -> PyQuotaResult<bool> {
        Ok(self.kernel.connections.slot_available(&listener_name(listener)?))
    }

    /// The IP rate and count of a connection from ``ip``: 0 if counted, else the throttle (ms)
    /// after which to close it; raises ``TooManyConnectionsError`` over ``max.connections.per.ip``.
    #[pyo3(signature = (ip, listener=None, now_ms=None))]
    fn admit(
        &self,
        ip: &Bound<'_, PyString>,
        listener: Option<&Bound<'_, PyString>>,
        now_ms: Option<Int>,
    ) -> PyQuotaResult<i32> {
        self.check_open()?;
        let addr = address(ip)?;
        match self
            .kernel
            .connections
            .admit(addr, &listener_name(listener)?, ms(now_ms))?
        {
            Admission::Accepted => Ok(0),
            Admission::Throttled { throttle_ms } => Ok(throttle_ms),
            Admission::TooManyConnections { max } => Python::attach(|py| {
                let err = TooManyConnectionsError::new_err(format!(
                    "Too many connections from {addr} (maximum = {max})"
                ));
                err.value(py).setattr("ip", addr.to_string())?;
                err.value(py).setattr("max_connections", max)?;
                Err(err.into())
            }),
        }
    }

    /// Counts down a connection counted by ``admit``; False if ``ip`` had none.
    #[pyo3(signature = (ip, listener=None))]
    fn release(
        &self,
        ip: &Bound<'_, PyString>,
        listener: Option<&Bound<'_, PyString>>,
    ) -> PyQuotaResult<bool> {
        Ok(self
            .kernel
            .connections
            .release(address(ip)?, &listener_name(listener)?))
    }

    /// Connections counted for ``ip`` now.
    fn count(&self, ip: &Bound<'_, PyString>) -> PyQuotaResult<u32> {
        Ok(self.kernel.connections.count(&address(ip)?))
    }

    /// Connections counted now, all addresses.
    fn total(&self) -> i64 {
        self.kernel.connections.total()
    }

    /// Replaces the broker properties (``{key: str or int}``; other keys ignored).
    fn set_limits(&self, props: Vec<(String, String)>) -> PyQuotaResult<()> {
        let limits = ConnectionLimits::from_props(props.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        self.kernel.connections.set_limits(limits);
        Ok(())
    }

    /// The limits in force as broker properties (unlimited ones left out).
    fn limits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let l = self.kernel.connections.limits();
        let out = PyDict::new(py);
        let unlimited = quota_core::connection_limits::UNLIMITED;
        for (key, v) in [
            ("max.connection.creation.rate", l.max_connection_creation_rate),
            ("max.connections", l.max_connections),
            ("max.connections.per.ip", l.max_connections_per_ip),
        ] {
            if v != unlimited {
                out.set_item(key, v)?;
            }
        }
        if !l.max_connections_per_ip_overrides.is_empty() {
            let mut pairs: Vec<_> = l.max_connections_per_ip_overrides.iter().collect();
            pairs.sort();
            let text: Vec<String> = pairs.iter().map(|(ip, n)| format!("{ip}:{n}")).collect();
            out.set_item("max.connections.per.ip.overrides", text.join(","))?;
        }
        for (name, ll) in &l.listeners {
            if ll.max_connections != unlimited {
                out.set_item(
                    format!("listener.name.{}.max.connections", name.to_lowercase()),
                    ll.max_connections,
                )?;
            }
            if ll.max_connection_creation_rate != unlimited {
                out.set_item(
                    format!(
                        "listener.name.{}.max.connection.creation.rate",
                        name.to_lowercase()
                    ),
                    ll.max_connection_creation_rate,
                )?;
            }
        }
        Ok(out)
    }

    /// Sets (a number) or removes (``None``) ``connection_creation_rate`` of ``ip`` (``None``:
    /// ``ips/<default>``). The value is checked as an alter checks it.
    #[pyo3(signature = (ip, value))]
    fn set_ip_rate(&self, ip: Option<Bound<'_, PyString>>, value: Option<Real>) -> PyQuotaResult<()> {
        let addr = ip.as_ref().map(address).transpose()?;
        if let Some(v) = value {
            let entity = match addr {
                Some(a) => format!("ip=\"{a}\""),
                None => "ip=<default>".to_owned(),
            };
            quota_core::connection_rate::validate_connection_rate(&entity, v.0)?;
        }
        self.kernel.connections.set_ip_rate(addr, value.map(|v| v.0));
        Ok(())
    }

    /// ``[(ip or None, value)]``: the configured ``connection_creation_rate`` values.
    fn ip_rates(&self) -> Vec<(Option<String>, f64)> {
        let rates = self.kernel.connections.ip_rates();
        let mut out: Vec<(Option<String>, f64)> = rates.default.map(|v| (None, v)).into_iter().collect();
        out.extend(rates.ips.iter().map(|(ip, v)| (Some(ip.to_string()), *v)));
        out
    }

    /// Kafka's ``connectionRateForIp`` (2147483647: unlimited).
    fn connection_rate_for_ip(&self, ip: &Bound<'_, PyString>) -> PyQuotaResult<i32> {
        Ok(self.kernel.connections.connection_rate_for_ip(&address(ip)?))
    }

    /// Removes idle address sensors; returns how many.
    #[pyo3(signature = (now_ms=None))]
    fn expire(&self, now_ms: Option<Int>) -> usize {
        self.kernel.connections.expire(ms(now_ms))
    }

    /// ``(totals, ips, listeners)`` for metrics: ``totals`` a dict, ``ips`` rows ``(ip or None,
    /// rate or None, quota or None, throttled, connections)``, ``listeners`` rows ``(name, rate,
    /// max rate, connections, max connections, throttle avg, ip throttle avg)``.
    #[pyo3(signature = (now_ms=None))]
    fn snapshot<'py>(&self, py: Python<'py>, now_ms: Option<Int>) -> PyResult<Bound<'py, PyTuple3>> {
        let s = self.kernel.connections.snapshot(ms(now_ms));
        let totals = PyDict::new(py);
        totals.set_item("broker_rate", s.broker_rate)?;
        totals.set_item("max_connection_creation_rate", s.max_connection_creation_rate)?;
        totals.set_item("connections", s.connections)?;
        totals.set_item("accepted", s.accepted)?;
        totals.set_item("throttled", s.throttled)?;
        totals.set_item("refused", s.refused)?;
        totals.set_item("ip_sensors", s.ip_sensors)?;
        totals.set_item("overflowed", s.overflowed)?;
        totals.set_item("expired", s.expired)?;
        let ips = PyList::empty(py);
        for r in &s.ips {
            ips.append((
                r.ip.map(|i| i.to_string()),
                r.rate,
                r.quota,
                r.throttled,
                r.connections,
            ))?;
        }
        let listeners = PyList::empty(py);
        for l in &s.listeners {
            listeners.append((
                l.name.clone(),
                l.rate,
                l.max_connection_creation_rate,
                l.connections,
                l.max_connections,
                l.throttle_time_avg,
                l.ip_throttle_time_avg,
            ))?;
        }
        pyo3::types::PyTuple::new(py, [totals.into_any(), ips.into_any(), listeners.into_any()])
    }
}

type PyTuple3 = pyo3::types::PyTuple;

/// The canonical text of an IP literal (``0:0::1`` -> ``::1``); ``QuotaConfigError`` (Kafka's
/// "... is not a valid IP") for anything else.
#[pyfunction]
pub fn canonical_ip(name: &Bound<'_, PyString>) -> PyQuotaResult<String> {
    let name = name
        .to_cow()
        .map_err(|_| config_error("the address holds a lone surrogate (it has no UTF-8 form)"))?;
    canonical_ip_text(&name).map_err(config_error)
}

/// Checks a ``connection_creation_rate`` value as Kafka's controller does (``QuotaConfigError``
/// naming ``entity`` otherwise).
#[pyfunction]
pub fn validate_connection_rate(entity: &str, value: Real) -> PyQuotaResult<()> {
    Ok(quota_core::connection_rate::validate_connection_rate(
        entity, value.0,
    )?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyConnectionQuotas>()?;
    m.add_function(wrap_pyfunction!(canonical_ip, m)?)?;
    m.add_function(wrap_pyfunction!(validate_connection_rate, m)?)?;
    m.add("CONNECTION_CREATION_RATE", quota_core::CONNECTION_CREATION_RATE)?;
    Ok(())
}
