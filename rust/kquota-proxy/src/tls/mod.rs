//! TLS for both sides of the proxy, built from Kafka's own property names so that an operator's
//! existing broker and client files work: `rustls` with the `ring` provider.
//!
//! - settings.rs: the properties, parsed into types;
//! - material.rs: keystores and truststores (PEM files, inline PEM, PKCS12; JKS refused);
//! - pem_export.rs: a client's material as PEM, for kquota's clients that are not rustls;
//! - policy.rs: `ssl.enabled.protocols`, `ssl.cipher.suites` -> a crypto provider;
//! - server.rs / client.rs: `rustls::ServerConfig` for a listener, `rustls::ClientConfig` for
//!   the upstream connections;
//! - reload.rs: configurations rebuilt when their files change;
//! - handshake.rs: handshakes with a deadline, failures sorted by cause;
//! - failures.rs: failures counted by cause, logged once per cause per interval;
//! - sides.rs: ListenerTls (stream + principal per client) and UpstreamTls, for the data plane;
//! - security.rs: both sides together for one connection (`Security`): the client's handshake
//!   under its bound and deadline, the broker's, failures counted and logged.
//!
//! Every error names the Kafka property at fault (and the file), so that a bad configuration is
//! one line at start-up.

mod client;
mod failures;
mod handshake;
mod material;
mod pem_export;
mod policy;
mod reload;
mod security;
mod server;
mod settings;
mod sides;

pub use client::client_config;
pub use failures::FailureLog;
pub use handshake::{accept, connect, server_name, HandshakeFailure, HANDSHAKE_TIMEOUT};
pub use pem_export::{client_pem, ClientPem};
pub use reload::{ReloadStats, Reloading, DEFAULT_RELOAD_CHECK};
/// Re-exported so that callers name certificates without depending on rustls themselves.
pub use rustls::pki_types::CertificateDer;
pub use security::{Security, FAILURE_LOG_INTERVAL};
pub use server::server_config;
pub use settings::{
    ClientAuth, KeystoreSettings, ListenerTlsSettings, Properties, ProtocolSettings, TruststoreSettings,
    UpstreamTlsSettings,
};
pub use sides::{ListenerTls, UpstreamTls};

use std::fmt;
use std::path::{Path, PathBuf};

/// A TLS configuration that cannot be used: the Kafka property at fault, the file if one is
/// involved, and what is wrong. Displayed as one line: `property: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfigError {
    /// The Kafka property name (`ssl.keystore.password`).
    pub property: String,
    /// The file concerned, if any.
    pub file: Option<PathBuf>,
    /// What is wrong (names the file when there is one).
    pub message: String,
}

impl TlsConfigError {
    /// An error for `property`; `file` is appended to the message when given.
    pub fn new(property: &str, file: Option<&Path>, message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        if let Some(file) = file {
            message = format!("{message} ({})", file.display());
        }
        TlsConfigError {
            property: property.to_string(),
            file: file.map(Path::to_path_buf),
            message,
        }
    }
}

impl fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.property, self.message)
    }
}

impl std::error::Error for TlsConfigError {}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_clients;
#[cfg(test)]
mod tests_handshake;
#[cfg(test)]
mod tests_pem_export;
#[cfg(test)]
mod tests_support;
