"""Bad input on the proxy's TLS sides: each closes only the affected connection (or
refuses to start, for a configuration error, naming the property and the file), is counted by
cause in the plane's stats and logged once per cause; the proxy goes on serving good clients.
Real components: Apache Kafka's SSL listener behind the proxy (mutual TLS, ``kafka_broker``),
confluent-kafka, Python's ssl module as a raw client; the proxy's listener has certificates the
tests make (``make_pki``: expired, not yet valid, from another CA, without a subject). One stand-in:
a handshake-only TLS server for a broker certificate naming another host (its test says why)."""

from __future__ import annotations

import logging
import socket
import ssl
import subprocess
import sys
import time

import pytest

from proxy_support import ProxyThread
from waiting import free_port, wait_until
from test_proxy_tls import kafka_ssl, listener_props, tls_proxy, upstream_props
from tls_support import PASSWORD, HandshakeOnly, _name, roundtrip, ssl_client_config

pytestmark = pytest.mark.process


def _port(proxy: ProxyThread) -> int:
    return int(proxy.address.rpartition(":")[2])


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the peer closes ``sock`` within ``seconds`` (EOF or reset)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


def _tls_client(pki, port: int, cert=None) -> bool:
    """A TLS client with ``cert`` sends a request; True when the proxy closed it."""
    ctx = ssl.create_default_context(cafile=str(pki.ca.pem))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert_pem), str(cert.key_pem))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        s.sendall(b"\x00\x00\x00\x0a" + b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
        return _closed_within(s, 5)
    except (ConnectionError, ssl.SSLError):
        return True
    finally:
        raw.close()


def test_bad_client_certificates_and_plaintext_are_closed_counted_and_logged_once(pki, kafka_broker, caplog):
    caplog.set_level(logging.INFO, logger="kquota.proxy")
    proxy = tls_proxy(kafka_broker, pki)
    try:
        port = _port(proxy)
        cases = {"untrusted_certificate": pki.stranger, "expired_certificate": pki.expired,
                 "not_yet_valid_certificate": pki.not_yet_valid, "no_subject": pki.no_subject}
        for cause, cert in cases.items():
            for _ in range(2):
                assert _tls_client(pki, port, cert), cause
        # plaintext Kafka bytes on the TLS port
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"\x00\x00\x00\x0a" + b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
                assert _closed_within(s, 5)
        expected = dict.fromkeys(cases, 2) | {"not_tls": 2}
        assert wait_until(lambda: all(proxy.proxy.tls_failures["client"][c] == n for c, n in expected.items()), 5), \
            proxy.proxy.tls_failures
        phrases = ("untrusted certificate", "expired certificate", "not yet valid certificate", "no subject", "not tls")

        def logged(phrase: str) -> list[str]:
            return [r.getMessage() for r in caplog.records if phrase in r.getMessage()]

        # The counters are the data plane's, the log lines the Python side's (it reads the plane's
        # events as they come): wait for a line per cause, then check there is only one.
        wait_until(lambda: all(logged(p) for p in phrases), 5)
        for phrase in phrases:
            assert len(logged(phrase)) == 1, (phrase, logged(phrase))  # once per cause, not once per connection
        assert proxy.proxy.connections.__len__() == 0  # no slot kept by any of them
        from kquota.prometheus import exposition

        scraped = exposition(proxy.qm).decode()  # what the metrics port serves
        assert any(line.startswith("kafka_server_proxy_tls_client_expired_certificate_total 2")
                   for line in scraped.splitlines()), [x for x in scraped.splitlines() if "proxy_tls" in x]
        roundtrip(proxy.address, ssl_client_config(pki, pki.alice))  # still serving
    finally:
        proxy.stop()


@pytest.mark.timing
def test_unfinished_handshakes_take_no_connection_slot_and_are_closed_within_10s(pki, kafka_broker):
    proxy = tls_proxy(kafka_broker, pki, max_client_sockets=6)
    stalled = []
    try:
        port = _port(proxy)
        t0 = time.monotonic()
        stalled = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(10)]
        # More unfinished handshakes than the descriptor guard's places: a good client is still served.
        roundtrip(proxy.address, ssl_client_config(pki, pki.alice))
        assert proxy.proxy.refused_client_sockets == 0
        for s in stalled:
            assert _closed_within(s, max(0.1, t0 + 12 - time.monotonic()))
        assert time.monotonic() - t0 < 12
        assert wait_until(lambda: proxy.proxy.tls_failures["client"]["timeout"] == 10, 2), proxy.proxy.tls_failures
    finally:
        for s in stalled:
            s.close()
        proxy.stop()


def test_handshakes_under_way_are_bounded(pki, kafka_broker):
    proxy = tls_proxy(kafka_broker, pki, max_tls_handshakes=2)
    stalled = []
    try:
        port = _port(proxy)
        stalled = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as third:
            assert _closed_within(third, 3)
        assert wait_until(lambda: proxy.proxy.tls_failures["client"]["refused_handshakes"] == 1, 5)
    finally:
        for s in stalled:
            s.close()
        proxy.stop()


