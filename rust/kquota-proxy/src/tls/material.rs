//! Keystores and truststores as Kafka reads them (DefaultSslEngineFactory): PEM files, inline PEM
//! (KIP-651) and PKCS12 with passwords. JKS is refused with the command that converts it.

use super::settings::{KeystoreSettings, TruststoreSettings};
use super::TlsConfigError;
use rustls::pki_types::pem::{self, PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::RootCertStore;
use std::path::Path;

/// A certificate chain (end-entity first) and its private key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    Pem,
    Pkcs12,
}

const JKS_MAGIC: [u8; 4] = [0xfe, 0xed, 0xfe, 0xed];

fn read(property: &str, path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    std::fs::read(path).map_err(|e| {
        TlsConfigError::new(
            property,
            Some(path),
            format!("cannot read the file: {}", io_reason(&e)),
        )
    })
}

/// An I/O error without Rust's "(os error N)" suffix.
fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}

fn jks_refused(property: &str, path: Option<&Path>) -> TlsConfigError {
    let source = path.map_or_else(|| "ks.jks".to_string(), |p| p.display().to_string());
    TlsConfigError::new(
        property,
        path,
        format!(
            "JKS keystores are not supported: convert to PKCS12 with `keytool -importkeystore \
             -srckeystore {source} -destkeystore ks.p12 -deststoretype PKCS12` and set the type \
             to PKCS12"
        ),
    )
}

/// The store's format from its `*.type` property, else from its bytes.
fn format(
    type_property: &str,
    location_property: &str,
    declared: Option<&str>,
    path: &Path,
    bytes: &[u8],
) -> Result<Format, TlsConfigError> {
    match declared.map(str::to_ascii_uppercase).as_deref() {
        Some("PEM") => Ok(Format::Pem),
        Some("PKCS12") => Ok(Format::Pkcs12),
        Some("JKS") => Err(jks_refused(type_property, Some(path))),
        Some(other) => Err(TlsConfigError::new(
            type_property,
            None,
            format!("unsupported type {other:?}: expected PEM or PKCS12"),
        )),
        None if bytes.starts_with(&JKS_MAGIC) => Err(jks_refused(location_property, Some(path))),
        None if bytes.trim_ascii_start().starts_with(b"-----BEGIN") => Ok(Format::Pem),
        None => Ok(Format::Pkcs12),
    }
}

/// The property names of a store kind and what it says when a PEM file is given a password.
struct StoreProperties {
    kind: &'static str,
    type_: &'static str,
    location: &'static str,
    password: &'static str,
    pem_password: &'static str,
}

const KEYSTORE: StoreProperties = StoreProperties {
    kind: "keystore",
    type_: "ssl.keystore.type",
    location: "ssl.keystore.location",
    password: "ssl.keystore.password",
    pem_password: "a PEM keystore takes no store password, only ssl.key.password for an encrypted key",
};

const TRUSTSTORE: StoreProperties = StoreProperties {
    kind: "truststore",
    type_: "ssl.truststore.type",
    location: "ssl.truststore.location",
    password: "ssl.truststore.password",
    pem_password: "a PEM truststore takes no password",
};

/// A store file read, with its format (declared or recognised); Kafka's rule that a PEM store
/// takes no store password applied.
fn open_file<'a>(
    props: &StoreProperties,
    declared: Option<&str>,
    location: Option<&'a Path>,
    has_password: bool,
) -> Result<(&'a Path, Format, Vec<u8>), TlsConfigError> {
    let Some(path) = location else {
        return Err(TlsConfigError::new(
            props.location,
            None,
            format!("no {} configured", props.kind),
        ));
    };
    let bytes = read(props.location, path)?;
    let format = format(props.type_, props.location, declared, path, &bytes)?;
    if format == Format::Pem && has_password {
        return Err(TlsConfigError::new(
            props.password,
            Some(path),
            props.pem_password,
        ));
    }
    Ok((path, format, bytes))
}

