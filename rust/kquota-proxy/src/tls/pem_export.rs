//! Client TLS material as PEM text, for kquota's clients that are not rustls (Python's `ssl` for
//! the admin connection, librdkafka for the `kafka://` store and the fleet): read by the same
//! reader as the data plane's upstream connections (material.rs), so a Kafka client properties
//! file means one thing to every kquota client (PEM, inline PEM, PKCS12; the format recognised
//! when `ssl.*.type` is not set; JKS refused).
//!
//! The private key leaves as encrypted PKCS#8 under a password the caller chose (a fresh random
//! one, held in memory): what those clients read from a file or their configuration is then no
//! decrypted key, whatever form the operator's key was in.

use super::material::{load_identity, root_certificates};
use super::settings::UpstreamTlsSettings;
use super::TlsConfigError;
use pkcs8::der::asn1::{AnyRef, ObjectIdentifier, OctetStringRef};
use pkcs8::der::pem::{encode_string, LineEnding};
use pkcs8::der::{Decode, Reader, SliceReader, Tag, TagNumber, Tagged};
use pkcs8::pkcs5::pbes2;
use pkcs8::{AlgorithmIdentifierRef, PrivateKeyInfoRef};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The PEM form of a client's TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientPem {
    /// The CA certificates the brokers' certificates must chain to; None: the system's.
    pub ca_certificates: Option<String>,
    /// The client's certificate chain, end-entity first; None: no client certificate.
    pub certificate_chain: Option<String>,
    /// The client's key as `ENCRYPTED PRIVATE KEY` under the caller's password.
    pub sealed_key: Option<String>,
    /// `ssl.endpoint.identification.algorithm` is `https`.
    pub endpoint_identification: bool,
}

/// PBKDF2 rounds of the sealing: the password is the caller's random one (not guessable), so
/// the rounds need not slow a guesser; OpenSSL's default count (PKCS5_DEFAULT_ITER).
const SEAL_ITERATIONS: u32 = 2048;

const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");

/// The client material of `settings` as PEM, the key sealed under `seal_password`.
pub fn client_pem(settings: &UpstreamTlsSettings, seal_password: &str) -> Result<ClientPem, TlsConfigError> {
    let ca_certificates = match &settings.truststore {
        Some(ts) => Some(certificates_pem(
            "ssl.truststore.location",
            &root_certificates(ts)?,
        )?),
        None => None,
    };
    let (certificate_chain, sealed_key) = match &settings.keystore {
        Some(ks) => {
            let identity = load_identity(ks)?;
            (
                Some(certificates_pem("ssl.keystore.location", &identity.chain)?),
                Some(seal(&identity.key, seal_password)?),
            )
        }
        None => (None, None),
    };
    Ok(ClientPem {
        ca_certificates,
        certificate_chain,
        sealed_key,
        endpoint_identification: settings.endpoint_identification,
    })
}

fn certificates_pem(property: &str, certs: &[CertificateDer<'_>]) -> Result<String, TlsConfigError> {
    let mut out = String::new();
    for cert in certs {
        out.push_str(
            &encode_string("CERTIFICATE", LineEnding::LF, cert.as_ref())
                .map_err(|e| TlsConfigError::new(property, None, format!("cannot write PEM: {e}")))?,
        );
    }
    Ok(out)
}

fn key_error(message: impl std::fmt::Display) -> TlsConfigError {
    TlsConfigError::new(
        "ssl.keystore.key",
        None,
        format!("cannot seal the private key: {message}"),
    )
}

/// `key` as encrypted PKCS#8 (PBES2: PBKDF2-SHA256, AES-256-CBC, random salt and IV), PEM.
fn seal(key: &PrivateKeyDer<'_>, password: &str) -> Result<String, TlsConfigError> {
    let curve;
    let (oid, parameters, private_key) = match key {
        PrivateKeyDer::Pkcs8(k) => {
            let info = PrivateKeyInfoRef::from_der(k.secret_pkcs8_der()).map_err(key_error)?;
            return encrypt(&info, password);
        }
        // PKCS#1 and SEC1 keys are wrapped as PKCS#8 (RFC 5208's PrivateKeyInfo) holds them.
        PrivateKeyDer::Pkcs1(k) => (RSA_ENCRYPTION, AnyRef::NULL, k.secret_pkcs1_der()),
        PrivateKeyDer::Sec1(k) => {
            curve = sec1_curve(k.secret_sec1_der()).map_err(key_error)?;
            (EC_PUBLIC_KEY, AnyRef::from(&curve), k.secret_sec1_der())
        }
        _ => return Err(key_error("unknown key form")),
    };
    let info = PrivateKeyInfoRef::new(
        AlgorithmIdentifierRef {
            oid,
            parameters: Some(parameters),
        },
        OctetStringRef::new(private_key).map_err(key_error)?,
    );
    encrypt(&info, password)
}

/// The named curve of a SEC1 `ECPrivateKey` (its `[0] parameters`, which OpenSSL always writes).
fn sec1_curve(der: &[u8]) -> Result<ObjectIdentifier, pkcs8::der::Error> {
    let mut reader = SliceReader::new(der)?;
    let curve = reader.sequence(|r| {
        let mut curve = None;
        while !r.is_finished() {
            let field = AnyRef::decode(r)?;
            if field.tag()
                == (Tag::ContextSpecific {
                    constructed: true,
                    number: TagNumber(0),
                })
            {
                curve = Some(ObjectIdentifier::from_der(field.value())?);
            }
        }
        Ok::<_, pkcs8::der::Error>(curve)
    })?;
    curve.ok_or_else(|| {
        Tag::ContextSpecific {
            constructed: true,
            number: TagNumber(0),
        }
        .value_error()
        .into()
    })
}

fn encrypt(info: &PrivateKeyInfoRef<'_>, password: &str) -> Result<String, TlsConfigError> {
    let random = rustls::crypto::ring::default_provider().secure_random;
    let (mut salt, mut iv) = ([0u8; 16], [0u8; 16]);
    random.fill(&mut salt).map_err(|_| key_error("no random bytes"))?;
    random.fill(&mut iv).map_err(|_| key_error("no random bytes"))?;
    let params =
        pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(SEAL_ITERATIONS, &salt, iv).map_err(key_error)?;
    let sealed = info.encrypt_with_params(params, password).map_err(key_error)?;
    let pem = sealed
        .to_pem("ENCRYPTED PRIVATE KEY", LineEnding::LF)
        .map_err(key_error)?;
    Ok(pem.as_str().to_string())
}
