"""Kafka client properties read for ``kquota configs --command-config`` (kquota.kafka.client_security):
Kafka's defaults (GSSAPI, https endpoint identification; a store without a type read in its own
format, by the data plane's reader), JAAS lines, inline PEM, PKCS#1 and SEC1 keys."""

from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from tls_support import PASSWORD

from kquota.exceptions import KQuotaError
from kquota.kafka.client_security import client_security, parse_jaas_config
from kquota.proxy.tls_settings import parse_listener, upstream_security
from kquota.stores.kafka.security import librdkafka_security

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_plaintext_is_the_default_and_unused_properties_are_named():
    s = client_security({"ssl.truststore.location": "/x", "sasl.mechanism": "PLAIN"})
    assert s.protocol == "PLAINTEXT" and s.ssl_context is None and not s.sasl
    assert s.ignored == ("sasl.mechanism", "ssl.truststore.location")


def test_jaas_config_is_read_as_kafka_reads_it():
    assert parse_jaas_config(f'{PLAIN} required username="al ice" password="p\\"w;x";', "w") == (
        PLAIN, {"username": "al ice", "password": 'p"w;x'})
    assert parse_jaas_config(f"{PLAIN} required username=bob password=secret ;", "w")[1] == {
        "username": "bob", "password": "secret"}
    for bad in (f'{PLAIN} username="a";', f'{PLAIN} required username="a"', f'{PLAIN} required "a";'):
        with pytest.raises(KQuotaError, match="^w: "):
            parse_jaas_config(bad, "w")


def test_sasl_plain_credentials_and_refused_mechanisms():
    s = client_security({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                         "sasl.jaas.config": f'{PLAIN} required username="admin" password="pw";'}, "c.properties")
    assert (s.protocol, s.sasl_mechanism, s.username, s.password) == ("SASL_PLAINTEXT", "PLAIN", "admin", "pw")
    with pytest.raises(KQuotaError, match=r"c.properties: sasl.mechanism: GSSAPI \(Kafka's default\)"):
        client_security({"security.protocol": "SASL_PLAINTEXT"}, "c.properties")
    with pytest.raises(KQuotaError, match="SCRAM-SHA-256 is not supported"):
        client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256"})
    with pytest.raises(KQuotaError, match="sasl.jaas.config is missing"):
        client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
    with pytest.raises(KQuotaError, match="not PLAIN's login module"):
        client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config":
                         'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";'})
    with pytest.raises(KQuotaError, match="security.protocol: invalid value 'TLS'"):
        client_security({"security.protocol": "TLS"})