/// This side's certificate and key, from the `ssl.keystore.*` settings.
pub fn load_identity(ks: &KeystoreSettings) -> Result<Identity, TlsConfigError> {
    if ks.certificate_chain.is_some() || ks.key.is_some() {
        return inline_identity(ks);
    }
    let (path, format, bytes) = open_file(
        &KEYSTORE,
        ks.store_type.as_deref(),
        ks.location.as_deref(),
        ks.password.is_some(),
    )?;
    match format {
        Format::Pem => {
            let key = pem_key(
                "ssl.keystore.location",
                Some(path),
                &bytes,
                ks.key_password.as_deref(),
            )?;
            let chain = pem_certificates("ssl.keystore.location", Some(path), &bytes)?;
            Ok(Identity { chain, key })
        }
        Format::Pkcs12 => pkcs12_identity(ks, path, &bytes),
    }
}

fn inline_identity(ks: &KeystoreSettings) -> Result<Identity, TlsConfigError> {
    if ks.location.is_some() {
        return Err(TlsConfigError::new(
            "ssl.keystore.location",
            None,
            "cannot be set together with ssl.keystore.certificate.chain / ssl.keystore.key",
        ));
    }
    if let Some(t) = ks
        .store_type
        .as_deref()
        .filter(|t| !t.eq_ignore_ascii_case("PEM"))
    {
        return Err(TlsConfigError::new(
            "ssl.keystore.type",
            None,
            format!("inline certificates need type PEM, not {t}"),
        ));
    }
    let (Some(chain), Some(key)) = (ks.certificate_chain.as_deref(), ks.key.as_deref()) else {
        let missing = if ks.key.is_none() {
            "ssl.keystore.key"
        } else {
            "ssl.keystore.certificate.chain"
        };
        return Err(TlsConfigError::new(
            missing,
            None,
            "ssl.keystore.certificate.chain and ssl.keystore.key must be set together",
        ));
    };
    let (key, chain) = (normalize_pem(key), normalize_pem(chain));
    let key = pem_key(
        "ssl.keystore.key",
        None,
        key.as_bytes(),
        ks.key_password.as_deref(),
    )?;
    let chain = pem_certificates("ssl.keystore.certificate.chain", None, chain.as_bytes())?;
    Ok(Identity { chain, key })
}

/// Inline PEM as Kafka reads it (PemStore): the base64 between `-----BEGIN X-----` and
/// `-----END X-----` with any whitespace, or none, so that a value continued over lines with `\` in
/// a properties file (which drops the line breaks) still parses. Re-wrapped in 64-column lines.
pub fn normalize_pem(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 64 + 64);
    let mut rest = text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let after = &rest[begin + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        let body_start = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(body_end) = body_start.find(&end_marker) else {
            break;
        };
        let body: String = body_start[..body_end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        out.push_str(&format!("-----BEGIN {label}-----\n"));
        for line in body.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str(&end_marker);
        out.push('\n');
        rest = &body_start[body_end + end_marker.len()..];
    }
    if out.is_empty() {
        text.to_string()
    } else {
        out
    }
}

fn pem_certificates(
    property: &str,
    path: Option<&Path>,
    bytes: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsConfigError::new(property, path, format!("bad PEM: {}", pem_error(&e))))?;
    if certs.is_empty() {
        return Err(TlsConfigError::new(
            property,
            path,
            "no PEM certificate (BEGIN CERTIFICATE) found",
        ));
    }
    Ok(certs)
}

/// The first private key in PEM text: PKCS#8 (`PRIVATE KEY`), encrypted PKCS#8 (`ENCRYPTED
/// PRIVATE KEY`, with ssl.key.password), or the PKCS#1 / SEC1 forms.
fn pem_key(
    property: &str,
    path: Option<&Path>,
    bytes: &[u8],
    key_password: Option<&str>,
) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    let bad = |e: pem::Error| TlsConfigError::new(property, path, format!("bad PEM: {}", pem_error(&e)));
    if let Some(der) = encrypted_block(property, path, bytes)? {
        return decrypt_pkcs8(property, path, &der, key_password);
    }
    for section in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(bytes) {
        let (kind, der) = section.map_err(bad)?;
        match kind {
            SectionKind::PrivateKey => return Ok(PrivatePkcs8KeyDer::from(der).into()),
            SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey => {
                return PrivateKeyDer::try_from(der)
                    .map_err(|e| TlsConfigError::new(property, path, format!("bad private key: {e}")));
            }
            _ => {}
        }
    }
    Err(TlsConfigError::new(
        property,
        path,
        "no PEM private key (BEGIN PRIVATE KEY) found",
    ))
}

