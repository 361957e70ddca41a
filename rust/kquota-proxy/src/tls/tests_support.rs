//! Certificates for the TLS unit tests (rcgen) and an in-memory handshake (no sockets).

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct Ca {
    pub issuer: CertifiedIssuer<'static, KeyPair>,
}

pub struct Leaf {
    pub cert_pem: String,
    pub cert_der: CertificateDer<'static>,
    pub key_pem: String,
    pub key_der: Vec<u8>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self) -> Leaf {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate with subject O=..,OU=..,CN=.. in DER order (RFC 2253: CN first).
    pub fn client(&self, cn: &str) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::OrganizationName, "kquota");
        params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, "eng");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    pub fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
        }
    }
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kquota-tls-{}-{tag}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A PKCS12 store of a leaf's key and chain, as keytool / openssl would write it.
pub fn pkcs12(leaf: &Leaf, ca: &Ca, password: &str) -> Vec<u8> {
    use p12_keystore::{Certificate, KeyStore, KeyStoreEntry, PrivateKey, PrivateKeyChain};
    let certs = vec![
        Certificate::from_der(leaf.cert_der.as_ref()).unwrap(),
        Certificate::from_der(ca.issuer.der().as_ref()).unwrap(),
    ];
    let chain = PrivateKeyChain::new(
        b"key-1".to_vec(),
        PrivateKey::from_der(&leaf.key_der).unwrap(),
        certs,
    );
    let mut store = KeyStore::new();
    store.add_entry("server", KeyStoreEntry::PrivateKeyChain(chain));
    store.writer(password).write().unwrap()
}

/// Which side failed a handshake (the error is shown when a test fails).
#[derive(Debug)]
#[allow(dead_code)]
pub enum Failed {
    Client(rustls::Error),
    Server(rustls::Error),
}

/// A full handshake between the two configurations in memory; the server connection after it.
pub fn handshake(
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    name: &str,
) -> Result<(ClientConnection, ServerConnection), Failed> {
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut c = ClientConnection::new(client, name).unwrap();
    let mut s = ServerConnection::new(server).unwrap();
    for _ in 0..16 {
        let mut buf = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            s.read_tls(&mut &buf[..]).unwrap();
            if let Err(e) = s.process_new_packets() {
                return Err(Failed::Server(e));
            }
        }
        let mut buf = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            c.read_tls(&mut &buf[..]).unwrap();
            if let Err(e) = c.process_new_packets() {
                return Err(Failed::Client(e));
            }
        }
        if !c.is_handshaking() && !s.is_handshaking() && !c.wants_write() {
            return Ok((c, s));
        }
    }
    panic!("handshake did not finish");
}
