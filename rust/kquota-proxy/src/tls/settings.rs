//! The TLS half of Kafka's listener (broker) and client property sets, parsed into types once
//! at start-up: the builders in server.rs / client.rs take these, never raw strings.

use super::TlsConfigError;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Kafka property names to values, as read from a properties file (already unescaped).
pub type Properties = BTreeMap<String, String>;

/// `ssl.keystore.*` / `ssl.key.password`: this side's certificate chain and private key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeystoreSettings {
    /// `ssl.keystore.type`: PEM or PKCS12 (JKS is refused); None: Kafka's default (JKS), which
    /// here means the file's own format is recognised (PEM, PKCS12; JKS refused).
    pub store_type: Option<String>,
    /// `ssl.keystore.location`.
    pub location: Option<PathBuf>,
    /// `ssl.keystore.password` (PKCS12 only, as Kafka).
    pub password: Option<String>,
    /// `ssl.key.password`: an encrypted PEM key's password (PKCS12: defaults to the store's).
    pub key_password: Option<String>,
    /// `ssl.keystore.certificate.chain`: inline PEM certificates (KIP-651).
    pub certificate_chain: Option<String>,
    /// `ssl.keystore.key`: inline PEM private key (KIP-651).
    pub key: Option<String>,
}

/// `ssl.truststore.*`: the certificates that sign the peers this side accepts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TruststoreSettings {
    /// `ssl.truststore.type`: PEM or PKCS12 (JKS refused); None: recognised from the file.
    pub store_type: Option<String>,
    /// `ssl.truststore.location`.
    pub location: Option<PathBuf>,
    /// `ssl.truststore.password` (PKCS12 only).
    pub password: Option<String>,
    /// `ssl.truststore.certificates`: inline PEM certificates (KIP-651).
    pub certificates: Option<String>,
}

/// `ssl.client.auth`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// No certificate asked for (Kafka's default).
    #[default]
    None,
    /// Asked for; a client without one is ANONYMOUS; one that is sent must be trusted.
    Requested,
    /// A trusted certificate is required.
    Required,
}

/// `ssl.enabled.protocols` and `ssl.cipher.suites` (None: rustls' safe defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProtocolSettings {
    /// Kafka's names: TLSv1.2, TLSv1.3 (TLSv1, TLSv1.1 are accepted and ignored, as Java
    /// disables them).
    pub enabled_protocols: Option<Vec<String>>,
    /// IANA / Java names (`TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`).
    pub cipher_suites: Option<Vec<String>>,
}

/// A TLS listener (`SSL://` / `SASL_SSL://`), from the broker properties in `--config`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListenerTlsSettings {
    /// The server certificate (required).
    pub keystore: KeystoreSettings,
    /// Client certificates' trust anchors (None: the system's CA certificates, as Java's cacerts).
    pub truststore: Option<TruststoreSettings>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
    /// Versions and suites.
    pub protocols: ProtocolSettings,
}

/// The proxy's own TLS connections to the brokers, from the client properties in
/// `--broker-config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamTlsSettings {
    /// The brokers' trust anchors (None: the system's CA certificates).
    pub truststore: Option<TruststoreSettings>,
    /// A client certificate for mutual TLS to the brokers.
    pub keystore: Option<KeystoreSettings>,
    /// `ssl.endpoint.identification.algorithm`: `https` (default) checks the broker's certificate
    /// against the host it is reached by; empty checks the chain only.
    pub endpoint_identification: bool,
    /// Versions and suites.
    pub protocols: ProtocolSettings,
}

impl Default for UpstreamTlsSettings {
    fn default() -> Self {
        UpstreamTlsSettings {
            truststore: None,
            keystore: None,
            endpoint_identification: true,
            protocols: ProtocolSettings::default(),
        }
    }
}