/// An `ENCRYPTED PRIVATE KEY` PEM block's DER (rustls' PEM reader skips that label).
fn encrypted_block(
    property: &str,
    path: Option<&Path>,
    bytes: &[u8],
) -> Result<Option<Vec<u8>>, TlsConfigError> {
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    let text = String::from_utf8_lossy(bytes);
    let Some(start) = text.find(BEGIN) else {
        return Ok(None);
    };
    let Some(end) = text[start..].find(END).map(|e| start + e + END.len()) else {
        return Err(TlsConfigError::new(
            property,
            path,
            "bad PEM: unterminated ENCRYPTED PRIVATE KEY",
        ));
    };
    let (_, der) = pkcs8::der::pem::decode_vec(text[start..end].as_bytes())
        .map_err(|e| TlsConfigError::new(property, path, format!("bad PEM: {e}")))?;
    Ok(Some(der))
}

fn decrypt_pkcs8(
    property: &str,
    path: Option<&Path>,
    der: &[u8],
    key_password: Option<&str>,
) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    let Some(password) = key_password else {
        return Err(TlsConfigError::new(
            "ssl.key.password",
            path,
            format!("the private key in {property} is encrypted: set ssl.key.password"),
        ));
    };
    let info = pkcs8::EncryptedPrivateKeyInfoRef::try_from(der)
        .map_err(|e| TlsConfigError::new(property, path, format!("bad encrypted private key: {e}")))?;
    let plain = info.decrypt(password).map_err(|_| {
        TlsConfigError::new(
            "ssl.key.password",
            path,
            "wrong password for the encrypted private key",
        )
    })?;
    Ok(PrivatePkcs8KeyDer::from(plain.as_bytes().to_vec()).into())
}

fn pem_error(e: &pem::Error) -> String {
    match e {
        pem::Error::Io(io) => io.to_string(),
        pem::Error::MissingSectionEnd { .. } => "a BEGIN line without its END line".to_string(),
        pem::Error::IllegalSectionStart { .. } => "a malformed BEGIN line".to_string(),
        pem::Error::Base64Decode(why) => format!("bad base64: {why}"),
        _ => "malformed PEM".to_string(),
    }
}

fn open_pkcs12(
    password_property: &str,
    path: &Path,
    bytes: &[u8],
    password: Option<&str>,
) -> Result<p12_keystore::KeyStore, TlsConfigError> {
    use p12_keystore::error::Error;
    use p12_keystore::{KeyStore, Pkcs12ImportPolicy};
    KeyStore::from_pkcs12(bytes, password.unwrap_or(""), Pkcs12ImportPolicy::Relaxed).map_err(|e| match e {
        Error::MacError(_) | Error::UnpadError | Error::Pkcs5Error(_) => TlsConfigError::new(
            password_property,
            Some(path),
            if password.is_some() {
                "wrong password for the PKCS12 store"
            } else {
                "the PKCS12 store needs a password"
            },
        ),
        other => TlsConfigError::new(
            &password_property.replace(".password", ".location"),
            Some(path),
            format!("not a readable PKCS12 store: {other}"),
        ),
    })
}

