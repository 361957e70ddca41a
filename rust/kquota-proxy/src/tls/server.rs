//! A TLS listener's `rustls::ServerConfig`: Kafka's broker properties (ListenerTlsSettings).

use super::material::{load_identity, load_roots, system_roots, Identity};
use super::policy::{policy, Policy};
use super::settings::{ClientAuth, ListenerTlsSettings, TruststoreSettings};
use super::TlsConfigError;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::ServerConfig;
use std::sync::Arc;

/// The server configuration for a TLS listener; every failure names its Kafka property.
pub fn server_config(settings: &ListenerTlsSettings) -> Result<ServerConfig, TlsConfigError> {
    let Policy { provider, versions } = policy(&settings.protocols)?;
    let identity = load_identity(&settings.keystore)?;
    let certified = certified_key(&provider, identity, &settings.keystore)?;
    let verifier = match settings.client_auth {
        ClientAuth::None => WebPkiClientVerifier::no_client_auth(),
        auth => {
            let roots = match &settings.truststore {
                Some(ts) => load_roots(ts)?,
                None => system_roots()?,
            };
            let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if auth == ClientAuth::Requested {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder.build().map_err(|e| {
                TlsConfigError::new(
                    truststore_property(settings.truststore.as_ref()),
                    None,
                    e.to_string(),
                )
            })?
        }
    };
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| TlsConfigError::new("ssl.cipher.suites", None, e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    Ok(config)
}

fn truststore_property(ts: Option<&TruststoreSettings>) -> &'static str {
    match ts {
        Some(ts) if ts.location.is_none() => "ssl.truststore.certificates",
        _ => "ssl.truststore.location",
    }
}

/// The chain and its key, checked to belong together.
pub(super) fn certified_key(
    provider: &rustls::crypto::CryptoProvider,
    identity: Identity,
    ks: &super::KeystoreSettings,
) -> Result<CertifiedKey, TlsConfigError> {
    let (property, path) = match ks.location.as_deref() {
        Some(p) => ("ssl.keystore.location", Some(p)),
        None => ("ssl.keystore.key", None),
    };
    let key = provider
        .key_provider
        .load_private_key(identity.key)
        .map_err(|e| TlsConfigError::new(property, path, format!("unusable private key: {e}")))?;
    let certified = CertifiedKey::new(identity.chain, key);
    certified.keys_match().map_err(|e| {
        TlsConfigError::new(
            property,
            path,
            format!("the private key does not match the certificate: {e}"),
        )
    })?;
    Ok(certified)
}
