//! `ssl.enabled.protocols` and `ssl.cipher.suites` as a rustls crypto provider (ring) and the
//! protocol versions to offer.

use super::settings::ProtocolSettings;
use super::TlsConfigError;
use rustls::crypto::{ring, CryptoProvider};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};
use std::sync::Arc;

/// The provider and versions a configuration is built with.
pub struct Policy {
    pub provider: Arc<CryptoProvider>,
    pub versions: Vec<&'static SupportedProtocolVersion>,
}

/// A suite's IANA name (rustls spells TLS 1.3 suites `TLS13_...`; IANA and Java `TLS_...`).
pub fn iana_name(suite: &SupportedCipherSuite) -> String {
    let name = format!("{:?}", suite.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

fn supported_names() -> String {
    ring::default_provider()
        .cipher_suites
        .iter()
        .map(iana_name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The provider restricted to the configured suites and the configured versions.
pub fn policy(settings: &ProtocolSettings) -> Result<Policy, TlsConfigError> {
    let mut provider = ring::default_provider();
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    match &settings.enabled_protocols {
        None => versions.extend([&rustls::version::TLS13, &rustls::version::TLS12]),
        Some(names) => {
            for name in names {
                match name.as_str() {
                    "TLSv1.3" => versions.push(&rustls::version::TLS13),
                    "TLSv1.2" => versions.push(&rustls::version::TLS12),
                    // Java disables these by default (jdk.tls.disabledAlgorithms): accepted, unused.
                    "TLSv1" | "TLSv1.1" => {}
                    other => {
                        return Err(TlsConfigError::new(
                            "ssl.enabled.protocols",
                            None,
                            format!("unsupported protocol {other:?}: expected TLSv1.2, TLSv1.3"),
                        ))
                    }
                }
            }
            if versions.is_empty() {
                return Err(TlsConfigError::new(
                    "ssl.enabled.protocols",
                    None,
                    "enables neither TLSv1.2 nor TLSv1.3",
                ));
            }
        }
    }
    if let Some(names) = &settings.cipher_suites {
        let mut chosen = Vec::new();
        for name in names {
            let wanted = name.to_ascii_uppercase();
            let found = provider
                .cipher_suites
                .iter()
                .find(|s| iana_name(s) == wanted || format!("{:?}", s.suite()) == wanted);
            match found {
                Some(suite) => chosen.push(*suite),
                None => {
                    return Err(TlsConfigError::new(
                        "ssl.cipher.suites",
                        None,
                        format!(
                            "unsupported cipher suite {name:?}; supported: {}",
                            supported_names()
                        ),
                    ))
                }
            }
        }
        for version in &versions {
            if !chosen.iter().any(|s| s.version() == *version) {
                return Err(TlsConfigError::new(
                    "ssl.cipher.suites",
                    None,
                    format!(
                        "no suite for {} (enabled by ssl.enabled.protocols); supported: {}",
                        if version.version == rustls::ProtocolVersion::TLSv1_3 {
                            "TLSv1.3"
                        } else {
                            "TLSv1.2"
                        },
                        supported_names()
                    ),
                ));
            }
        }
        provider.cipher_suites = chosen;
    }
    Ok(Policy {
        provider: Arc::new(provider),
        versions,
    })
}
