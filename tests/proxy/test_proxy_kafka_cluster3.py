"""``kquota proxy`` in front of Apache Kafka with three brokers (``kafka_cluster3``: one KRaft
controller, three broker processes): the partitions' leaders spread over the three brokers, the
proxy gives each broker its own port (``--listen`` port + 1 + node id) in Metadata, and a client
that bootstraps through the proxy produces to every partition's leader and reads it back, all
through the proxy; a client naming itself a follower in Fetch is served by the leader as one, and
the proxy counts that answer against the client's consumer quota."""

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


def test_a_fetch_naming_a_follower_is_throttled_by_the_consumer_quota(kafka_cluster3):
    """Fetch before v15 names a ReplicaId; the leader serves a real follower's id as the follower's
    fetch (exempt from Kafka's client quotas; the proxy's principal may CLUSTER_ACTION). Through
    the proxy a client naming itself that follower is a client: its consumer quota throttles it.
    Three brokers, because Kafka answers NOT_LEADER_OR_FOLLOWER to an id that replicates nothing."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from proxy_support import ProxyThread
    from proxy_wire import Wire

    import kquota
    from kquota.kafka.protocol import apis

    topic = f"kq-follower-{uuid.uuid4().hex[:8]}"
    kafka_cluster3.create_topic(topic, replication_factor=3)
    p = Producer({**kafka_cluster3.admin_config(), "acks": "all"})
    for _ in range(5):
        p.produce(topic, b"x" * 1000, partition=0)
    assert p.flush(30) == 0
    md = AdminClient(kafka_cluster3.admin_config()).list_topics(topic, timeout=30)
    (partition,) = md.topics[topic].partitions.values()
    follower = next(r for r in partition.replicas if r != partition.leader)
    leader = md.brokers[partition.leader]

    def fetch(address: tuple, client_id: str) -> dict:
        w = Wire(address, client_id)
        try:
            return w.call(apis.FETCH, 11, "Fetch", {
                "ReplicaId": follower, "MaxWaitMs": 100, "MinBytes": 1, "MaxBytes": 1 << 20, "IsolationLevel": 0,
                "SessionId": 0, "SessionEpoch": -1, "ForgottenTopicsData": [], "RackId": "",
                "Topics": [{"Topic": topic, "Partitions": [{"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0,
                                                             "LogStartOffset": -1, "PartitionMaxBytes": 1 << 20}]}]})
        finally:
            w.close()

    direct = fetch((leader.host, leader.port), "follower")["Responses"][0]["Partitions"][0]
    assert direct["ErrorCode"] == 0 and len(bytes(direct["Records"])) > 5000  # served as the follower's

    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"client-id": "follower"}, {"consumer_byte_rate": 100})])
    first = kafka_cluster3.listeners["PLAINTEXT"].split(",")[0].rpartition(":")
    px = ProxyThread((first[0], int(first[2])), qm)
    try:
        AdminClient({"bootstrap.servers": px.address}).list_topics(topic, timeout=30)  # the brokers' ports
        throttles = []
        for _ in range(3):
            r = fetch(("127.0.0.1", px.proxy.broker_ports[partition.leader]), "follower")
            throttles.append(r["ThrottleTimeMs"])
            if r["ThrottleTimeMs"] > 0:
                break
        assert max(throttles) > 0, throttles
    finally:
        px.stop()
        qm.close()
