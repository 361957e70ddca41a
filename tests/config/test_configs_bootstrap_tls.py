"""``kquota configs --bootstrap-server --command-config`` over real TLS (issue 31): stunnel4 accepts
TLS in front of a ``kquota proxy`` process (tansu behind it, through a SASL/PLAIN front), so the
whole admin round trip runs over TLS: SSL and SASL_SSL, PEM and PKCS12 trust and key stores,
mutual TLS, and the failures (wrong CA, no client certificate) in one line."""

from __future__ import annotations

import pytest
from proxy_fakes import SaslFront
from test_configs_bootstrap import ADMINS, described, props, run, sasl_props
from proxy_cli import start_proxy, stop_proxy
from tls_support import PASSWORD, Stunnel, TlsBroker


@pytest.fixture(scope="module")
def proxy_ports(tmp_path_factory):
    """Two proxies following one store: a PLAINTEXT listener (its TLS clients, behind stunnel,
    are ANONYMOUS: an admin here) and a SASL_PLAINTEXT one (SASL_SSL clients behind stunnel are
    their SASL principal; one that does not authenticate is closed, as Kafka closes it)."""
    front = SaslFront()
    home = tmp_path_factory.mktemp("proxy")
    started = [start_proxy(front, home, "--admin-principals", ADMINS, protocol=protocol)
               for protocol in ("PLAINTEXT", "SASL_PLAINTEXT")]
    yield started[0][1], started[1][1]
    stopped = [stop_proxy(proc) for proc, _ in started]
    front.stop()
    assert all(code == 0 for code, _ in stopped), stopped


@pytest.fixture(scope="module")
def tls(pki, proxy_ports):
    s = Stunnel(pki, proxy_ports[0])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mtls(pki, proxy_ports):
    s = Stunnel(pki, proxy_ports[1], client_ca=pki.ca.pem)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mtls_plain(pki, proxy_ports):
    s = Stunnel(pki, proxy_ports[0], client_ca=pki.ca.pem)
    yield s
    s.stop()


def test_ssl_with_a_pem_truststore_round_trips(pki, tls, capsys, tmp_path):
    conf = props(tmp_path, "ssl.properties", **{"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                                "ssl.truststore.location": str(pki.ca.pem)})
    code, out, err = run(capsys, "--bootstrap-server", tls.address, "--command-config", conf, "--alter",
                         "--add-config", "connection_creation_rate=7", "--ip", "127.0.0.7")
    assert code == 0, err
    assert out.strip() == 'Completed updating config for ip="127.0.0.7".'
    assert described(capsys, tls.address, "--command-config", conf, "--ip", "127.0.0.7") == [
        {"entity": {"ip": "127.0.0.7"}, "config": {"connection_creation_rate": 7}}]
    # By name too: the server certificate names localhost (ssl.endpoint.identification.algorithm=https).
    assert described(capsys, f"localhost:{tls.port}", "--command-config", conf, "--ip", "127.0.0.7") != []
    # The port speaks TLS only: without the properties the same command fails, in one line.
    code, _, err = run(capsys, "--bootstrap-server", tls.address, "--describe")
    assert code == 1 and err.startswith("kquota: error: ") and "Traceback" not in err, err
    assert run(capsys, "--bootstrap-server", tls.address, "--command-config", conf, "--alter",
               "--delete-config", "connection_creation_rate", "--ip", "127.0.0.7")[0] == 0


def test_sasl_ssl_with_pkcs12_stores_and_mutual_tls(pki, mtls, mtls_plain, capsys, tmp_path):
    """A client certificate from a PKCS12 keystore (mutual TLS), trust from a PKCS12 truststore,
    SASL/PLAIN inside: the admin alters, alice is refused per entity."""
    stores = {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki.ca.p12),
              "ssl.truststore.password": PASSWORD, "ssl.keystore.type": "PKCS12",
              "ssl.keystore.location": str(pki.admin.p12), "ssl.keystore.password": PASSWORD}
    admin = sasl_props(tmp_path, "admin", "SASL_SSL", **stores)
    alice = sasl_props(tmp_path, "alice", "SASL_SSL", **stores)
    code, out, err = run(capsys, "--bootstrap-server", mtls.address, "--command-config", alice, "--alter",
                         "--add-config", "producer_byte_rate=1000", "--user", "alice", "--client", "app")
    assert code == 1 and ('Error while updating config for user="alice", client-id="app": '
                          "ClusterAuthorizationException: principal User:alice may not alter client quotas") in err, err
    code, out, err = run(capsys, "--bootstrap-server", mtls.address, "--command-config", admin, "--alter",
                         "--add-config", "producer_byte_rate=1000", "--user", "alice", "--client", "app")
    assert code == 0, err
    code, out, err = run(capsys, "--bootstrap-server", mtls.address, "--command-config", alice, "--describe")
    assert code == 1 and "ClusterAuthorizationException" in err, err  # alice may not read the quotas either
    assert described(capsys, mtls.address, "--command-config", admin, "--user", "alice", "--client", "app") == [
        {"entity": {"user": "alice", "client-id": "app"}, "config": {"producer_byte_rate": 1000}}]
    # A PEM keystore with an encrypted key (ssl.key.password) does as well (SSL, no SASL: the
    # PLAINTEXT proxy behind mutual TLS, whose ANONYMOUS clients are admins).
    (tmp_path / "enc-keystore.pem").write_bytes(pki.alice.encrypted_key_pem.read_bytes()
                                                + pki.alice.cert_pem.read_bytes())
    pem = props(tmp_path, "pem.properties", **{
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca.pem),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "enc-keystore.pem"),
        "ssl.key.password": PASSWORD})
    assert len(described(capsys, mtls_plain.address, "--command-config", pem, "--entity-type", "users",
                         "--entity-type", "clients")) == 1
    assert run(capsys, "--bootstrap-server", mtls.address, "--command-config", admin, "--alter",
               "--delete-config", "producer_byte_rate", "--user", "alice", "--client", "app")[0] == 0


