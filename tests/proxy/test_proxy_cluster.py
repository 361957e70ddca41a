"""Port-per-broker routing against librdkafka's three-broker mock cluster: every broker gets a
proxy port, clients only ever connect to the proxy, data is intact across all brokers."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from proxy_support import MockCluster, ProxyThread, kcat

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from waiting import wait_until


@pytest.fixture(scope="module")
def cluster():
    c = MockCluster(3)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def proxy(cluster):
    p = ProxyThread(cluster.first)
    yield p
    p.stop()


def auto_topic(address: str, prefix: str) -> tuple[str, int]:
    """A new topic, auto-created by the mock cluster (it has no controller for CreateTopics)."""
    topic = prefix + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": address})
    partitions = []

    def created() -> bool:
        t = admin.list_topics(topic, timeout=5).topics.get(topic)
        if t is not None and t.error is None and t.partitions:
            partitions[:] = t.partitions
        return bool(partitions)

    if wait_until(created, 10, 0.1):
        return topic, len(partitions)
    raise TimeoutError(topic)


def spread_topic(address: str, attempts: int = 20) -> tuple[str, int]:
    """An auto-created topic whose partition leaders sit on more than one broker.

    The mock cluster picks each partition's leader at random (4 partitions over 3 brokers all land
    on one broker about 1 time in 27), so a single topic does not always exercise the routing."""
    admin = AdminClient({"bootstrap.servers": address})
    for _ in range(attempts):
        topic, n = auto_topic(address, "spread-")
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        if len({p.leader for p in parts}) > 1:
            return topic, n
    raise AssertionError(f"{attempts} auto-created topics all had a single leader")


def test_every_broker_proxied_and_data_intact(cluster, proxy):
    admin = AdminClient({"bootstrap.servers": proxy.address})
    topic, n = spread_topic(proxy.address)
    md = admin.list_topics(timeout=10)
    assert len(md.brokers) == 3
    addresses = {b.id: (b.host, b.port) for b in md.brokers.values()}
    assert addresses == {n: ("127.0.0.1", port) for n, port in proxy.proxy.broker_ports.items()}
    assert set(addresses.values()).isdisjoint(cluster.brokers.values())
    leaders = {p.leader for p in md.topics[topic].partitions.values()}
    assert len(leaders) > 1  # partitions spread: the port-per-broker routing is exercised

    p = Producer({"bootstrap.servers": proxy.address, "linger.ms": 2})
    for i in range(3000):
        p.produce(topic, value=b"%d" % i, partition=i % n)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": proxy.address, "group.id": "x", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(n)])
    got = []

    def read() -> bool:
        for m in c.consume(1000, 0.5):
            assert not m.error(), m.error()
            got.append(int(m.value()))
        return len(got) >= 3000

    wait_until(read, 20, 0)
    c.close()
    assert sorted(got) == list(range(3000))
    for leader in leaders:
        assert proxy.proxy.accepted.get(leader, 0) > 0


def test_consumer_group_coordinator_through_proxy(proxy):
    topic, n = auto_topic(proxy.address, "grp-")
    p = Producer({"bootstrap.servers": proxy.address})
    for i in range(300):
        p.produce(topic, value=b"%d" % i, partition=i % n)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": proxy.address, "group.id": "g-" + topic, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000})
    c.subscribe([topic])
    got = []
    wait_until(lambda: got.extend(int(m.value()) for m in c.consume(500, 0.5) if not m.error()) or len(got) >= 300, 30, 0)
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == list(range(300))


def test_kcat_through_proxy(proxy):
    exe = kcat()
    topic, _ = auto_topic(proxy.address, "kcat-")
    lines = "\n".join(f"line-{i}" for i in range(100)) + "\n"
    subprocess.run([exe, "-b", proxy.address, "-t", topic, "-p", "0", "-P", "-z", "lz4"], input=lines.encode(),
                   check=True, timeout=30, capture_output=True)
    out = subprocess.run([exe, "-b", proxy.address, "-t", topic, "-p", "0", "-C", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30)
    assert out.stdout.decode().splitlines() == [f"line-{i}" for i in range(100)]