fn pkcs12_identity(ks: &KeystoreSettings, path: &Path, bytes: &[u8]) -> Result<Identity, TlsConfigError> {
    // A PKCS12 store has one password for its integrity and its key (Kafka's ssl.key.password
    // is the same unless keytool was told otherwise).
    let password = ks.password.as_deref().or(ks.key_password.as_deref());
    let store = open_pkcs12("ssl.keystore.password", path, bytes, password)?;
    let Some((_, chain)) = store.private_key_chain() else {
        return Err(TlsConfigError::new(
            "ssl.keystore.location",
            Some(path),
            "the PKCS12 store holds no private key with its certificate",
        ));
    };
    let certs: Vec<CertificateDer<'static>> = chain
        .certs()
        .iter()
        .map(|c| CertificateDer::from(c.as_der().to_vec()))
        .collect();
    if certs.is_empty() {
        return Err(TlsConfigError::new(
            "ssl.keystore.location",
            Some(path),
            "the PKCS12 store's private key has no certificate",
        ));
    }
    let key = PrivatePkcs8KeyDer::from(chain.key().as_der().to_vec()).into();
    Ok(Identity { chain: certs, key })
}

/// The trust anchors from the `ssl.truststore.*` settings.
pub fn load_roots(ts: &TruststoreSettings) -> Result<RootCertStore, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(root_certificates(ts)?);
    Ok(roots)
}

/// The certificates of the `ssl.truststore.*` settings, checked as trust anchors (at least one
/// usable): what [`load_roots`] trusts, for clients that take certificates (PEM) themselves.
pub fn root_certificates(ts: &TruststoreSettings) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs: Vec<CertificateDer<'static>> = if let Some(inline) = ts.certificates.as_deref() {
        if ts.location.is_some() {
            return Err(TlsConfigError::new(
                "ssl.truststore.location",
                None,
                "cannot be set together with ssl.truststore.certificates",
            ));
        }
        pem_certificates(
            "ssl.truststore.certificates",
            None,
            normalize_pem(inline).as_bytes(),
        )?
    } else {
        let (path, format, bytes) = open_file(
            &TRUSTSTORE,
            ts.store_type.as_deref(),
            ts.location.as_deref(),
            ts.password.is_some(),
        )?;
        match format {
            Format::Pem => pem_certificates("ssl.truststore.location", Some(path), &bytes)?,
            Format::Pkcs12 => {
                let store = open_pkcs12("ssl.truststore.password", path, &bytes, ts.password.as_deref())?;
                let mut certs = Vec::new();
                for (_, entry) in store.entries() {
                    match entry {
                        p12_keystore::KeyStoreEntry::Certificate(c) => certs.push(c.as_der().to_vec()),
                        p12_keystore::KeyStoreEntry::PrivateKeyChain(chain) => {
                            certs.extend(chain.certs().iter().map(|c| c.as_der().to_vec()))
                        }
                        p12_keystore::KeyStoreEntry::Secret(_) => {}
                    }
                }
                certs.into_iter().map(CertificateDer::from).collect()
            }
        }
    };
    let (property, path) = match ts.location.as_deref() {
        Some(p) if ts.certificates.is_none() => ("ssl.truststore.location", Some(p)),
        _ => ("ssl.truststore.certificates", None),
    };
    // What rustls cannot use as an anchor is left out, as add_parsable_certificates leaves it.
    let certs: Vec<_> = certs
        .into_iter()
        .filter(|c| RootCertStore::empty().add(c.clone()).is_ok())
        .collect();
    if certs.is_empty() {
        return Err(TlsConfigError::new(
            property,
            path,
            "no usable CA certificate in the truststore",
        ));
    }
    Ok(certs)
}

/// The system's CA certificates (Java's cacerts), for a side with no truststore configured.
pub fn system_roots() -> Result<RootCertStore, TlsConfigError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(TlsConfigError::new(
            "ssl.truststore.location",
            None,
            "no truststore configured and no system CA certificates found",
        ));
    }
    Ok(roots)
}

/// The files a store reads (watched for changes).
pub fn keystore_files(ks: &KeystoreSettings) -> Vec<std::path::PathBuf> {
    ks.location.iter().cloned().collect()
}

/// The files a truststore reads (watched for changes).
pub fn truststore_files(ts: &TruststoreSettings) -> Vec<std::path::PathBuf> {
    ts.location.iter().cloned().collect()
}