def test_tls_failures_are_one_line(pki, tls, mtls, capsys, tmp_path):
    wrong_ca = props(tmp_path, "other.properties", **{"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                                      "ssl.truststore.location": str(pki.other_ca.pem)})
    code, _, err = run(capsys, "--bootstrap-server", tls.address, "--command-config", wrong_ca, "--describe")
    assert code == 1 and "TLS handshake with 127.0.0.1:" in err and "certificate verify failed" in err, err
    no_cert = props(tmp_path, "nocert.properties", **{"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                                      "ssl.truststore.location": str(pki.ca.pem)})
    code, _, err = run(capsys, "--bootstrap-server", mtls.address, "--command-config", no_cert, "--describe")
    # TLS 1.3: the server's refusal arrives after the handshake (an alert or a close).
    assert code == 1 and err.startswith(f"kquota: error: TLS connection to {mtls.address} failed: ") \
        and err.endswith("(if the server requires a client certificate: set ssl.keystore.location)\n"), err
    bad_password = props(tmp_path, "badpw.properties", **{
        "security.protocol": "SSL", "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki.ca.p12),
        "ssl.truststore.password": "wrong"})
    code, _, err = run(capsys, "--bootstrap-server", tls.address, "--command-config", bad_password, "--describe")
    assert code == 1 and "ssl.truststore.password: wrong password for the PKCS12 store" in err, err


def test_a_broker_without_the_quota_apis_is_named_over_tls(pki, capsys, tmp_path):
    """tansu (behind stunnel) lists neither API in its ApiVersions answer: the TLS connection and
    that exchange succeed, and the command says what the cluster lacks, in one line."""
    broker = TlsBroker(pki)
    try:
        conf = props(tmp_path, "ssl.properties", **{"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                                    "ssl.truststore.location": str(pki.ca.pem)})
        code, _, err = run(capsys, "--bootstrap-server", broker.address, "--command-config", conf, "--describe")
        assert code == 1 and err == (f"kquota: error: UnsupportedVersionException: {broker.address} does not "
                                     "support DescribeClientQuotas (API key 48)\n"), err
        code, _, err = run(capsys, "--bootstrap-server", broker.address, "--command-config", conf, "--alter",
                           "--add-config", "producer_byte_rate=5", "--user", "a")
        assert code == 1 and "does not support AlterClientQuotas (API key 49)" in err, err
    finally:
        broker.stop()
