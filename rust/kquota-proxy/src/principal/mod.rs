//! The user a TLS client is, as Kafka's DefaultKafkaPrincipalBuilder decides it for an SSL
//! listener: the client certificate's subject in RFC 2253 form (dn.rs) mapped by
//! `ssl.principal.mapping.rules` (mapper.rs); no certificate: `ANONYMOUS`.

mod dn;
mod mapper;

pub use dn::{name_rfc2253, subject_rfc2253, SubjectError};
pub use mapper::{InvalidRule, NoMatchingRule, SslPrincipalMapper, DEFAULT_RULES};

/// Kafka's KafkaPrincipal.ANONYMOUS name: a TLS client that sent no certificate.
pub const ANONYMOUS: &str = "ANONYMOUS";

/// Why a client certificate gives no principal: the connection is refused, as on a Kafka broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalError {
    /// The certificate does not parse.
    BadCertificate(String),
    /// The certificate has an empty subject (nothing to map, nothing to name in the logs).
    NoSubject,
    /// No `ssl.principal.mapping.rules` rule applies.
    NoMatchingRule(String),
}

impl std::fmt::Display for PrincipalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrincipalError::BadCertificate(why) => write!(f, "client certificate: {why}"),
            PrincipalError::NoSubject => f.write_str("client certificate has an empty subject"),
            PrincipalError::NoMatchingRule(why) => write!(f, "ssl.principal.mapping.rules: {why}"),
        }
    }
}

impl std::error::Error for PrincipalError {}

/// The principal name of a TLS peer from its certificate chain as rustls reports it
/// (`peer_certificates()`: the end-entity certificate first); `ANONYMOUS` without one.
pub fn tls_principal(
    peer_certificates: Option<&[rustls::pki_types::CertificateDer<'_>]>,
    mapper: &SslPrincipalMapper,
) -> Result<String, PrincipalError> {
    let Some(leaf) = peer_certificates.and_then(|chain| chain.first()) else {
        return Ok(ANONYMOUS.to_string());
    };
    let dn = subject_rfc2253(leaf.as_ref()).map_err(|e| PrincipalError::BadCertificate(e.to_string()))?;
    if dn.is_empty() {
        return Err(PrincipalError::NoSubject);
    }
    mapper.name(&dn).map_err(|e| PrincipalError::NoMatchingRule(e.0))
}
