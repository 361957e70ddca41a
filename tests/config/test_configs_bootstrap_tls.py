"""``kquota configs --bootstrap-server --command-config`` over real TLS: Apache Kafka's
SSL listener (a client certificate required, the principal its CN) and SASL_SSL listener
(``kafka_broker``) answer DescribeClientQuotas and AlterClientQuotas themselves, so the whole
admin round trip runs over TLS to Kafka: PEM and PKCS12 trust and key stores, an encrypted PEM
key, SASL/PLAIN inside TLS, Kafka's authorizer refusing a user per entity, and the failures
(wrong CA, no client certificate, a wrong store password) in one line. The quotas set here are
Kafka's own, on the shared broker: each test uses entities of its own and deletes them."""

from __future__ import annotations

import uuid

from cryptography.hazmat.primitives.serialization import (BestAvailableEncryption, Encoding, PrivateFormat,
                                                          load_pem_private_key)
from test_configs_bootstrap import described, props, run
from tls_support import PASSWORD


def pem_ssl(tmp_path, kafka_broker, user: str = "admin") -> str:
    """SSL with Kafka's CA and ``user``'s certificate, both PEM files."""
    return props(tmp_path, f"ssl-{user}.properties", **{
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(kafka_broker.tls.ca_pem),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(kafka_broker.tls.cert(user).keystore_pem)})


def pkcs12_ssl(tmp_path, kafka_broker, user: str) -> str:
    """SSL with Kafka's PKCS12 truststore and ``user``'s PKCS12 keystore."""
    tls = kafka_broker.tls
    return props(tmp_path, f"p12-{user}.properties", **{
        "security.protocol": "SSL", "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(tls.truststore),
        "ssl.truststore.password": tls.password, "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.cert(user).p12), "ssl.keystore.password": tls.password})


def plain_sasl_ssl(tmp_path, kafka_broker, user: str) -> str:
    """SASL_SSL, SASL/PLAIN with ``user``'s password, Kafka's PKCS12 truststore."""
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{kafka_broker.users[user]}";')
    return props(tmp_path, f"sasl-{user}.properties", **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas,
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(kafka_broker.tls.truststore),
        "ssl.truststore.password": kafka_broker.tls.password})


def test_ssl_with_pem_stores_round_trips(kafka_broker, capsys, tmp_path):
    address = kafka_broker.listeners["SSL"]
    port = address.rsplit(":", 1)[1]
    ip = f"127.{uuid.uuid4().int % 200 + 20}.0.7"  # an address of this test's own
    conf = pem_ssl(tmp_path, kafka_broker)
    code, out, err = run(capsys, "--bootstrap-server", address, "--command-config", conf, "--alter",
                         "--add-config", "connection_creation_rate=7", "--ip", ip)
    assert code == 0, err
    assert out.strip() == f'Completed updating config for ip="{ip}".'
    try:
        assert described(capsys, address, "--command-config", conf, "--ip", ip) == [
            {"entity": {"ip": ip}, "config": {"connection_creation_rate": 7}}]
        # By name too: the broker's certificate names localhost (ssl.endpoint.identification.algorithm=https).
        assert described(capsys, f"localhost:{port}", "--command-config", conf, "--ip", ip) != []
        # The port speaks TLS only: without the properties the same command fails, in one line.
        code, _, err = run(capsys, "--bootstrap-server", address, "--describe")
        assert code == 1 and err.startswith("kquota: error: ") and "Traceback" not in err, err
    finally:
        assert run(capsys, "--bootstrap-server", address, "--command-config", conf, "--alter",
                   "--delete-config", "connection_creation_rate", "--ip", ip)[0] == 0
    assert described(capsys, address, "--command-config", conf, "--ip", ip) == []


def test_sasl_ssl_with_a_pkcs12_truststore_kafka_refuses_alice(kafka_broker, capsys, tmp_path):
    """SASL/PLAIN inside TLS, trust from a PKCS12 truststore: the admin alters; alice, not
    authorized on the cluster by Kafka's authorizer, is refused per entity and may not describe."""
    address = kafka_broker.listeners["SASL_SSL"]
    client = f"tls-{uuid.uuid4().hex[:8]}"
    admin, alice = (plain_sasl_ssl(tmp_path, kafka_broker, user) for user in ("admin", "alice"))
    code, out, err = run(capsys, "--bootstrap-server", address, "--command-config", alice, "--alter",
                         "--add-config", "producer_byte_rate=1000", "--user", "alice", "--client", client)
    assert code == 1 and (f'Error while updating config for user="alice", client-id="{client}": '
                          "ClusterAuthorizationException") in err, err
    code, out, err = run(capsys, "--bootstrap-server", address, "--command-config", admin, "--alter",
                         "--add-config", "producer_byte_rate=1000", "--user", "alice", "--client", client)
    assert code == 0, err
    try:
        code, out, err = run(capsys, "--bootstrap-server", address, "--command-config", alice, "--describe")
        assert code == 1 and "ClusterAuthorizationException" in err, err  # alice may not read the quotas either
        assert described(capsys, address, "--command-config", admin, "--user", "alice", "--client", client) == [
            {"entity": {"user": "alice", "client-id": client}, "config": {"producer_byte_rate": 1000}}]
    finally:
        assert run(capsys, "--bootstrap-server", address, "--command-config", admin, "--alter",
                   "--delete-config", "producer_byte_rate", "--user", "alice", "--client", client)[0] == 0


def test_mutual_tls_principal_is_the_certificates(kafka_broker, capsys, tmp_path):
    """PKCS12 trust and key stores on the SSL listener: Kafka names the client by its
    certificate's CN, so admin's certificate alters and alice's is refused; a PEM keystore with an
    encrypted key (``ssl.key.password``) does as well."""
    address = kafka_broker.listeners["SSL"]
    client = f"tls-{uuid.uuid4().hex[:8]}"
    admin, alice = (pkcs12_ssl(tmp_path, kafka_broker, user) for user in ("admin", "alice"))
    change = ["--alter", "--add-config", "consumer_byte_rate=2000", "--client", client]
    code, _, err = run(capsys, "--bootstrap-server", address, "--command-config", alice, *change)
    assert code == 1 and f'client-id="{client}": ClusterAuthorizationException' in err, err
    code, _, err = run(capsys, "--bootstrap-server", address, "--command-config", admin, *change)
    assert code == 0, err
    try:
        cert = kafka_broker.tls.client
        key = load_pem_private_key(cert.key.read_bytes(), None)
        encrypted = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(PASSWORD.encode()))
        (tmp_path / "enc-keystore.pem").write_bytes(encrypted + cert.pem.read_bytes())
        pem = props(tmp_path, "pem.properties", **{
            "security.protocol": "SSL", "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(kafka_broker.tls.ca_pem), "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tmp_path / "enc-keystore.pem"), "ssl.key.password": PASSWORD})
        assert described(capsys, address, "--command-config", pem, "--client", client) == [
            {"entity": {"client-id": client}, "config": {"consumer_byte_rate": 2000}}]
    finally:
        assert run(capsys, "--bootstrap-server", address, "--command-config", admin, "--alter",
                   "--delete-config", "consumer_byte_rate", "--client", client)[0] == 0


