"""Kafka client properties read for ``kquota configs --command-config`` (kquota.kafka.client_security):
Kafka's defaults (JKS stores, GSSAPI, https endpoint identification), JAAS lines, inline PEM."""

from __future__ import annotations

import ssl

import pytest
from tls_support import PASSWORD

from kquota.kafka.client_security import client_security, parse_jaas_config
from kquota.exceptions import KQuotaError

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
    # Kafka's store type default is JKS: a location without a type is refused with the way out.
    with pytest.raises(KQuotaError, match="ssl.truststore.type: JKS cannot be read here.*Kafka's default"):
        client_security({"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca.pem)})
    with pytest.raises(KQuotaError, match="ssl.keystore.type: unsupported store type 'BKS'"):
        client_security({"security.protocol": "SSL", "ssl.keystore.type": "BKS",
                         "ssl.keystore.location": str(pki.alice.keystore_pem)})
    with pytest.raises(KQuotaError, match="ssl.endpoint.identification.algorithm: expected https or empty"):
        client_security({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"})
    with pytest.raises(KQuotaError, match="ssl.truststore.location: cannot read"):
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
    with pytest.raises(KQuotaError, match="ssl.keystore: unusable key or certificate"):
        client_security({"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                         "ssl.keystore.location": str(enc), "ssl.key.password": "wrong"})
    with pytest.raises(KQuotaError, match="go together"):
        client_security({"security.protocol": "SSL", "ssl.keystore.key": pki.alice.key_text()})
