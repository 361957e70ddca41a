//! TLS configuration and TLS principals for the proxy's Python side: the native
//! builders run at start-up so that a bad `--config` / `--broker-config` is refused with one
//! line naming the property and the file; Kafka's principal rules for tests and tools. Every rule
//! lives in `kquota-proxy` (tls/, principal/); this file converts arguments only.

use std::collections::{BTreeMap, HashMap};

use kquota_proxy::principal;
use kquota_proxy::tls::{self, CertificateDer, TlsConfigError, UpstreamTlsSettings};
use pyo3::prelude::*;

use crate::errors::{config_error, invalid_argument, PyQuotaResult};

fn to_map(props: HashMap<String, String>) -> tls::Properties {
    props.into_iter().collect::<BTreeMap<_, _>>()
}

fn watched(files: &[std::path::PathBuf]) -> Vec<String> {
    files.iter().map(|p| p.display().to_string()).collect()
}

fn tls_error(e: TlsConfigError) -> crate::errors::PyQuotaErr {
    config_error(e.to_string())
}

/// Builds a TLS listener's server configuration from Kafka broker properties (``ssl.keystore.*``,
/// ``ssl.truststore.*``, ``ssl.client.auth``, ``ssl.enabled.protocols``, ``ssl.cipher.suites``,
/// ``ssl.principal.mapping.rules``),
/// reading every file, and returns the files that are watched for reloading.
/// ``QuotaConfigError`` ("property: what is wrong (file)") when it cannot be built.
#[pyfunction]
fn check_listener_tls(properties: HashMap<String, String>) -> PyQuotaResult<Vec<String>> {
    let listener = tls::ListenerTls::from_properties(&to_map(properties), tls::DEFAULT_RELOAD_CHECK)
        .map_err(tls_error)?;
    Ok(watched(listener.config().files()))
}

/// Builds the proxy's upstream client configuration from Kafka client properties
/// (``ssl.truststore.*``, ``ssl.keystore.*``, ``ssl.endpoint.identification.algorithm``,
/// ``ssl.enabled.protocols``, ``ssl.cipher.suites``) and returns the watched files.
#[pyfunction]
fn check_upstream_tls(properties: HashMap<String, String>) -> PyQuotaResult<Vec<String>> {
    let settings = UpstreamTlsSettings::from_properties(&to_map(properties)).map_err(tls_error)?;
    let reloading = tls::Reloading::client(settings, tls::DEFAULT_RELOAD_CHECK).map_err(tls_error)?;
    Ok(watched(reloading.files()))
}

/// CA certificates, certificate chain, sealed key (PEM; None: not configured), endpoint identification.
type ClientPemTuple = (Option<String>, Option<String>, Option<String>, bool);

/// The TLS material of Kafka client properties (``ssl.truststore.*``, ``ssl.keystore.*``,
/// ``ssl.endpoint.identification.algorithm``) as PEM, read as the data plane's upstream
/// connections read them (a store's format recognised when its type is not set), for kquota's
/// other clients: ``(CA certificates or None for the system's, certificate chain or None, the
/// key as ENCRYPTED PRIVATE KEY under seal_password or None, endpoint identification)``.
/// ``QuotaConfigError`` ("property: what is wrong (file)") when it cannot be read.
#[pyfunction]
fn client_tls_pem(
    properties: HashMap<String, String>,
    seal_password: &str,
) -> PyQuotaResult<ClientPemTuple> {
    let settings = UpstreamTlsSettings::from_properties(&to_map(properties)).map_err(tls_error)?;
    let pem = tls::client_pem(&settings, seal_password).map_err(tls_error)?;
    Ok((
        pem.ca_certificates,
        pem.certificate_chain,
        pem.sealed_key,
        pem.endpoint_identification,
    ))
}

/// The data plane's TLS on both sides from the ``ssl.*`` properties Python checked at start-up
/// (``None``: that side is plain); at most ``max_handshakes`` client handshakes at once.
pub fn security(
    listener: Option<HashMap<String, String>>,
    upstream: Option<HashMap<String, String>>,
    max_handshakes: usize,
) -> PyQuotaResult<std::sync::Arc<kquota_proxy::tls::Security>> {
    let listener = listener
        .map(|p| tls::ListenerTls::from_properties(&to_map(p), tls::DEFAULT_RELOAD_CHECK))
        .transpose()
        .map_err(tls_error)?;
    let upstream = upstream
        .map(|p| tls::UpstreamTls::from_properties(&to_map(p), tls::DEFAULT_RELOAD_CHECK))
        .transpose()
        .map_err(tls_error)?;
    Ok(std::sync::Arc::new(kquota_proxy::tls::Security::new(
        listener,
        upstream,
        max_handshakes,
    )))
}

/// A DER certificate's subject in RFC 2253 form, exactly as Java's
/// ``X500Principal.getName("RFC2253")`` (and so Kafka) prints it.
#[pyfunction]
fn certificate_subject(der: &[u8]) -> PyQuotaResult<String> {
    principal::subject_rfc2253(der).map_err(|e| invalid_argument(e.to_string()))
}

/// Kafka's ``ssl.principal.mapping.rules`` (SslPrincipalMapper); ``None``: ``DEFAULT``.
#[pyclass(frozen, module = "kquota._kquota", name = "SslPrincipalMapper")]
pub struct PySslPrincipalMapper {
    inner: principal::SslPrincipalMapper,
}

#[pymethods]
impl PySslPrincipalMapper {
    #[new]
    #[pyo3(signature = (rules=None))]
    fn new(rules: Option<&str>) -> PyQuotaResult<Self> {
        let inner = principal::SslPrincipalMapper::from_rules(rules)
            .map_err(|e| config_error(format!("ssl.principal.mapping.rules: {e}")))?;
        Ok(PySslPrincipalMapper { inner })
    }

    /// The principal name of a distinguished name (``QuotaValueError`` when no rule applies).
    fn name(&self, distinguished_name: &str) -> PyQuotaResult<String> {
        self.inner
            .name(distinguished_name)
            .map_err(|e| invalid_argument(e.0))
    }

    /// The user of a TLS client as Kafka's DefaultKafkaPrincipalBuilder: the DER client
    /// certificate's mapped subject, ``ANONYMOUS`` for ``None``; ``QuotaValueError`` for a
    /// certificate without a subject or when no rule applies.
    #[pyo3(signature = (certificate_der))]
    fn principal(&self, certificate_der: Option<&[u8]>) -> PyQuotaResult<String> {
        let chain = certificate_der.map(|der| vec![CertificateDer::from(der.to_vec())]);
        principal::tls_principal(chain.as_deref(), &self.inner).map_err(|e| invalid_argument(e.to_string()))
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        self.inner.to_string()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_listener_tls, m)?)?;
    m.add_function(wrap_pyfunction!(check_upstream_tls, m)?)?;
    m.add_function(wrap_pyfunction!(client_tls_pem, m)?)?;
    m.add_function(wrap_pyfunction!(certificate_subject, m)?)?;
    m.add_class::<PySslPrincipalMapper>()?;
    Ok(())
}
