"""The TLS test fixtures themselves, with real clients: confluent-kafka over
``security.protocol=SSL`` produces and consumes through stunnel + tansu byte for byte; with mutual
TLS on, a client whose certificate the broker does not trust is refused (issue 28)."""

from __future__ import annotations

import ssl
import socket

import pytest

from tls_support import TlsBroker, roundtrip as _roundtrip, ssl_client_config


def test_confluent_kafka_over_ssl_through_stunnel_and_tansu(pki):
    broker = TlsBroker(pki)
    try:
        _roundtrip(broker.address, ssl_client_config(pki))
    finally:
        broker.stop()


def test_mutual_tls_admits_a_trusted_client_and_refuses_others(pki):
    from confluent_kafka.admin import AdminClient

    broker = TlsBroker(pki, client_ca=pki.ca.pem)
    try:
        _roundtrip(broker.address, ssl_client_config(pki, pki.alice))
        # librdkafka with a certificate from another CA, and with none: no metadata
        for client in (pki.stranger, None):
            admin = AdminClient({"bootstrap.servers": broker.address, **ssl_client_config(pki, client)})
            with pytest.raises(Exception):
                admin.list_topics(timeout=3)
        # Python's ssl module sees the refusal in the handshake itself
        ctx = ssl.create_default_context(cafile=str(pki.ca.pem))
        ctx.load_cert_chain(str(pki.stranger.cert_pem), str(pki.stranger.key_pem))
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                    tls.sendall(b"\x00\x00\x00\x00")
                    if not tls.recv(1):
                        raise ConnectionError("closed by the broker")
    finally:
        broker.stop()


def test_broker_certificate_is_for_localhost_and_127_0_0_1(pki):
    broker = TlsBroker(pki)
    try:
        ctx = ssl.create_default_context(cafile=str(pki.ca.pem))
        for name in ("localhost", "127.0.0.1"):
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname=name) as tls:
                    assert tls.version() in ("TLSv1.2", "TLSv1.3")
        with pytest.raises(ssl.SSLCertVerificationError):
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as raw:
                ctx.wrap_socket(raw, server_hostname="broker.example")
    finally:
        broker.stop()
