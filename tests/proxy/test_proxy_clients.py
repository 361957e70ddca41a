"""kquota proxy in front of Apache Kafka's broker with real clients: data intact for every
compression type, pipelined requests, consumer groups, broker addresses rewritten."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess

import pytest
from proxy_support import ProxyThread, Tansu, consume_assigned, kcat, make_topic
from proxy_wire import read_exact

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from waiting import wait_until_async


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_message_intact_for_each_compression(proxy, codec):
    topic = make_topic(proxy.address)
    p = Producer({"bootstrap.servers": proxy.address, "compression.type": codec, "linger.ms": 2,
                  "batch.num.messages": 200})
    sent = []
    for i in range(2000):
        key, value = b"k%d" % i, bytes([i % 251]) * (1 + i % 700)
        p.produce(topic, key=key, value=value, headers=[("h", b"%d" % i)])
        sent.append((key, value, [("h", b"%d" % i)]))
    assert p.flush(20) == 0
    got = consume_assigned(proxy.address, topic, len(sent))
    assert got == sent


def test_metadata_names_only_the_proxy(proxy, broker):
    md = AdminClient({"bootstrap.servers": proxy.address}).list_topics(timeout=10)
    proxied = {(b.host, b.port) for b in md.brokers.values()}
    assert proxied == {("127.0.0.1", port) for port in proxy.proxy.broker_ports.values()}
    assert ("127.0.0.1", broker.port) not in proxied


def test_kcat_librdkafka_2_0_metadata_produce_consume_and_group(proxy, broker):
    """Debian's kcat (librdkafka 2.0.2), the oldest client the tests run, through the proxy: the
    metadata names the proxy, and produce, consume and a consumer group work."""
    exe = kcat()
    md = subprocess.run([exe, "-b", proxy.address, "-L", "-J"], capture_output=True, timeout=30)
    assert md.returncode == 0, md.stderr.decode()
    brokers = {(b["name"].rsplit(":", 1)[0], int(b["name"].rsplit(":", 1)[1])) for b in json.loads(md.stdout)["brokers"]}
    assert brokers == {("127.0.0.1", port) for port in proxy.proxy.broker_ports.values()}
    topic = make_topic(proxy.address, partitions=2)
    lines = [f"line-{i}" for i in range(500)]
    for part, codec in ((0, "zstd"), (1, "snappy")):
        subprocess.run([exe, "-b", proxy.address, "-t", topic, "-p", str(part), "-P", "-z", codec],
                       input=("\n".join(lines[part::2]) + "\n").encode(), check=True, timeout=30, capture_output=True)
    out = subprocess.run([exe, "-b", proxy.address, "-t", topic, "-p", "0", "-C", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30)
    assert out.stdout.decode().splitlines() == lines[0::2]
    group = subprocess.run([exe, "-b", proxy.address, "-G", "kcat-" + topic, topic, "-o", "beginning", "-e", "-q",
                            "-c", str(len(lines))], capture_output=True, timeout=60)
    assert group.returncode == 0, group.stderr.decode()
    assert sorted(group.stdout.decode().splitlines()) == sorted(lines)


def test_aiokafka_lz4_zstd_and_group(proxy):
    aiokafka = pytest.importorskip("aiokafka")
    topic = make_topic(proxy.address)

    async def run() -> list:
        out = []
        for codec in ("lz4", "zstd", "gzip"):
            prod = aiokafka.AIOKafkaProducer(bootstrap_servers=proxy.address, compression_type=codec)
            await prod.start()
            try:
                for i in range(300):
                    await prod.send(topic, b"%s-%d" % (codec.encode(), i))
                await prod.flush()
            finally:
                await prod.stop()
        cons = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=proxy.address, group_id="aio-" + topic,
                                         auto_offset_reset="earliest")
        await cons.start()
        async def read() -> bool:
            for msgs in (await cons.getmany(timeout_ms=500)).values():
                out.extend(m.value for m in msgs)
            return len(out) >= 900

        try:
            await wait_until_async(read, 30)
            await cons.commit()
        finally:
            await cons.stop()
        return out

    got = asyncio.run(run())
    assert got == [b"%s-%d" % (c.encode(), i) for c in ("lz4", "zstd", "gzip") for i in range(300)]


def test_kafka_python_consumer_group(proxy):
    kafka = pytest.importorskip("kafka")
    topic = make_topic(proxy.address)
    prod = kafka.KafkaProducer(bootstrap_servers=proxy.address, compression_type="gzip")
    for i in range(500):
        prod.send(topic, b"kp-%d" % i)
    prod.flush()
    prod.close()
    cons = kafka.KafkaConsumer(topic, bootstrap_servers=proxy.address, group_id="kp-" + topic,
                               auto_offset_reset="earliest", consumer_timeout_ms=8000)
    got = [m.value for m in cons]
    cons.commit()
    committed = cons.committed(kafka.TopicPartition(topic, 0))
    cons.close()
    assert got == [b"kp-%d" % i for i in range(500)]
    assert committed == 500


def _request(api_key: int, version: int, corr: int, body: bytes, client_id: bytes = b"raw") -> bytes:
    head = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    return struct.pack(">i", len(head) + len(body)) + head + body


def _read_frame(sock: socket.socket) -> bytes:
    return read_exact(sock, struct.unpack(">i", read_exact(sock, 4))[0])


def test_pipelined_requests_answered_in_order(proxy):
    host, port = proxy.proxy.bootstrap_address
    with socket.create_connection((host, port), timeout=10) as s:
        # 200 requests in one write, mixing relayed (ApiVersions v0, Metadata v1 all topics) and
        # proxy-answered ones (DescribeClientQuotas v0): answers come back in request order.
        reqs = []
        for corr in range(200):
            kind = corr % 3
            if kind == 0:
                reqs.append(_request(18, 0, corr, b""))
            elif kind == 1:
                reqs.append(_request(3, 1, corr, struct.pack(">i", -1)))
            else:
                reqs.append(_request(48, 0, corr, struct.pack(">i", 0) + b"\x00"))
        s.sendall(b"".join(reqs))
        corrs = [struct.unpack_from(">i", _read_frame(s))[0] for _ in range(200)]
    assert corrs == list(range(200))


def test_pipelined_produce_all_acked(proxy):
    topic = make_topic(proxy.address, partitions=3)
    p = Producer({"bootstrap.servers": proxy.address, "linger.ms": 0, "max.in.flight": 100,
                  "enable.idempotence": False, "batch.num.messages": 1})
    for i in range(3000):
        p.produce(topic, value=b"%d" % i, partition=i % 3)
        p.poll(0)
    assert p.flush(20) == 0
    got = consume_assigned(proxy.address, topic, 3000, partitions=3)
    assert sorted(int(v) for _, v, _ in got) == list(range(3000))


def _acks0_relayed(proxy):
    topic = make_topic(proxy.address)
    p = Producer({"bootstrap.servers": proxy.address, "acks": 0, "linger.ms": 2, "batch.size": 16384})
    for i in range(5000):
        p.produce(topic, value=b"%d" % i)
        p.poll(0)
    assert p.flush(20) == 0
    md = Producer({"bootstrap.servers": proxy.address}).list_topics(topic, timeout=10)  # same proxy, still serving
    assert topic in md.topics
    got = consume_assigned(proxy.address, topic, 5000)
    assert sorted(int(v) for _, v, _ in got) == list(range(5000))


def test_acks0_relayed(proxy):
    """acks=0 has no response in Kafka: the proxy relays the requests and waits for none."""
    _acks0_relayed(proxy)


@pytest.mark.process
def test_acks0_relayed_even_when_the_broker_answers():
    """Some brokers answer acks=0 anyway: the proxy drops those answers instead of taking them for
    the next request's. On tansu, which answers them: Kafka never does."""
    broker = Tansu()
    proxy = ProxyThread(("127.0.0.1", broker.port))
    try:
        _acks0_relayed(proxy)
    finally:
        proxy.stop()
        broker.stop()
