"""The TLS test fixtures themselves, with real clients: Apache Kafka's SSL listener
(``kafka_broker``) takes confluent-kafka with the broker's test certificates byte for byte, names
the broker for 127.0.0.1 and localhost only, and refuses a client whose certificate it does not
trust (the TLS tests' refusals mean something only if it does); ``tls_support.HandshakeOnly``
completes handshakes with the certificate it is given and records the client's first bytes."""

from __future__ import annotations

import socket
import ssl

import pytest

from tls_support import HandshakeOnly, roundtrip
from waiting import wait_until


def test_confluent_kafka_over_ssl_with_kafkas_certificates(kafka_broker):
    conf = kafka_broker.client_config("SSL", "admin")
    roundtrip(conf.pop("bootstrap.servers"), conf)
    port = int(kafka_broker.listeners["SSL"].rsplit(":", 1)[1])
    ctx = ssl.create_default_context(cafile=str(kafka_broker.tls.ca_pem))
    admin = kafka_broker.tls.client
    ctx.load_cert_chain(str(admin.pem), str(admin.key))
    for name in ("localhost", "127.0.0.1"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=name) as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
    with pytest.raises(ssl.SSLCertVerificationError):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            ctx.wrap_socket(raw, server_hostname="broker.example")


def test_kafkas_ssl_listener_refuses_a_client_without_a_certificate_it_trusts(kafka_broker, pki):
    from confluent_kafka.admin import AdminClient

    address = kafka_broker.listeners["SSL"]
    port = int(address.rsplit(":", 1)[1])
    # librdkafka with a certificate from another CA (make_pki's), and with none: no metadata
    for cert in (pki.stranger, None):
        conf = {"bootstrap.servers": address, "security.protocol": "SSL",
                "ssl.ca.location": str(kafka_broker.tls.ca_pem), "socket.timeout.ms": 3000}
        if cert is not None:
            conf.update({"ssl.certificate.location": str(cert.cert_pem), "ssl.key.location": str(cert.key_pem)})
        with pytest.raises(Exception):
            AdminClient(conf).list_topics(timeout=3)
    # Python's ssl module: in TLS 1.3 the refusal is an alert after the client's handshake
    ctx = ssl.create_default_context(cafile=str(kafka_broker.tls.ca_pem))
    ctx.load_cert_chain(str(pki.stranger.cert_pem), str(pki.stranger.key_pem))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"\x00\x00\x00\x00")
                if not tls.recv(1):
                    raise ConnectionError("closed by the broker")


def test_handshake_only_completes_handshakes_and_records_the_first_bytes(pki):
    server = HandshakeOnly(pki.server)
    try:
        ctx = ssl.create_default_context(cafile=str(pki.ca.pem))
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"\x00\x00\x00\x04abcd")
                assert tls.recv(1) == b""  # then it closes
        # a client that does not trust it ends the handshake: refused, nothing recorded
        other = ssl.create_default_context(cafile=str(pki.other_ca.pem))
        with pytest.raises(ssl.SSLCertVerificationError):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
                other.wrap_socket(raw, server_hostname="localhost")
        assert wait_until(lambda: server.refused == 1, 5), server.refused
        assert server.handshakes == [b"\x00\x00\x00\x04abcd"]
    finally:
        server.stop()
