//! Handshakes over loopback sockets: each bad input ends in its own cause.

use super::tests_support::{Ca, Leaf, TempDir};
use super::*;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

fn props(pairs: &[(&str, String)]) -> Properties {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn listener(dir: &TempDir, ca: &Ca, auth: &str) -> TlsAcceptor {
    let leaf = ca.server();
    let ks = dir.write("server.pem", format!("{}{}", leaf.key_pem, leaf.cert_pem));
    let p = props(&[
        ("ssl.keystore.location", ks.display().to_string()),
        ("ssl.truststore.certificates", ca.pem()),
        ("ssl.client.auth", auth.to_string()),
    ]);
    TlsAcceptor::from(Arc::new(
        server_config(&ListenerTlsSettings::from_properties(&p).unwrap()).unwrap(),
    ))
}

fn connector(ca: &Ca, leaf: Option<&Leaf>) -> TlsConnector {
    let mut p = props(&[("ssl.truststore.certificates", ca.pem())]);
    if let Some(leaf) = leaf {
        p.insert("ssl.keystore.certificate.chain".into(), leaf.cert_pem.clone());
        p.insert("ssl.keystore.key".into(), leaf.key_pem.clone());
    }
    TlsConnector::from(Arc::new(
        client_config(&UpstreamTlsSettings::from_properties(&p).unwrap()).unwrap(),
    ))
}

fn client_cert(ca: &Ca, cn: &str, days_from_now: (i64, i64)) -> Leaf {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now + time::Duration::days(days_from_now.0);
    params.not_after = now + time::Duration::days(days_from_now.1);
    ca.sign(params)
}

/// The server's and the client's outcome of one handshake over loopback.
async fn both(
    acceptor: TlsAcceptor,
    connector: TlsConnector,
    name: &str,
) -> (Result<(), HandshakeFailure>, Result<(), HandshakeFailure>) {
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (tcp, _) = socket.accept().await.unwrap();
        // A TLS 1.3 server learns of a bad client certificate after the client's last flight:
        // read once so that the verdict is in.
        let mut tls = accept(&acceptor, tcp, Duration::from_secs(5)).await?;
        let mut buf = [0u8; 1];
        let _ = tokio::io::AsyncReadExt::read(&mut tls, &mut buf).await;
        Ok(())
    });
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let client = match connect(
        &connector,
        server_name(name).unwrap(),
        tcp,
        Duration::from_secs(5),
    )
    .await
    {
        Ok(mut tls) => {
            let _ = tls.shutdown().await;
            Ok(())
        }
        Err(e) => Err(e),
    };
    (server.await.unwrap(), client)
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn client_certificate_failures_by_cause() {
    let dir = TempDir::new("causes");
    let ca = Ca::new("kquota test CA");
    run(async {
        let required = listener(&dir, &ca, "required");
        let ok = client_cert(&ca, "alice", (-1, 30));
        assert_eq!(
            both(required.clone(), connector(&ca, Some(&ok)), "localhost").await,
            (Ok(()), Ok(()))
        );
        let expired = client_cert(&ca, "old", (-10, -1));
        let (server, _) = both(required.clone(), connector(&ca, Some(&expired)), "localhost").await;
        assert_eq!(server, Err(HandshakeFailure::ExpiredCertificate));
        let future = client_cert(&ca, "new", (1, 10));
        let (server, _) = both(required.clone(), connector(&ca, Some(&future)), "localhost").await;
        assert_eq!(server, Err(HandshakeFailure::NotYetValidCertificate));
        let other = Ca::new("other CA");
        let stranger = client_cert(&other, "mallory", (-1, 30));
        let (server, _) = both(required.clone(), connector(&ca, Some(&stranger)), "localhost").await;
        assert_eq!(server, Err(HandshakeFailure::UntrustedCertificate));
        let (server, _) = both(required, connector(&ca, None), "localhost").await;
        assert_eq!(server, Err(HandshakeFailure::NoCertificate));
    });
}

#[test]
fn broker_certificate_for_another_host_is_a_name_mismatch() {
    let dir = TempDir::new("mismatch");
    let ca = Ca::new("kquota test CA");
    run(async {
        let (_, client) = both(
            listener(&dir, &ca, "none"),
            connector(&ca, None),
            "broker.example",
        )
        .await;
        assert_eq!(client, Err(HandshakeFailure::NameMismatch));
        let (_, client) = both(
            listener(&dir, &ca, "none"),
            connector(&Ca::new("other"), None),
            "localhost",
        )
        .await;
        assert_eq!(client, Err(HandshakeFailure::UntrustedCertificate));
    });
}

