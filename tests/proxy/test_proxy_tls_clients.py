"""Real clients over TLS through the proxy, in front of Apache Kafka's SSL listener
(mutual TLS with the proxy's certificate): aiokafka (``ssl_context``), kafka-python and Debian's
kcat over SSL, produce, consume and a consumer group, byte for byte; SASL_SSL on both sides (the
proxy relays the SASL exchange over its own TLS connection to Kafka's SASL_SSL listener, which
authenticates the user) with the SASL user's quota enforced; AlterClientQuotas allowed to the
admin certificate and refused to another."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
import uuid

import pytest

import kquota
from proxy_support import ProxyThread, kcat
from test_proxy_ip_quota_admin import alter, entry
from test_proxy_kafka_tls import port_of
from test_proxy_kafka_tls import upstream_props as kafka_upstream_props
from test_proxy_tls import listener_props, tls_proxy
from tls_support import make_tls_topic, roundtrip, ssl_client_config, tls_wire
from waiting import wait_until_async


@pytest.fixture(scope="module")
def proxy(pki, kafka_broker):
    p = tls_proxy(kafka_broker, pki, admin_principals=["admin"])
    yield p
    p.stop()


def _context(pki, cert=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.pem))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert_pem), str(cert.key_pem))
    return ctx


def test_aiokafka_over_ssl_produce_and_group(pki, proxy):
    aiokafka = pytest.importorskip("aiokafka")
    topic = make_tls_topic(proxy.address, ssl_client_config(pki, pki.alice))
    sent = [b"aio-%d-" % i + bytes(range(256)) * (i % 5) for i in range(300)]

    async def run() -> list:
        common = {"bootstrap_servers": proxy.address, "security_protocol": "SSL",
                  "ssl_context": _context(pki, pki.alice)}
        prod = aiokafka.AIOKafkaProducer(**common)
        await prod.start()
        try:
            for value in sent:
                await prod.send(topic, value)
            await prod.flush()
        finally:
            await prod.stop()
        cons = aiokafka.AIOKafkaConsumer(topic, group_id="aio-" + topic, auto_offset_reset="earliest", **common)
        await cons.start()
        out: list = []

        async def read() -> bool:
            for msgs in (await cons.getmany(timeout_ms=500)).values():
                out.extend(m.value for m in msgs)
            return len(out) >= len(sent)

        try:
            await wait_until_async(read, 40)
            await cons.commit()
        finally:
            await cons.stop()
        return out

    assert asyncio.run(run()) == sent


def test_kafka_python_over_ssl_produce_and_group(pki, proxy):
    kafka = pytest.importorskip("kafka")
    topic = make_tls_topic(proxy.address, ssl_client_config(pki, pki.alice))
    common = {"bootstrap_servers": proxy.address, "security_protocol": "SSL", "ssl_cafile": str(pki.ca.pem),
              "ssl_certfile": str(pki.alice.cert_pem), "ssl_keyfile": str(pki.alice.key_pem)}
    prod = kafka.KafkaProducer(**common)
    sent = [b"kp-%d" % i for i in range(300)]
    for value in sent:
        prod.send(topic, value)
    prod.flush()
    prod.close()
    cons = kafka.KafkaConsumer(topic, group_id="kp-" + topic, auto_offset_reset="earliest", consumer_timeout_ms=8000,
                               **common)
    got = [m.value for m in cons]
    cons.commit()
    committed = cons.committed(kafka.TopicPartition(topic, 0))
    cons.close()
    assert got == sent and committed == len(sent)


def test_kcat_over_ssl_produce_consume_and_group(pki, proxy):
    exe = kcat()
    ssl_args = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki.ca.pem}",
                "-X", f"ssl.certificate.location={pki.alice.cert_pem}", "-X", f"ssl.key.location={pki.alice.key_pem}"]
    topic = make_tls_topic(proxy.address, ssl_client_config(pki, pki.alice))
    lines = [f"kcat-line-{i}" for i in range(300)]
    subprocess.run([exe, "-b", proxy.address, *ssl_args, "-t", topic, "-P"], input=("\n".join(lines) + "\n").encode(),
                   check=True, timeout=30, capture_output=True)
    out = subprocess.run([exe, "-b", proxy.address, *ssl_args, "-t", topic, "-C", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30)
    assert out.stdout.decode().splitlines() == lines
    group = subprocess.run([exe, "-b", proxy.address, *ssl_args, "-G", "kcat-" + topic, topic, "-o", "beginning",
                            "-e", "-q", "-X", "session.timeout.ms=6000", "-c", str(len(lines))],
                           capture_output=True, timeout=60)
    assert group.returncode == 0, group.stderr.decode()
    assert sorted(group.stdout.decode().splitlines()) == sorted(lines)


def test_alter_client_quotas_by_admin_certificate_only(pki, proxy):
    """RULES map CN=admin,OU=ops,O=kquota to "admin", the proxy's admin principal; alice is not."""
    change = [entry({"user": "carol"}, 1234, key="producer_byte_rate")]

    def carol() -> list:
        return [values for entity, values in proxy.qm.describe_client_quotas().items() if "carol" in str(entity)]

    for cert, allowed in ((pki.alice, False), (pki.admin, True)):
        w = tls_wire(proxy.proxy.bootstrap_address, pki, cert)
        try:
            ((code, message),) = alter(w, change)
        finally:
            w.close()
        if allowed:
            assert code == 0, message
            assert carol() == [{"producer_byte_rate": 1234.0}]
        else:
            assert code == 31, (code, message)  # CLUSTER_AUTHORIZATION_FAILED
            assert carol() == []


@pytest.mark.timing
def test_sasl_ssl_both_sides_user_quota(pki, kafka_broker):
    """alice's SCRAM credentials through the proxy's SASL_SSL listener to Kafka's: the broker
    authenticates her (she may use only the topic and group her ACLs name, and ANONYMOUS is never
    a SASL_SSL principal) and the proxy holds her to her quota."""
    prefix = f"kq-tls-sasl-{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}-t"
    kafka_broker.create_topic(topic)
    kafka_broker.allow("User:alice", prefix, group=f"g-{topic}")
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 20_000})])
    proxy = ProxyThread(("127.0.0.1", port_of(kafka_broker.listeners["SASL_SSL"])), qm=qm,
                        listener_tls=listener_props(pki), upstream_tls=kafka_upstream_props(kafka_broker),
                        sasl_listener=True)
    try:
        conf = {**kafka_broker.client_config("SASL_SSL", "alice", "SCRAM-SHA-512"), "ssl.ca.location": str(pki.ca.pem)}
        conf.pop("bootstrap.servers")
        roundtrip(proxy.address, conf, topic)
        assert qm.measured_rate(kquota.ClientQuotaType.PRODUCE, "alice", "rdkafka") > 0
        assert qm.measured_rate(kquota.ClientQuotaType.PRODUCE, "ANONYMOUS", "rdkafka") == 0
        from confluent_kafka import Producer

        throttles: list = []
        p = Producer({"bootstrap.servers": proxy.address, "linger.ms": 5, "throttle_cb": throttles.append, **conf})
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4:
            try:
                p.produce(topic, b"x" * 1000)
            except BufferError:
                pass
            p.poll(0.01)
        p.flush(15)
        assert throttles and max(t.throttle_time for t in throttles) > 0  # her quota, enforced
    finally:
        proxy.stop()
        qm.close()
