//! Listener and upstream configurations from each store format, client authentication, endpoint
//! identification, protocol policy, errors naming their property and file, and reloading.

use super::tests_support::{handshake, pkcs12, Ca, Failed, TempDir};
use super::*;
use crate::principal::{tls_principal, SslPrincipalMapper, ANONYMOUS};
use std::sync::Arc;
use std::time::Duration;

fn props(pairs: &[(&str, &str)]) -> Properties {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct Pki {
    dir: TempDir,
    ca: Ca,
}

impl Pki {
    fn new(tag: &str) -> Pki {
        Pki {
            dir: TempDir::new(tag),
            ca: Ca::new("kquota test CA"),
        }
    }

    /// A PEM keystore file (key then chain) for the server and the CA as a PEM truststore.
    fn server_pem(&self) -> (String, String) {
        let leaf = self.ca.server();
        let ks = self.dir.write(
            "server.pem",
            format!("{}{}{}", leaf.key_pem, leaf.cert_pem, self.ca.pem()),
        );
        let ts = self.dir.write("ca.pem", self.ca.pem());
        (ks.display().to_string(), ts.display().to_string())
    }

    fn client_upstream(&self, leaf: Option<&super::tests_support::Leaf>) -> UpstreamTlsSettings {
        let ts = self.dir.write("client-ca.pem", self.ca.pem());
        let mut p = props(&[("ssl.truststore.location", ts.to_str().unwrap())]);
        if let Some(leaf) = leaf {
            p.insert("ssl.keystore.certificate.chain".into(), leaf.cert_pem.clone());
            p.insert("ssl.keystore.key".into(), leaf.key_pem.clone());
        }
        UpstreamTlsSettings::from_properties(&p).unwrap()
    }
}

fn listener(p: &Properties) -> Result<Arc<rustls::ServerConfig>, TlsConfigError> {
    server_config(&ListenerTlsSettings::from_properties(p)?).map(Arc::new)
}

fn upstream(s: &UpstreamTlsSettings) -> Arc<rustls::ClientConfig> {
    Arc::new(client_config(s).unwrap())
}

#[test]
fn pem_listener_with_required_client_certificates_names_the_user() {
    let pki = Pki::new("required");
    let (ks, ts) = pki.server_pem();
    let server = listener(&props(&[
        ("ssl.keystore.location", &ks),
        ("ssl.truststore.location", &ts),
        ("ssl.client.auth", "required"),
    ]))
    .unwrap();
    let alice = pki.ca.client("alice");
    let (_, s) = handshake(
        upstream(&pki.client_upstream(Some(&alice))),
        server.clone(),
        "localhost",
    )
    .unwrap();
    let mapper =
        SslPrincipalMapper::from_rules(Some("RULE:^(.*,)?CN=([a-z]+)(,.*)?$/$2/U, DEFAULT")).unwrap();
    assert_eq!(tls_principal(s.peer_certificates(), &mapper).unwrap(), "ALICE");
    // (rcgen's attribute order; the RFC 2253 order itself is checked against Java in principal/)
    let default = SslPrincipalMapper::from_rules(None).unwrap();
    let dn = tls_principal(s.peer_certificates(), &default).unwrap();
    assert!(
        dn.contains("CN=alice") && dn.contains("OU=eng") && dn.contains("O=kquota"),
        "{dn}"
    );

    // no certificate: refused; a certificate from another CA: refused
    assert!(matches!(
        handshake(upstream(&pki.client_upstream(None)), server.clone(), "localhost"),
        Err(Failed::Server(_))
    ));
    let mallory = Ca::new("other CA").client("mallory");
    assert!(matches!(
        handshake(
            upstream(&pki.client_upstream(Some(&mallory))),
            server,
            "localhost"
        ),
        Err(Failed::Server(_))
    ));
}

#[test]
fn requested_client_auth_lets_a_client_without_certificate_in_as_anonymous() {
    let pki = Pki::new("requested");
    let (ks, ts) = pki.server_pem();
    let server = listener(&props(&[
        ("ssl.keystore.location", &ks),
        ("ssl.truststore.location", &ts),
        ("ssl.client.auth", "requested"),
    ]))
    .unwrap();
    let (_, s) = handshake(upstream(&pki.client_upstream(None)), server.clone(), "localhost").unwrap();
    let mapper = SslPrincipalMapper::from_rules(None).unwrap();
    assert_eq!(tls_principal(s.peer_certificates(), &mapper).unwrap(), ANONYMOUS);
    // a certificate that is sent must still be trusted
    let mallory = Ca::new("other CA").client("mallory");
    assert!(handshake(
        upstream(&pki.client_upstream(Some(&mallory))),
        server,
        "localhost"
    )
    .is_err());
}

#[test]
fn endpoint_identification_checks_the_host_and_empty_checks_the_chain_only() {
    let pki = Pki::new("hostname");
    let (ks, _) = pki.server_pem();
    let server = listener(&props(&[("ssl.keystore.location", &ks)])).unwrap();
    let https = pki.client_upstream(None);
    assert!(https.endpoint_identification);
    assert!(handshake(upstream(&https), server.clone(), "localhost").is_ok());
    assert!(handshake(upstream(&https), server.clone(), "127.0.0.1").is_ok());
    assert!(matches!(
        handshake(upstream(&https), server.clone(), "broker.example"),
        Err(Failed::Client(_))
    ));
    let mut lax = https.clone();
    lax.endpoint_identification = false;
    assert!(handshake(upstream(&lax), server.clone(), "broker.example").is_ok());
    // the chain is still verified without endpoint identification
    let other = Pki::new("hostname-other");
    let mut stranger = other.client_upstream(None);
    stranger.endpoint_identification = false;
    assert!(matches!(
        handshake(upstream(&stranger), server, "localhost"),
        Err(Failed::Client(_))
    ));
    // parsing: empty value disables, https enables, anything else is refused
    let p = props(&[("ssl.endpoint.identification.algorithm", "")]);
    assert!(
        !UpstreamTlsSettings::from_properties(&p)
            .unwrap()
            .endpoint_identification
    );
    let p = props(&[("ssl.endpoint.identification.algorithm", "ldap")]);
    assert_eq!(
        UpstreamTlsSettings::from_properties(&p).unwrap_err().property,
        "ssl.endpoint.identification.algorithm"
    );
}

#[test]
fn pkcs12_and_inline_pem_keystores() {
    let pki = Pki::new("formats");
    let leaf = pki.ca.server();
    let p12 = pki.dir.write("server.p12", pkcs12(&leaf, &pki.ca, "s3cret"));
    let p12s = p12.display().to_string();
    let client = upstream(&pki.client_upstream(None));
    for p in [
        props(&[
            ("ssl.keystore.location", &p12s),
            ("ssl.keystore.password", "s3cret"),
        ]),
        props(&[
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", &p12s),
            ("ssl.keystore.password", "s3cret"),
        ]),
        props(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", &leaf.cert_pem),
            ("ssl.keystore.key", &leaf.key_pem),
        ]),
        // as a properties file continued over lines with `\` gives it: no line breaks at all
        props(&[
            (
                "ssl.keystore.certificate.chain",
                &leaf.cert_pem.replace('\n', " "),
            ),
            ("ssl.keystore.key", &leaf.key_pem.replace('\n', "")),
        ]),
    ] {
        let server = listener(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        handshake(client.clone(), server, "localhost").unwrap();
    }
    let err = listener(&props(&[
        ("ssl.keystore.location", &p12s),
        ("ssl.keystore.password", "wrong"),
    ]))
    .unwrap_err();
    assert_eq!(err.property, "ssl.keystore.password");
    assert_eq!(err.file.as_deref(), Some(p12.as_path()));
    assert!(
        err.to_string().contains("wrong password") && err.to_string().contains(&p12s),
        "{err}"
    );
    // a PKCS12 truststore (the CA certificate inside a store) for client certificates
    let ts = pki
        .dir
        .write("trust.p12", pkcs12(&pki.ca.client("ca-holder"), &pki.ca, "trust"));
    let server = listener(&props(&[
        ("ssl.keystore.location", &p12s),
        ("ssl.keystore.password", "s3cret"),
        ("ssl.truststore.location", ts.to_str().unwrap()),
        ("ssl.truststore.password", "trust"),
        ("ssl.client.auth", "required"),
    ]))
    .unwrap();
    let alice = pki.ca.client("alice");
    handshake(upstream(&pki.client_upstream(Some(&alice))), server, "localhost").unwrap();
}

#[test]
fn configuration_errors_name_the_property_and_the_file() {
    let pki = Pki::new("errors");
    let (ks, ts) = pki.server_pem();
    let check = |p: Properties, property: &str, needle: &str| {
        let err = listener(&p).unwrap_err();
        assert_eq!(err.property, property, "{err}");
        assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        assert!(!err.to_string().contains('\n'), "{err}");
    };
    let missing = pki.dir.path().join("missing.p12").display().to_string();
    check(
        props(&[("ssl.keystore.location", &missing)]),
        "ssl.keystore.location",
        &missing,
    );
    let jks = pki
        .dir
        .write("ks.jks", [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2])
        .display()
        .to_string();
    check(
        props(&[("ssl.keystore.location", &jks)]),
        "ssl.keystore.location",
        "keytool -importkeystore -srckeystore",
    );
    check(
        props(&[("ssl.keystore.type", "JKS"), ("ssl.keystore.location", &jks)]),
        "ssl.keystore.type",
        "-deststoretype PKCS12",
    );
    check(props(&[]), "ssl.keystore.location", "server certificate");
    check(
        props(&[("ssl.keystore.location", &ks), ("ssl.keystore.password", "x")]),
        "ssl.keystore.password",
        &ks,
    );
    check(
        props(&[("ssl.keystore.location", &ts)]),
        "ssl.keystore.location",
        "no PEM private key",
    );
    check(
        props(&[("ssl.keystore.location", &ks), ("ssl.client.auth", "sometimes")]),
        "ssl.client.auth",
        "sometimes",
    );
    check(
        props(&[("ssl.keystore.location", &ks), ("ssl.enabled.protocols", "SSLv3")]),
        "ssl.enabled.protocols",
        "SSLv3",
    );
    check(
        props(&[
            ("ssl.keystore.location", &ks),
            ("ssl.cipher.suites", "TLS_RSA_WITH_AES_128_CBC_SHA"),
        ]),
        "ssl.cipher.suites",
        "TLS_AES_128_GCM_SHA256",
    );
    check(
        props(&[
            ("ssl.keystore.location", &ks),
            ("ssl.enabled.protocols", "TLSv1.2"),
            ("ssl.cipher.suites", "TLS_AES_128_GCM_SHA256"),
        ]),
        "ssl.cipher.suites",
        "TLSv1.2",
    );
    let other = pki.ca.server();
    check(
        props(&[
            ("ssl.keystore.certificate.chain", &other.cert_pem),
            ("ssl.keystore.key", &pki.ca.server().key_pem),
        ]),
        "ssl.keystore.key",
        "does not match",
    );
    check(
        props(&[("ssl.keystore.certificate.chain", &other.cert_pem)]),
        "ssl.keystore.key",
        "together",
    );
    let garbage = pki
        .dir
        .write("garbage.pem", "not a certificate")
        .display()
        .to_string();
    check(
        props(&[
            ("ssl.keystore.location", &ks),
            ("ssl.client.auth", "required"),
            ("ssl.truststore.location", &garbage),
            ("ssl.truststore.type", "PEM"),
        ]),
        "ssl.truststore.location",
        &garbage,
    );
    check(
        props(&[
            ("ssl.keystore.location", &ks),
            ("ssl.client.auth", "required"),
            ("ssl.truststore.location", &ts),
            ("ssl.truststore.password", "x"),
        ]),
        "ssl.truststore.password",
        &ts,
    );
}

#[test]
fn protocols_and_cipher_suites_are_applied() {
    let pki = Pki::new("policy");
    let (ks, _) = pki.server_pem();
    let only13 = listener(&props(&[
        ("ssl.keystore.location", &ks),
        ("ssl.enabled.protocols", "TLSv1.3"),
        ("ssl.cipher.suites", "TLS_CHACHA20_POLY1305_SHA256"),
    ]))
    .unwrap();
    let (c, _) = handshake(upstream(&pki.client_upstream(None)), only13.clone(), "localhost").unwrap();
    assert_eq!(c.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));
    assert_eq!(
        c.negotiated_cipher_suite().map(|s| s.suite()),
        Some(rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256)
    );
    // a client limited to TLS 1.2 cannot reach a TLS 1.3-only listener
    let mut old = pki.client_upstream(None);
    old.protocols.enabled_protocols = Some(vec!["TLSv1.2".into(), "TLSv1.1".into()]);
    assert!(handshake(upstream(&old), only13, "localhost").is_err());
    let server = listener(&props(&[("ssl.keystore.location", &ks)])).unwrap();
    let (c, _) = handshake(upstream(&old), server, "localhost").unwrap();
    assert_eq!(c.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
}

#[test]
fn reloading_swaps_the_certificate_for_new_connections_only() {
    let pki = Pki::new("reload");
    let (ks, _) = pki.server_pem();
    let settings = ListenerTlsSettings::from_properties(&props(&[("ssl.keystore.location", &ks)])).unwrap();
    let reloading = Reloading::server(settings, Duration::ZERO).unwrap();
    let client = upstream(&pki.client_upstream(None));
    let served = |config: Arc<rustls::ServerConfig>| {
        let (c, _) = handshake(client.clone(), config, "localhost").unwrap();
        c.peer_certificates().unwrap()[0].clone()
    };
    let before = reloading.current();
    let first = served(before.clone());
    assert_eq!(
        served(reloading.current()),
        first,
        "unchanged files: same certificate"
    );
    assert_eq!(reloading.check_now(), Ok(false));

    let renewed = pki.ca.server();
    std::fs::write(&ks, format!("{}{}", renewed.key_pem, renewed.cert_pem)).unwrap();
    assert_eq!(
        served(reloading.current()),
        renewed.cert_der,
        "new connections get the new certificate"
    );
    assert_eq!(
        served(before),
        first,
        "a configuration already handed out keeps its certificate"
    );
    assert_eq!(reloading.stats().reloads, 1);

    // a broken file keeps the last good configuration and is counted once
    std::fs::write(&ks, "-----BEGIN PRIVATE KEY-----\ntruncated").unwrap();
    assert_eq!(served(reloading.current()), renewed.cert_der);
    assert_eq!(served(reloading.current()), renewed.cert_der);
    let stats = reloading.stats();
    assert_eq!((stats.reloads, stats.failures), (1, 1));
    assert!(stats.last_error.unwrap().starts_with("ssl.keystore.location: "));
}

#[test]
fn reload_checks_are_rate_limited() {
    let pki = Pki::new("interval");
    let (ks, _) = pki.server_pem();
    let settings = ListenerTlsSettings::from_properties(&props(&[("ssl.keystore.location", &ks)])).unwrap();
    let reloading = Reloading::server(settings, Duration::from_secs(3600)).unwrap();
    let before = reloading.current();
    let renewed = pki.ca.server();
    std::fs::write(&ks, format!("{}{}", renewed.key_pem, renewed.cert_pem)).unwrap();
    assert!(
        Arc::ptr_eq(&before, &reloading.current()),
        "not checked before the interval"
    );
    assert_eq!(reloading.check_now(), Ok(true));
    assert!(!Arc::ptr_eq(&before, &reloading.current()));
}