def test_tls_client_on_a_plaintext_port_is_closed(pki, kafka_broker):
    proxy = ProxyThread(kafka_ssl(kafka_broker), upstream_tls=upstream_props(kafka_broker))
    try:
        assert _tls_client(pki, _port(proxy), pki.alice)
        roundtrip(proxy.address, {})  # plaintext clients, TLS to the broker
    finally:
        proxy.stop()


def _refused_through(proxy: ProxyThread, pki) -> None:
    """A client of ``proxy`` gets no metadata."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": proxy.address, **ssl_client_config(pki, pki.alice),
                         "socket.timeout.ms": 3000})
    with pytest.raises(Exception):
        admin.list_topics(timeout=3)


def test_broker_certificate_from_a_ca_the_proxy_does_not_trust_is_refused(pki, kafka_broker):
    """Kafka's real certificate, but the proxy trusts only the tests' own CA."""
    proxy = ProxyThread(kafka_ssl(kafka_broker), listener_tls=listener_props(pki),
                        upstream_tls=upstream_props(kafka_broker) | {"ssl.truststore.location": str(pki.ca.pem)})
    try:
        _refused_through(proxy, pki)
        failures = proxy.proxy.tls_failures["broker"]
        assert failures["untrusted_certificate"] >= 1 and not failures["alert_received"], failures
    finally:
        proxy.stop()


def test_broker_certificate_for_another_host_is_refused(pki):
    """The broker is :class:`tls_support.HandshakeOnly`, not Kafka: the shared broker's certificate
    (for 127.0.0.1 and localhost) cannot be swapped for one naming another host under the other
    tests, and a broker of its own costs a minute; only the handshake is tested here."""
    elsewhere = pki.ca.issue("elsewhere", _name(O="kquota", CN="broker.elsewhere.test"), server=True,
                             hosts=("broker.elsewhere.test",))
    broker = HandshakeOnly(elsewhere)
    try:
        proxy = ProxyThread(("127.0.0.1", broker.port), listener_tls=listener_props(pki),
                            upstream_tls={"ssl.truststore.location": str(pki.ca.pem)})
        try:
            _refused_through(proxy, pki)
            assert proxy.proxy.tls_failures["broker"]["name_mismatch"] >= 1, proxy.proxy.tls_failures
            assert broker.refused >= 1 and broker.handshakes == []  # the proxy ended every handshake
        finally:
            proxy.stop()
        # ssl.endpoint.identification.algorithm empty: the name is not checked (Kafka's opt-out),
        # the handshake completes and the client's first request is relayed over it.
        proxy = ProxyThread(("127.0.0.1", broker.port), listener_tls=listener_props(pki),
                            upstream_tls={"ssl.truststore.location": str(pki.ca.pem),
                                          "ssl.endpoint.identification.algorithm": ""})
        try:
            _refused_through(proxy, pki)  # HandshakeOnly answers nothing
            assert not proxy.proxy.tls_failures["broker"]["name_mismatch"], proxy.proxy.tls_failures
            assert broker.handshakes, "no handshake completed"
            first = broker.handshakes[0]
            # a Kafka request frame: its size, then ApiVersions' key (18), librdkafka's first request
            assert len(first) >= 8 and int.from_bytes(first[:4], "big") >= 4 \
                and int.from_bytes(first[4:6], "big") == 18, first
        finally:
            proxy.stop()
    finally:
        broker.stop()


def test_configuration_errors_refuse_to_start_naming_the_property_and_file(pki, tmp_path):
    missing = tmp_path / "missing.p12"
    for props, words in (
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.server.p12),
          "ssl.keystore.password": PASSWORD + "x"}, ("ssl.keystore.password", str(pki.server.p12))),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(missing), "ssl.keystore.password": PASSWORD},
         ("ssl.keystore.location", str(missing))),
    ):
        with pytest.raises(ValueError) as err:
            ProxyThread(("127.0.0.1", 1), listener_tls=props)
        assert all(w in str(err.value) for w in words), str(err.value)
    # the command line: one line, no traceback
    config = tmp_path / "proxy.properties"
    config.write_text(f"ssl.keystore.type=PKCS12\nssl.keystore.location={missing}\nssl.keystore.password={PASSWORD}\n")
    r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1",
                        "--listen", f"SSL://127.0.0.1:{free_port()}", "--config", str(config),
                        "--store", f"sqlite:///{tmp_path}/q.db"], capture_output=True, timeout=60, check=False)
    err_lines = r.stderr.decode().strip().splitlines()
    assert r.returncode == 1 and len(err_lines) == 1, err_lines
    assert "ssl.keystore.location" in err_lines[0] and str(missing) in err_lines[0] and str(config) in err_lines[0]