def test_tls_failures_are_one_line(kafka_broker, pki, capsys, tmp_path):
    address = kafka_broker.listeners["SSL"]
    wrong_ca = props(tmp_path, "other.properties", **{"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                                      "ssl.truststore.location": str(pki.ca.pem)})
    code, _, err = run(capsys, "--bootstrap-server", address, "--command-config", wrong_ca, "--describe")
    assert code == 1 and "TLS handshake with 127.0.0.1:" in err and "certificate verify failed" in err, err
    no_cert = props(tmp_path, "nocert.properties", **{"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                                      "ssl.truststore.location": str(kafka_broker.tls.ca_pem)})
    code, _, err = run(capsys, "--bootstrap-server", address, "--command-config", no_cert, "--describe")
    # TLS 1.3: the server's refusal arrives after the handshake (an alert or a close).
    assert code == 1 and err.startswith(f"kquota: error: TLS connection to {address} failed: ") \
        and err.endswith("(if the server requires a client certificate: set ssl.keystore.location)\n"), err
    bad_password = props(tmp_path, "badpw.properties", **{
        "security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(kafka_broker.tls.truststore), "ssl.truststore.password": "wrong"})
    code, _, err = run(capsys, "--bootstrap-server", address, "--command-config", bad_password, "--describe")
    assert code == 1 and "ssl.truststore.password: wrong password for the PKCS12 store" in err, err