def test_tls_stores_and_kafka_defaults(pki, tmp_path):
    s = client_security({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                         "ssl.truststore.location": str(pki.ca.pem)})
    assert s.ssl_context.check_hostname and s.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert s.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert len(s.ssl_context.get_ca_certs()) == 1
    s = client_security({"security.protocol": "SSL", "ssl.truststore.certificates": pki.ca.pem.read_text(),
                         "ssl.endpoint.identification.algorithm": ""})
    assert not s.ssl_context.check_hostname and len(s.ssl_context.get_ca_certs()) == 1
    s = client_security({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
                         "ssl.truststore.location": str(pki.ca.p12), "ssl.truststore.password": PASSWORD})
    assert len(s.ssl_context.get_ca_certs()) == 1
    # Kafka's store type default is JKS: a location without a type is read in its own format, as
    # the data plane reads it; a JKS store is refused with the way out.
    s = client_security({"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca.pem)})
    assert len(s.ssl_context.get_ca_certs()) == 1
    jks = tmp_path / "ts.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(KQuotaError, match="^c.properties: ssl.truststore.location: JKS keystores are not supported: "
                                          "convert to PKCS12 with `keytool -importkeystore"):
        client_security({"security.protocol": "SSL", "ssl.truststore.location": str(jks)}, "c.properties")
    with pytest.raises(KQuotaError, match='ssl.keystore.type: unsupported type "BKS"'):
        client_security({"security.protocol": "SSL", "ssl.keystore.type": "BKS",
                         "ssl.keystore.location": str(pki.alice.keystore_pem)})
    with pytest.raises(KQuotaError, match="ssl.endpoint.identification.algorithm: invalid value .*expected https"):
        client_security({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"})
    with pytest.raises(KQuotaError, match="ssl.truststore.location: cannot read the file"):
        client_security({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                         "ssl.truststore.location": str(tmp_path / "missing.pem")})
    # Key stores: PEM (key + chain), inline PEM, PKCS12; a wrong key password in one line.
    for props in (
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.alice.keystore_pem)},
        {"ssl.keystore.certificate.chain": pki.alice.pem_text(), "ssl.keystore.key": pki.alice.key_text()},
        {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.alice.p12),
         "ssl.keystore.password": PASSWORD},
    ):
        assert client_security({"security.protocol": "SSL", **props}).ssl_context is not None
    enc = tmp_path / "enc.pem"
    enc.write_bytes(pki.alice.encrypted_key_pem.read_bytes() + pki.alice.cert_pem.read_bytes())
    with pytest.raises(KQuotaError, match="ssl.key.password: wrong password for the encrypted private key"):
        client_security({"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                         "ssl.keystore.location": str(enc), "ssl.key.password": "wrong"})
    with pytest.raises(KQuotaError, match="must be set together"):
        client_security({"security.protocol": "SSL", "ssl.keystore.key": pki.alice.key_text()})


def test_an_untyped_pem_truststore_means_the_same_to_the_data_plane_and_the_kafka_store(pki):
    """One ``--broker-config`` with a PEM truststore and no ``ssl.truststore.type`` (Kafka's
    default is JKS): the data plane's upstream connections take it, and so do the ``kafka://``
    store's and the fleet's (librdkafka) settings and the admin client's context, with the same
    certificates; the client key reaches librdkafka sealed."""
    props = {"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca.pem),
             "ssl.keystore.location": str(pki.alice.keystore_pem)}
    upstream = upstream_security(props, "broker.properties", parse_listener("SSL://127.0.0.1:9093"))
    assert upstream.protocol == "SSL" and str(pki.ca.pem) in upstream.watched_files
    store = librdkafka_security(props, "broker.properties")
    ca = x509.load_pem_x509_certificates(store["ssl.ca.pem"].encode())
    assert ca == [pki.ca.certificate]
    assert x509.load_pem_x509_certificates(store["ssl.certificate.pem"].encode())[0] == pki.alice.certificate
    assert "BEGIN ENCRYPTED PRIVATE KEY" in store["ssl.key.pem"] and "BEGIN PRIVATE KEY" not in store["ssl.key.pem"]
    key = serialization.load_pem_private_key(store["ssl.key.pem"].encode(), store["ssl.key.password"].encode())
    assert key.public_key() == pki.alice.key.public_key()
    (trusted,) = client_security(props, "broker.properties").ssl_context.get_ca_certs(binary_form=True)
    assert x509.load_der_x509_certificate(trusted) == pki.ca.certificate


def _self_signed_rsa() -> tuple[rsa.RSAPrivateKey, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rsa client")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    return key, cert.public_bytes(serialization.Encoding.PEM).decode()


def test_pkcs1_and_sec1_keys_reach_pythons_ssl_sealed(pki):
    """Keys in their traditional PEM forms (``BEGIN RSA PRIVATE KEY``: PKCS#1, ``BEGIN EC PRIVATE
    KEY``: SEC1) are sealed as encrypted PKCS#8 holding the same key: the context takes it with
    its certificate (OpenSSL checks that they match)."""
    rsa_key, rsa_cert = _self_signed_rsa()
    for key, cert_pem, marker in ((pki.alice.key, pki.alice.pem_text(), "BEGIN EC PRIVATE KEY"),
                                  (rsa_key, rsa_cert, "BEGIN RSA PRIVATE KEY")):
        traditional = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                        serialization.NoEncryption()).decode()
        assert marker in traditional
        s = client_security({"security.protocol": "SSL", "ssl.keystore.certificate.chain": cert_pem,
                             "ssl.keystore.key": traditional})
        assert s.client_certificate and s.ssl_context is not None
        sealed = s.tls.identity_pem
        assert marker.encode() not in sealed and b"BEGIN ENCRYPTED PRIVATE KEY" in sealed
        back = serialization.load_pem_private_key(sealed, s.tls.key_password.encode())
        assert back.private_numbers() == key.private_numbers()
