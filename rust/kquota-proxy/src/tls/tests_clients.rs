//! Client certificates a listener must refuse (expired, not yet valid, another CA) or that give
//! no principal (no subject), and a handshake over real loopback sockets with tokio-rustls.

use super::tests_support::{handshake, Ca, Failed, TempDir};
use super::*;
use crate::principal::{tls_principal, PrincipalError, SslPrincipalMapper};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose};
use std::sync::Arc;
use std::time::Duration;

fn required_listener(dir: &TempDir, ca: &Ca) -> Arc<rustls::ServerConfig> {
    let leaf = ca.server();
    let ks = dir.write("server.pem", format!("{}{}", leaf.key_pem, leaf.cert_pem));
    let ts = dir.write("ca.pem", ca.pem());
    let props: Properties = [
        ("ssl.keystore.location", ks.to_str().unwrap()),
        ("ssl.truststore.location", ts.to_str().unwrap()),
        ("ssl.client.auth", "required"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Arc::new(server_config(&ListenerTlsSettings::from_properties(&props).unwrap()).unwrap())
}

fn client_with(ca: &Ca, leaf: &super::tests_support::Leaf) -> Arc<rustls::ClientConfig> {
    let p: Properties = [
        ("ssl.truststore.certificates", ca.pem()),
        ("ssl.keystore.certificate.chain", leaf.cert_pem.clone()),
        ("ssl.keystore.key", leaf.key_pem.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Arc::new(client_config(&UpstreamTlsSettings::from_properties(&p).unwrap()).unwrap())
}

fn client_params(cn: Option<&str>) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    if let Some(cn) = cn {
        params.distinguished_name.push(DnType::CommonName, cn);
    } else {
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.subject_alt_names = vec![rcgen::SanType::DnsName("anonymous.example".try_into().unwrap())];
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params
}

#[test]
fn expired_and_not_yet_valid_client_certificates_are_refused() {
    let dir = TempDir::new("validity");
    let ca = Ca::new("kquota test CA");
    let server = required_listener(&dir, &ca);
    let now = time::OffsetDateTime::now_utc();
    let mut expired = client_params(Some("expired"));
    expired.not_before = now - time::Duration::days(10);
    expired.not_after = now - time::Duration::days(1);
    let mut future = client_params(Some("future"));
    future.not_before = now + time::Duration::days(1);
    future.not_after = now + time::Duration::days(10);
    for params in [expired, future] {
        let leaf = ca.sign(params);
        let result = handshake(client_with(&ca, &leaf), server.clone(), "localhost");
        assert!(
            matches!(result, Err(Failed::Server(rustls::Error::InvalidCertificate(_)))),
            "{:?}",
            result.err()
        );
    }
    let good = ca.sign(client_params(Some("good")));
    assert!(handshake(client_with(&ca, &good), server, "localhost").is_ok());
}

#[test]
fn a_client_certificate_without_subject_gives_no_principal() {
    let dir = TempDir::new("nosubject");
    let ca = Ca::new("kquota test CA");
    let server = required_listener(&dir, &ca);
    let leaf = ca.sign(client_params(None));
    // webpki accepts it (the chain is good, RFC 5280 allows an empty subject with a critical
    // SAN): the principal step is what refuses it, so the data plane must close the connection.
    let (_, s) = handshake(client_with(&ca, &leaf), server, "localhost").unwrap();
    let mapper = SslPrincipalMapper::from_rules(None).unwrap();
    assert_eq!(
        tls_principal(s.peer_certificates(), &mapper),
        Err(PrincipalError::NoSubject)
    );
}

#[test]
fn tokio_rustls_over_loopback_with_the_reloading_configurations() {
    let dir = TempDir::new("tokio");
    let ca = Ca::new("kquota test CA");
    let leaf = ca.server();
    let ks = dir.write("server.pem", format!("{}{}", leaf.key_pem, leaf.cert_pem));
    let ts = dir.write("ca.pem", ca.pem());
    let listener_props: Properties = [("ssl.keystore.location".to_string(), ks.display().to_string())]
        .into_iter()
        .collect();
    let upstream_props: Properties = [("ssl.truststore.location".to_string(), ts.display().to_string())]
        .into_iter()
        .collect();
    let server = Reloading::server(
        ListenerTlsSettings::from_properties(&listener_props).unwrap(),
        DEFAULT_RELOAD_CHECK,
    )
    .unwrap();
    let client = Reloading::client(
        UpstreamTlsSettings::from_properties(&upstream_props).unwrap(),
        DEFAULT_RELOAD_CHECK,
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = socket.local_addr().unwrap().port();
        let acceptor = server.acceptor();
        let served = tokio::spawn(async move {
            let (tcp, _) = socket.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let mut buf = [0u8; 5];
            tls.read_exact(&mut buf).await.unwrap();
            tls.write_all(&buf).await.unwrap();
            tls.shutdown().await.unwrap();
        });
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = client.connector().connect(name, tcp).await.unwrap();
        tls.write_all(b"kafka").await.unwrap();
        let mut echo = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut echo))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(echo, b"kafka");
        served.await.unwrap();
    });
}
