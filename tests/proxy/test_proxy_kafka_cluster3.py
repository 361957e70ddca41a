"""``kquota proxy`` in front of Apache Kafka with three brokers (``kafka_cluster3``: one KRaft
controller, three broker processes): the partitions' leaders spread over the three brokers, the
proxy gives each broker its own port (``--listen`` port + 1 + node id) in Metadata, and a client
that bootstraps through the proxy produces to every partition's leader and reads it back, all
through the proxy."""

from __future__ import annotations

import uuid

import pytest
from kafka_proxy import KquotaProxy

pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def proxy(kafka_cluster3, tmp_path_factory):
    first = kafka_cluster3.listeners["PLAINTEXT"].split(",")[0]
    p = KquotaProxy(first, tmp_path_factory.mktemp("cluster3-proxy"), brokers=3)
    yield p
    code, err = p.stop()
    assert code == 0, err


def test_leaders_on_three_brokers_each_behind_its_own_proxy_port(kafka_cluster3, proxy):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    assert kafka_cluster3.brokers == 3
    topic = f"kq-three-{uuid.uuid4().hex[:8]}"
    kafka_cluster3.create_topic(topic, partitions=6)
    direct = AdminClient(kafka_cluster3.admin_config()).list_topics(topic, timeout=30)
    leaders = {p.id: p.leader for p in direct.topics[topic].partitions.values()}
    assert set(leaders.values()) == {1, 2, 3}, leaders  # Kafka spreads six partitions over three brokers

    through = AdminClient({"bootstrap.servers": proxy.address}).list_topics(topic, timeout=30)
    assert {b.id: (b.host, b.port) for b in through.brokers.values()} == {
        n: ("127.0.0.1", proxy.port + 1 + n) for n in (1, 2, 3)}
    assert {p.id: p.leader for p in through.topics[topic].partitions.values()} == leaders

    producer = Producer({"bootstrap.servers": proxy.address, "linger.ms": 5})
    for partition in leaders:
        producer.produce(topic, value=f"to {partition}".encode(), partition=partition)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": proxy.address, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in leaders])
    got: dict[int, bytes] = {}
    try:
        for _ in range(300):
            if len(got) == len(leaders):
                break
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got[msg.partition()] = msg.value()
    finally:
        consumer.close()
    assert got == {p: f"to {p}".encode() for p in leaders}
