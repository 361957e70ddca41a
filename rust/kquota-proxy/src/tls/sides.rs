//! The two TLS sides of the proxy as the data plane uses them: a listener that hands back each
//! client's stream and Kafka principal, and the upstream connector. Both follow their files
//! (reload.rs) and finish handshakes within a deadline (handshake.rs).

use super::handshake::{accept, connect, server_name, HandshakeFailure};
use super::reload::Reloading;
use super::settings::{ListenerTlsSettings, Properties, UpstreamTlsSettings};
use super::TlsConfigError;
use crate::principal::{tls_principal, PrincipalError, SslPrincipalMapper};
use rustls::{ClientConfig, ServerConfig};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{client, server};

/// A TLS listener (SSL / SASL_SSL): its configuration and `ssl.principal.mapping.rules`.
pub struct ListenerTls {
    config: Reloading<ServerConfig>,
    mapper: SslPrincipalMapper,
}

impl ListenerTls {
    /// From the listener's broker properties (`ssl.*` and `ssl.principal.mapping.rules`), files
    /// checked for changes at most every `reload_check`.
    pub fn from_properties(props: &Properties, reload_check: Duration) -> Result<Self, TlsConfigError> {
        let rules = props.get("ssl.principal.mapping.rules").map(String::as_str);
        let mapper = SslPrincipalMapper::from_rules(rules)
            .map_err(|e| TlsConfigError::new("ssl.principal.mapping.rules", None, e.0))?;
        let settings = ListenerTlsSettings::from_properties(props)?;
        Ok(ListenerTls {
            config: Reloading::server(settings, reload_check)?,
            mapper,
        })
    }

    /// The handshake with one client, within `deadline`, and its principal name as Kafka's
    /// DefaultKafkaPrincipalBuilder gives it for SSL (`ANONYMOUS` without a certificate).
    pub async fn accept<IO>(
        &self,
        io: IO,
        deadline: Duration,
    ) -> Result<(server::TlsStream<IO>, String), HandshakeFailure>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let stream = accept(&self.config.acceptor(), io, deadline).await?;
        let principal =
            tls_principal(stream.get_ref().1.peer_certificates(), &self.mapper).map_err(|e| match e {
                PrincipalError::NoSubject => HandshakeFailure::NoSubject,
                PrincipalError::NoMatchingRule(why) => HandshakeFailure::NoMatchingRule(why),
                PrincipalError::BadCertificate(why) => HandshakeFailure::Other(why),
            })?;
        Ok((stream, principal))
    }

    /// The reloading configuration (stats, an explicit check).
    pub fn config(&self) -> &Reloading<ServerConfig> {
        &self.config
    }

    /// The principal mapper.
    pub fn mapper(&self) -> &SslPrincipalMapper {
        &self.mapper
    }
}

/// The proxy's TLS connections to the brokers (security.protocol SSL / SASL_SSL).
pub struct UpstreamTls {
    config: Reloading<ClientConfig>,
}

impl UpstreamTls {
    /// From the client properties of `--broker-config`.
    pub fn from_properties(props: &Properties, reload_check: Duration) -> Result<Self, TlsConfigError> {
        let settings = UpstreamTlsSettings::from_properties(props)?;
        Ok(UpstreamTls {
            config: Reloading::client(settings, reload_check)?,
        })
    }

    /// The handshake with the broker reached as `host` (checked against its certificate when
    /// endpoint identification is on; sent as SNI when a host name), within `deadline`.
    pub async fn connect<IO>(
        &self,
        host: &str,
        io: IO,
        deadline: Duration,
    ) -> Result<client::TlsStream<IO>, HandshakeFailure>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = server_name(host).map_err(|e| HandshakeFailure::Other(e.to_string()))?;
        connect(&self.config.connector(), name, io, deadline).await
    }

    /// The reloading configuration.
    pub fn config(&self) -> &Reloading<ClientConfig> {
        &self.config
    }
}
