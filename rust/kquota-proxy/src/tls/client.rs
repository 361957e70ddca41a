//! The `rustls::ClientConfig` for the proxy's own connections to the brokers: Kafka's client
//! properties (UpstreamTlsSettings).

use super::material::{load_identity, load_roots, system_roots};
use super::policy::{policy, Policy};
use super::server::certified_key;
use super::settings::UpstreamTlsSettings;
use super::TlsConfigError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::SingleCertAndKey;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, Error, SignatureScheme};
use std::sync::Arc;

/// The client configuration for connections to the brokers. With endpoint identification (the
/// default, `https`) the broker's certificate must be valid for the host the connection is made
/// to (the `ServerName` given to the connector; SNI is sent for host names); without it the
/// chain is still verified.
pub fn client_config(settings: &UpstreamTlsSettings) -> Result<ClientConfig, TlsConfigError> {
    let Policy { provider, versions } = policy(&settings.protocols)?;
    let roots = match &settings.truststore {
        Some(ts) => load_roots(ts)?,
        None => system_roots()?,
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsConfigError::new("ssl.truststore.location", None, e.to_string()))?;
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| TlsConfigError::new("ssl.cipher.suites", None, e.to_string()))?;
    let builder = if settings.endpoint_identification {
        builder.with_webpki_verifier(webpki)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
    };
    let config = match &settings.keystore {
        Some(ks) => {
            let certified = certified_key(&provider, load_identity(ks)?, ks)?;
            builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(certified)))
        }
        None => builder.with_no_client_auth(),
    };
    Ok(config)
}

/// `ssl.endpoint.identification.algorithm=` (empty): the chain, validity and signatures are
/// verified as always; only a certificate that is not valid for the host name is accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        // webpki checks the name last, after the chain: this error means the chain is good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