fn get(props: &Properties, name: &str) -> Option<String> {
    props
        .get(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Kafka's LIST type: comma-separated, blanks trimmed, empty items dropped.
fn list(props: &Properties, name: &str) -> Option<Vec<String>> {
    let value = get(props, name)?;
    Some(
        value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
    )
}

impl KeystoreSettings {
    /// The `ssl.keystore.*` properties (and `ssl.key.password`).
    pub fn from_properties(props: &Properties) -> Self {
        KeystoreSettings {
            store_type: get(props, "ssl.keystore.type"),
            location: get(props, "ssl.keystore.location").map(PathBuf::from),
            // Passwords are not trimmed: a password may end in a blank.
            password: props
                .get("ssl.keystore.password")
                .filter(|v| !v.is_empty())
                .cloned(),
            key_password: props.get("ssl.key.password").filter(|v| !v.is_empty()).cloned(),
            certificate_chain: get(props, "ssl.keystore.certificate.chain"),
            key: get(props, "ssl.keystore.key"),
        }
    }

    /// Whether any certificate source is configured.
    pub fn is_configured(&self) -> bool {
        self.location.is_some() || self.certificate_chain.is_some() || self.key.is_some()
    }
}

impl TruststoreSettings {
    /// The `ssl.truststore.*` properties; None when neither a file nor inline certificates.
    pub fn from_properties(props: &Properties) -> Option<Self> {
        let settings = TruststoreSettings {
            store_type: get(props, "ssl.truststore.type"),
            location: get(props, "ssl.truststore.location").map(PathBuf::from),
            password: props
                .get("ssl.truststore.password")
                .filter(|v| !v.is_empty())
                .cloned(),
            certificates: get(props, "ssl.truststore.certificates"),
        };
        (settings.location.is_some() || settings.certificates.is_some()).then_some(settings)
    }
}

impl ProtocolSettings {
    /// `ssl.enabled.protocols`, `ssl.cipher.suites`.
    pub fn from_properties(props: &Properties) -> Self {
        ProtocolSettings {
            enabled_protocols: list(props, "ssl.enabled.protocols"),
            cipher_suites: list(props, "ssl.cipher.suites"),
        }
    }
}

impl ListenerTlsSettings {
    /// A TLS listener's settings from broker properties; the keystore is required.
    pub fn from_properties(props: &Properties) -> Result<Self, TlsConfigError> {
        let keystore = KeystoreSettings::from_properties(props);
        if !keystore.is_configured() {
            return Err(TlsConfigError::new(
                "ssl.keystore.location",
                None,
                "a TLS listener needs a server certificate: set ssl.keystore.location (or \
                 ssl.keystore.certificate.chain and ssl.keystore.key)",
            ));
        }
        let client_auth = match get(props, "ssl.client.auth")
            .as_deref()
            .map(str::to_ascii_lowercase)
        {
            None => ClientAuth::None,
            Some(v) if v == "none" => ClientAuth::None,
            Some(v) if v == "requested" => ClientAuth::Requested,
            Some(v) if v == "required" => ClientAuth::Required,
            Some(v) => {
                return Err(TlsConfigError::new(
                    "ssl.client.auth",
                    None,
                    format!("invalid value {v:?}: expected one of required, requested, none"),
                ))
            }
        };
        Ok(ListenerTlsSettings {
            keystore,
            truststore: TruststoreSettings::from_properties(props),
            client_auth,
            protocols: ProtocolSettings::from_properties(props),
        })
    }
}

impl UpstreamTlsSettings {
    /// The proxy's client-side TLS settings from client properties.
    pub fn from_properties(props: &Properties) -> Result<Self, TlsConfigError> {
        let endpoint_identification = match props.get("ssl.endpoint.identification.algorithm") {
            None => true,
            Some(v) if v.trim().is_empty() => false,
            Some(v) if v.trim().eq_ignore_ascii_case("https") => true,
            Some(v) => {
                return Err(TlsConfigError::new(
                    "ssl.endpoint.identification.algorithm",
                    None,
                    format!("invalid value {v:?}: expected https or an empty value"),
                ))
            }
        };
        let keystore = KeystoreSettings::from_properties(props);
        Ok(UpstreamTlsSettings {
            truststore: TruststoreSettings::from_properties(props),
            keystore: keystore.is_configured().then_some(keystore),
            endpoint_identification,
            protocols: ProtocolSettings::from_properties(props),
        })
    }
}
