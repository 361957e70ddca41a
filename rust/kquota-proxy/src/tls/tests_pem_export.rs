//! A client's material as PEM (pem_export.rs): read as the data plane reads it (a store's format
//! recognised when its type is not set), the key sealed under the caller's password.

use super::tests_support::{pkcs12, Ca, TempDir};
use super::*;
use pkcs8::der::pem::decode_vec;

fn settings(pairs: &[(&str, &str)]) -> UpstreamTlsSettings {
    let props: Properties = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    UpstreamTlsSettings::from_properties(&props).unwrap()
}

fn unsealed(pem: &str, password: &str) -> Vec<u8> {
    let (label, der) = decode_vec(pem.as_bytes()).unwrap();
    assert_eq!(label, "ENCRYPTED PRIVATE KEY");
    let info = pkcs8::EncryptedPrivateKeyInfoRef::try_from(der.as_slice()).unwrap();
    info.decrypt(password).unwrap().as_bytes().to_vec()
}

#[test]
fn untyped_pem_stores_are_read_as_the_data_plane_reads_them() {
    let (dir, ca) = (TempDir::new("pem-export"), Ca::new("kquota test CA"));
    let leaf = ca.client("alice");
    let ts = dir.write("ca.pem", ca.pem());
    let ks = dir.write("alice.pem", format!("{}{}", leaf.key_pem, leaf.cert_pem));
    let s = settings(&[
        ("ssl.truststore.location", ts.to_str().unwrap()),
        ("ssl.keystore.location", ks.to_str().unwrap()),
    ]);
    client_config(&s).unwrap(); // the data plane takes it
    let pem = client_pem(&s, "fresh").unwrap();
    assert_eq!(
        decode_vec(pem.ca_certificates.unwrap().as_bytes()).unwrap().1,
        ca.issuer.der().to_vec()
    );
    assert_eq!(
        decode_vec(pem.certificate_chain.unwrap().as_bytes()).unwrap().1,
        leaf.cert_der.to_vec()
    );
    let sealed = pem.sealed_key.unwrap();
    assert!(!sealed.contains(&leaf.key_pem));
    assert_eq!(unsealed(&sealed, "fresh"), leaf.key_der);
    assert!(pem.endpoint_identification);
}

#[test]
fn pkcs12_without_a_type_and_no_truststore() {
    let (dir, ca) = (TempDir::new("pem-export-p12"), Ca::new("kquota test CA"));
    let leaf = ca.client("bob");
    let ks = dir.write("bob.p12", pkcs12(&leaf, &ca, "pw"));
    let s = settings(&[
        ("ssl.keystore.location", ks.to_str().unwrap()),
        ("ssl.keystore.password", "pw"),
        ("ssl.endpoint.identification.algorithm", ""),
    ]);
    let pem = client_pem(&s, "other").unwrap();
    assert_eq!(pem.ca_certificates, None); // the system's, as the data plane
    assert_eq!(unsealed(&pem.sealed_key.unwrap(), "other"), leaf.key_der);
    assert!(!pem.endpoint_identification);
}

#[test]
fn a_jks_store_and_a_bad_password_are_the_data_planes_errors() {
    let dir = TempDir::new("pem-export-bad");
    let jks = dir.write("ts.jks", [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2]);
    let s = settings(&[("ssl.truststore.location", jks.to_str().unwrap())]);
    let err = client_pem(&s, "x").unwrap_err();
    assert_eq!(err.property, "ssl.truststore.location");
    assert!(err.message.contains("JKS keystores are not supported"), "{err}");
    let ca = Ca::new("kquota test CA");
    let ks = dir.write("c.p12", pkcs12(&ca.client("c"), &ca, "right"));
    let s = settings(&[
        ("ssl.keystore.location", ks.to_str().unwrap()),
        ("ssl.keystore.password", "wrong"),
    ]);
    assert_eq!(client_pem(&s, "x").unwrap_err().property, "ssl.keystore.password");
}
