"""TLS on both sides of ``kquota proxy`` with Apache Kafka's own SSL and SASL_SSL listeners
(``kafka_broker``): mutual TLS from the proxy to a broker that requires client
certificates (``ssl.client.auth=required``), the broker refusing a proxy without a certificate or
with one it does not trust, and SASL_SSL relayed over the proxy's own TLS connection. What a
client behind the proxy can do at the broker is what the proxy's principal (``User:proxy``, a
super user here) can: shown against what the same client can do directly."""

from __future__ import annotations

import uuid

import pytest
from kafka_proxy import produce_one
from proxy_support import ProxyThread
from tls_support import make_pki, roundtrip

import kquota

pytest.importorskip("confluent_kafka")
RULES = "RULE:^.*CN=([^,]+).*$/$1/,DEFAULT"


def listener_props(kafka_broker, client_auth: str = "required") -> dict[str, str]:
    """The proxy's own listener: the broker's test certificate (127.0.0.1), clients of its CA."""
    return {"ssl.keystore.location": str(kafka_broker.tls.server.keystore_pem),
            "ssl.truststore.location": str(kafka_broker.tls.ca_pem), "ssl.client.auth": client_auth,
            "ssl.principal.mapping.rules": RULES}


def upstream_props(kafka_broker, keystore=None) -> dict[str, str]:
    """The proxy's connections to Kafka: its CA, and the proxy's PKCS12 keystore for mutual TLS."""
    props = {"ssl.truststore.location": str(kafka_broker.tls.ca_pem)}
    if keystore is not None:
        props.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore),
                      "ssl.keystore.password": kafka_broker.tls.password})
    return props


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def ssl_via(kafka_broker, proxy: ProxyThread, user: str) -> dict[str, str]:
    return {**kafka_broker.client_config("SSL", user), "bootstrap.servers": proxy.address}


def test_mutual_tls_to_kafkas_ssl_listener(kafka_broker):
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1e9})])  # measured, never held
    proxy = ProxyThread(("127.0.0.1", port_of(kafka_broker.listeners["SSL"])), qm=qm,
                        listener_tls=listener_props(kafka_broker),
                        upstream_tls=upstream_props(kafka_broker, kafka_broker.tls.proxy.p12))
    try:
        conf = ssl_via(kafka_broker, proxy, "alice")
        conf.pop("bootstrap.servers")
        roundtrip(proxy.address, conf)  # produced and consumed back byte for byte, TLS both sides
        # the proxy names alice by her certificate, for her quotas
        assert qm.measured_rate(kquota.ClientQuotaType.PRODUCE, "alice", "rdkafka") > 0
        # Kafka sees the proxy's certificate (User:proxy, a super user): alice writes through the
        # proxy a topic she has no ACL for, which directly the broker refuses her.
        topic = f"kq-mtls-{uuid.uuid4().hex[:8]}"
        kafka_broker.create_topic(topic)
        from confluent_kafka import KafkaError

        delivered, errors = produce_one(kafka_broker.client_config("SSL", "alice"), topic, timeout=15)
        assert not delivered and KafkaError.TOPIC_AUTHORIZATION_FAILED in {e.code() for e in errors}, errors
        delivered, errors = produce_one(ssl_via(kafka_broker, proxy, "alice"), topic)
        assert delivered, errors
    finally:
        proxy.stop()
        qm.close()


@pytest.mark.parametrize("keystore", ["none", "another CA"])
def test_kafka_refuses_a_proxy_without_a_certificate_it_trusts(kafka_broker, keystore, tmp_path):
    stranger = make_pki(tmp_path).stranger.p12 if keystore == "another CA" else None  # PKCS12, same password
    props = upstream_props(kafka_broker, stranger)
    if stranger is not None:
        from tls_support import PASSWORD

        props["ssl.keystore.password"] = PASSWORD
    proxy = ProxyThread(("127.0.0.1", port_of(kafka_broker.listeners["SSL"])),
                        listener_tls=listener_props(kafka_broker), upstream_tls=props)
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**ssl_via(kafka_broker, proxy, "alice"), "socket.timeout.ms": 5000})
        with pytest.raises(Exception):
            admin.list_topics(timeout=5)
        # counted as the broker's TLS refusal (Kafka's alert after the handshake, in TLS 1.3), not
        # as a broker that closed the connection
        assert proxy.proxy.tls_failures["broker"]["alert_received"] >= 1, proxy.proxy.tls_failures
    finally:
        proxy.stop()


def test_sasl_ssl_both_sides_with_kafkas_credentials(kafka_broker):
    prefix = f"kq-saslssl-{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}-t"
    kafka_broker.create_topic(topic)
    kafka_broker.allow("User:alice", prefix)
    qm = kquota.QuotaManager()
    proxy = ProxyThread(("127.0.0.1", port_of(kafka_broker.listeners["SASL_SSL"])), qm=qm,
                        listener_tls=listener_props(kafka_broker, client_auth="none"),
                        upstream_tls=upstream_props(kafka_broker), sasl_listener=True)
    try:
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            conf = {**kafka_broker.client_config("SASL_SSL", "alice", mechanism), "bootstrap.servers": proxy.address}
            delivered, errors = produce_one(conf, topic)
            assert delivered, (mechanism, errors)
            conf["sasl.password"] = "not-alices"
            delivered, errors = produce_one(conf, topic, timeout=15)
            assert not delivered
            from confluent_kafka import KafkaError

            assert KafkaError._AUTHENTICATION in {e.code() for e in errors}, (mechanism, errors)
        # bob authenticates but has no ACL: the broker refuses his write through the proxy
        delivered, errors = produce_one({**kafka_broker.client_config("SASL_SSL", "bob", "SCRAM-SHA-512"),
                                         "bootstrap.servers": proxy.address}, topic, timeout=15)
        assert not delivered
    finally:
        proxy.stop()
        qm.close()