#[test]
fn plaintext_on_a_tls_port_tls_on_a_plaintext_port_and_a_stalled_handshake() {
    let dir = TempDir::new("plain");
    let ca = Ca::new("kquota test CA");
    run(async {
        let acceptor = listener(&dir, &ca, "none");
        // a plaintext Kafka ApiVersions request on the TLS port
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = socket.local_addr().unwrap().port();
        let mut plain = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        plain
            .write_all(b"\x00\x00\x00\x15\x00\x12\x00\x03\x00\x00\x00\x01\x00\x07kquota-\x00\x00\x00")
            .await
            .unwrap();
        let (tcp, _) = socket.accept().await.unwrap();
        assert_eq!(
            accept(&acceptor, tcp, Duration::from_secs(5)).await.err(),
            Some(HandshakeFailure::NotTls)
        );
        // a client that connects and says nothing: closed at the deadline
        let _silent = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let (tcp, _) = socket.accept().await.unwrap();
        let started = std::time::Instant::now();
        let failure = accept(&acceptor, tcp, Duration::from_millis(200)).await.err();
        assert_eq!(failure, Some(HandshakeFailure::Timeout));
        assert!(started.elapsed() < Duration::from_secs(2));
        // a TLS client on a plaintext port (a broker answering with a Kafka frame)
        let plain_port = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pport = plain_port.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut tcp, _) = plain_port.accept().await.unwrap();
            let _ = tcp.write_all(b"\x00\x00\x00\x06\x00\x00\x00\x01\x00\x23").await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        });
        let tcp = TcpStream::connect(("127.0.0.1", pport)).await.unwrap();
        let failure = connect(
            &connector(&ca, None),
            server_name("localhost").unwrap(),
            tcp,
            Duration::from_secs(5),
        )
        .await
        .err();
        assert_eq!(failure, Some(HandshakeFailure::NotTls));
    });
}

#[test]
fn server_names_and_causes() {
    assert!(server_name("127.0.0.1").is_ok());
    assert!(server_name("[::1]").is_ok());
    assert!(server_name("broker-1.example.com").is_ok());
    assert_eq!(
        server_name("bad host!").unwrap_err().property,
        "bootstrap.servers"
    );
    assert_eq!(
        HandshakeFailure::NotTls.to_string(),
        "TLS handshake failed: not tls"
    );
    assert_eq!(HandshakeFailure::Timeout.cause(), "timeout");
}

#[test]
fn listener_tls_gives_each_client_its_principal_and_upstream_tls_connects() {
    let dir = TempDir::new("sides");
    let ca = Ca::new("kquota test CA");
    let leaf = ca.server();
    let ks = dir.write("server.pem", format!("{}{}", leaf.key_pem, leaf.cert_pem));
    let listener_props = props(&[
        ("ssl.keystore.location", ks.display().to_string()),
        ("ssl.truststore.certificates", ca.pem()),
        ("ssl.client.auth", "requested".to_string()),
        (
            "ssl.principal.mapping.rules",
            "RULE:^CN=([a-z]+)$/$1/U".to_string(),
        ),
    ]);
    let tls = ListenerTls::from_properties(&listener_props, DEFAULT_RELOAD_CHECK).unwrap();
    let upstream = UpstreamTls::from_properties(
        &props(&[("ssl.truststore.certificates", ca.pem())]),
        DEFAULT_RELOAD_CHECK,
    )
    .unwrap();
    let alice = client_cert(&ca, "alice", (-1, 30));
    let mut nameless = CertificateParams::new(Vec::<String>::new()).unwrap();
    nameless.distinguished_name = rcgen::DistinguishedName::new();
    nameless.subject_alt_names = vec![rcgen::SanType::DnsName("x.example".try_into().unwrap())];
    let nameless = ca.sign(nameless);
    let mut two_words = CertificateParams::new(Vec::<String>::new()).unwrap();
    two_words.distinguished_name.push(DnType::CommonName, "Bob Smith");
    let two_words = ca.sign(two_words);
    run(async {
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = socket.local_addr().unwrap().port();
        let cases: [(Option<&Leaf>, Result<&str, &str>); 4] = [
            (Some(&alice), Ok("ALICE")),
            (None, Ok("ANONYMOUS")),
            (Some(&nameless), Err("no_subject")),
            (Some(&two_words), Err("no_matching_rule")),
        ];
        for (leaf, expected) in cases {
            let connector = connector(&ca, leaf);
            let client = tokio::spawn(async move {
                let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                let tls = connect(
                    &connector,
                    server_name("localhost").unwrap(),
                    tcp,
                    Duration::from_secs(5),
                )
                .await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                drop(tls);
            });
            let (tcp, _) = socket.accept().await.unwrap();
            let got = tls.accept(tcp, Duration::from_secs(5)).await;
            match expected {
                Ok(user) => assert_eq!(got.map(|(_, p)| p).unwrap(), user),
                Err(cause) => assert_eq!(got.err().map(|e| e.cause()), Some(cause)),
            }
            client.await.unwrap();
        }
        // upstream: the same listener reached as localhost
        let server = tokio::spawn(async move {
            let (tcp, _) = socket.accept().await.unwrap();
            tls.accept(tcp, Duration::from_secs(5)).await.map(|(_, p)| p)
        });
        let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let stream = upstream
            .connect("localhost", tcp, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(stream.get_ref().1.peer_certificates().is_some());
        drop(stream);
        assert_eq!(server.await.unwrap().unwrap(), "ANONYMOUS");
    });
}

#[test]
fn listener_tls_refuses_bad_mapping_rules() {
    let dir = TempDir::new("rules");
    let ca = Ca::new("kquota test CA");
    let leaf = ca.server();
    let ks = dir.write("server.pem", format!("{}{}", leaf.key_pem, leaf.cert_pem));
    let p = props(&[
        ("ssl.keystore.location", ks.display().to_string()),
        ("ssl.principal.mapping.rules", "RULE:x/y/L/U".to_string()),
    ]);
    let err = ListenerTls::from_properties(&p, DEFAULT_RELOAD_CHECK)
        .err()
        .unwrap();
    assert_eq!(err.property, "ssl.principal.mapping.rules");
}
