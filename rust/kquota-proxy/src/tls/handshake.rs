//! Handshakes with a deadline and their failures sorted by cause, so that the data plane closes
//! only the affected connection, counts the cause in its metrics and logs it once per cause
//! (the bad inputs: plaintext on a TLS port, a handshake that never finishes, untrusted,
//! expired or not-yet-valid certificates, a broker certificate for another host).

use rustls::pki_types::ServerName;
use rustls::{CertificateError, Error};
use std::fmt;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

use super::TlsConfigError;

/// How long a peer has to finish its handshake before the connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a handshake failed; `cause()` is a stable label for metrics and log rate limiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not finished within the deadline.
    Timeout,
    /// The peer does not speak TLS (a plaintext Kafka client on a TLS port).
    NotTls,
    /// A client certificate is required and none was sent.
    NoCertificate,
    /// The certificate is not signed by a trusted CA (or its signature is bad).
    UntrustedCertificate,
    /// The certificate has expired.
    ExpiredCertificate,
    /// The certificate is not valid yet.
    NotYetValidCertificate,
    /// The broker's certificate is not valid for the host it was reached by.
    NameMismatch,
    /// The peer refused us with a TLS alert (e.g. it does not trust our certificate).
    AlertReceived(String),
    /// The peer closed the connection during the handshake.
    Closed,
    /// The client certificate has an empty subject: no principal to give it.
    NoSubject,
    /// No `ssl.principal.mapping.rules` rule applies to the client certificate's subject.
    NoMatchingRule(String),
    /// Anything else (the text of the error).
    Other(String),
}

impl HandshakeFailure {
    /// A stable label: `timeout`, `not_tls`, `no_certificate`, `untrusted_certificate`,
    /// `expired_certificate`, `not_yet_valid_certificate`, `name_mismatch`, `alert_received`,
    /// `closed`, `no_subject`, `no_matching_rule`, `other`.
    pub fn cause(&self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::NotTls => "not_tls",
            HandshakeFailure::NoCertificate => "no_certificate",
            HandshakeFailure::UntrustedCertificate => "untrusted_certificate",
            HandshakeFailure::ExpiredCertificate => "expired_certificate",
            HandshakeFailure::NotYetValidCertificate => "not_yet_valid_certificate",
            HandshakeFailure::NameMismatch => "name_mismatch",
            HandshakeFailure::AlertReceived(_) => "alert_received",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::NoSubject => "no_subject",
            HandshakeFailure::NoMatchingRule(_) => "no_matching_rule",
            HandshakeFailure::Other(_) => "other",
        }
    }

    /// Every cause label, in a fixed order (`cause_index`).
    pub const CAUSES: [&'static str; 12] = [
        "timeout",
        "not_tls",
        "no_certificate",
        "untrusted_certificate",
        "expired_certificate",
        "not_yet_valid_certificate",
        "name_mismatch",
        "alert_received",
        "closed",
        "no_subject",
        "no_matching_rule",
        "other",
    ];

    /// The position of `cause()` in `CAUSES`.
    pub fn cause_index(&self) -> usize {
        let cause = self.cause();
        Self::CAUSES
            .iter()
            .position(|c| *c == cause)
            .unwrap_or(Self::CAUSES.len() - 1)
    }

    /// The failure of a tokio-rustls handshake error.
    pub fn from_io(err: &io::Error) -> HandshakeFailure {
        if let Some(tls) = err.get_ref().and_then(|e| e.downcast_ref::<Error>()) {
            return HandshakeFailure::from_rustls(tls);
        }
        match err.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => HandshakeFailure::Closed,
            _ => HandshakeFailure::Other(err.to_string()),
        }
    }

    /// The failure of a rustls error.
    pub fn from_rustls(err: &Error) -> HandshakeFailure {
        match err {
            Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => HandshakeFailure::NotTls,
            Error::NoCertificatesPresented => HandshakeFailure::NoCertificate,
            Error::InvalidCertificate(cert) => match cert {
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    HandshakeFailure::ExpiredCertificate
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    HandshakeFailure::NotYetValidCertificate
                }
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    HandshakeFailure::NameMismatch
                }
                CertificateError::UnknownIssuer
                | CertificateError::BadSignature
                | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
                | CertificateError::InvalidPurpose
                | CertificateError::InvalidPurposeContext { .. } => HandshakeFailure::UntrustedCertificate,
                other => HandshakeFailure::Other(format!("{other:?}")),
            },
            Error::AlertReceived(alert) => HandshakeFailure::AlertReceived(format!("{alert:?}")),
            other => HandshakeFailure::Other(other.to_string()),
        }
    }
}

impl fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeFailure::AlertReceived(alert) => write!(f, "TLS alert from the peer: {alert}"),
            HandshakeFailure::Other(text) => write!(f, "TLS handshake failed: {text}"),
            HandshakeFailure::NoMatchingRule(text) => write!(f, "ssl.principal.mapping.rules: {text}"),
            cause => write!(f, "TLS handshake failed: {}", cause.cause().replace('_', " ")),
        }
    }
}

impl std::error::Error for HandshakeFailure {}

/// A handshake future bounded by `deadline`, its failure sorted by cause.
async fn within<T>(
    deadline: Duration,
    handshake: impl std::future::Future<Output = io::Result<T>>,
) -> Result<T, HandshakeFailure> {
    match tokio::time::timeout(deadline, handshake).await {
        Err(_) => Err(HandshakeFailure::Timeout),
        Ok(Err(e)) => Err(HandshakeFailure::from_io(&e)),
        Ok(Ok(stream)) => Ok(stream),
    }
}

/// Accepts a TLS client within `deadline`.
pub async fn accept<IO>(
    acceptor: &TlsAcceptor,
    io: IO,
    deadline: Duration,
) -> Result<server::TlsStream<IO>, HandshakeFailure>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    within(deadline, acceptor.accept(io)).await
}

/// Connects to a TLS broker named `name` within `deadline`.
pub async fn connect<IO>(
    connector: &TlsConnector,
    name: ServerName<'static>,
    io: IO,
    deadline: Duration,
) -> Result<client::TlsStream<IO>, HandshakeFailure>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    within(deadline, connector.connect(name, io)).await
}

/// The name a broker's certificate is checked against (and sent as SNI when it is a host name):
/// the host the broker is reached by (`--bootstrap-server`, or as the cluster advertises it).
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsConfigError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| {
        TlsConfigError::new(
            "bootstrap.servers",
            None,
            format!("{host:?} is not a host name: {e}"),
        )
    })
}
