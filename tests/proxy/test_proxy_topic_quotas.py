"""Topic quotas (KIP-1010) in the proxy against Apache Kafka's broker: a topic's quota holds the
total rate of every producer of the topic, or of every consumer reading it (Fetch v13+ names it
by topic id, learned from Metadata responses), whatever their client ids; a Produce naming many
topics without a quota keeps nothing, and Metadata or Fetch requests naming many topic ids teach
the proxy none."""

from __future__ import annotations

import os
import threading
import time

import pytest
from proxy_support import Meter, ProxyThread, clients_running, make_topic, produce_all, produce_loop
from proxy_wire import Wire, produce_v8

import kquota
from kquota import ClientQuotaType as Q

pytest.importorskip("confluent_kafka")

WINDOW_NUM = 2  # quota.window.num: a 1 s burst allowance keeps the test short and steady


def _held_together(qm, proxy, topic: str, quota: float, loop, names: tuple[str, str], quota_type) -> None:
    """Runs ``loop`` (``produce_loop`` or ``consume_loop``) as two clients through ``proxy`` for
    11 s and checks that the topic's quota held them together over 3-11 s (the bound of the
    tests' docstrings), that both were throttled with no quota of their own, and that the topic's
    ``quota-limit`` and ``throttle-time`` rows carry its ``topic`` tag."""
    with clients_running(loop, proxy.address, topic, names) as (meters, t0):
        time.sleep(11)  # the measured window: the clients run while the rate below is taken over it
    start, end = t0 + 3, t0 + 11
    total = sum(m.rate(start, end) for m in meters.values())
    print(f"topic quota {quota} B/s: {names} together {total / quota:.3f}x")
    assert 0.8 * quota <= total <= (1 + 1 / 8) * quota, {n: m.rate(start, end) for n, m in meters.items()}
    for name, m in meters.items():
        assert m.throttles and max(m.throttles) > 0, name
        assert qm.quota_limit(quota_type, "", name) is None
    group = "Produce" if quota_type == Q.PRODUCE else "Fetch"
    rows = {(m.group, m.name, tuple(m.tags.items())): m.value for m in qm.metrics()}
    assert rows[(group, "quota-limit", (("topic", topic),))] == quota
    assert rows[(group, "throttle-time", (("topic", topic),))] > 0


@pytest.mark.timing
def test_a_topic_quota_holds_two_producers_together(broker):
    """Two producers with different client ids (no client quota) write one topic quoted at
    200 KB/s. Kafka's rule keeps the topic sensor's rate over its window (at most
    ``WINDOW_NUM`` samples of 1 s) at the quota once throttled: over 8 s after the first
    window's burst the bytes are the quota's 8 s give or take one sample's worth (1/8). The
    meters count values (1000 B), a little less than the record batches the sensor counts."""
    quota = 200_000
    qm = kquota.QuotaManager(window_num=WINDOW_NUM, window_size_seconds=1)
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        topic = make_topic(proxy.address, prefix="topicq-")
        qm._topics().set(topic, "producer_byte_rate", quota)
        _held_together(qm, proxy, topic, quota, produce_loop, ("topic-a", "topic-b"), Q.PRODUCE)
    finally:
        proxy.stop()
        qm.close()


def test_a_produce_naming_many_unquoted_topics_keeps_nothing(broker):
    """An attack: Produce requests naming thousands of distinct topics. Topics without a quota
    (neither their own nor ``<default>``) get no sensor; under a ``<default>`` quota names the
    broker refuses get none, and legal names at most ``max_sensors`` plus one shared overflow
    sensor."""
    qm = kquota.QuotaManager(max_sensors=50)
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        qm._topics().set("only-this-one", "producer_byte_rate", 1000)
        host, port = proxy.proxy.bootstrap_address
        w = Wire((host, port), client_id="mallory")
        try:
            def produce(names: list[str]) -> None:
                w.exchange(0, 8, produce_v8(dict.fromkeys(names, b"")))

            produce([f"junk-{i}" for i in range(5000)])
            assert qm._topics().sensor_stats(Q.PRODUCE) == (0, 0)
            qm._topics().set(None, "producer_byte_rate", 1000)
            produce([f"bad/name-{i}" for i in range(2000)] + ["x" * 300])
            assert qm._topics().sensor_stats(Q.PRODUCE) == (0, 0)
            produce([f"junk-{i}" for i in range(500)])
            live, overflowed = qm._topics().sensor_stats(Q.PRODUCE)
            assert live == 51 and overflowed == 450, (live, overflowed)
        finally:
            w.close()
    finally:
        proxy.stop()
        qm.close()


def consume_loop(address: str, topic: str, client_id: str, meter: Meter, stop: threading.Event) -> None:
    """Reads ``topic`` from its start as fast as the proxy lets it, counting values. Fetches of
    16 KB: a response is under a tenth of the quota window, so an over-quota one gets Kafka's
    empty answer (``fetch_answer``), and the rate moves in steps much finer than the quota."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": address, "client.id": client_id, "group.id": client_id,
                  "enable.auto.commit": False, "throttle_cb": meter.throttled, "fetch.max.bytes": 16384,
                  "max.partition.fetch.bytes": 16384, "message.max.bytes": 16384})
    c.assign([TopicPartition(topic, 0, 0)])
    while not stop.is_set():
        for m in c.consume(1000, 0.2):
            if m.error() is None:
                meter.add(len(m.value() or b""))
    c.close()


@pytest.mark.timing
def test_a_topic_quota_holds_two_consumers_together(broker):
    """Two consumers with different client ids (no client quota; confluent-kafka fetches v13+,
    naming the topic by id) read one preloaded topic quoted at ``consumer_byte_rate`` 200 KB/s.
    Kafka's rule holds the topic sensor's rate over its window (at most ``WINDOW_NUM`` samples
    of 1 s) at the quota once throttled, the over-quota responses answered empty and taken back:
    over 8 s after the first window's burst the two together read the quota's 8 s give or take
    one sample's worth (1/8). The meters count values (1000 B), a little less than the record
    batches the topic sensor counts, so they can only read under the bound."""
    quota = 200_000
    qm = kquota.QuotaManager(window_num=WINDOW_NUM, window_size_seconds=1)
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        topic = make_topic(proxy.address, prefix="topicq-fetch-")
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": broker.address, "linger.ms": 20, "batch.size": 16384})
        produce_all(p, topic, 6_000)  # 6 MB, written straight to the broker: more than both may read
        assert p.flush(30) == 0
        qm.alter_client_quotas([({"topic": topic}, {"consumer_byte_rate": quota})])
        _held_together(qm, proxy, topic, quota, consume_loop, ("reader-a", "reader-b"), Q.FETCH)
        assert proxy.proxy._plane.learn_topic_ids([]) >= 1
    finally:
        proxy.stop()
        qm.close()


def test_metadata_and_fetch_naming_many_topic_ids_teach_nothing(broker):
    """An attack: a Metadata v12 and a Fetch v13 naming thousands of made-up topic ids. The broker
    answers them ``UNKNOWN_TOPIC_ID`` without a name: the proxy learns no id from either (only a
    named topic of the broker's answer is learned, and the map is bounded besides, see
    ``topic_names.rs``), and under a ``<default>`` consumer topic quota no topic sensor is made."""
    qm = kquota.QuotaManager(max_sensors=50)
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        qm._topics().set(None, "consumer_byte_rate", 1000)
        plane = proxy.proxy._plane
        w = Wire(proxy.proxy.bootstrap_address, client_id="mallory")
        try:
            w.sock.settimeout(60)  # the broker looks each id up: a slow answer, not a lost one
            known = plane.learn_topic_ids([])
            ids = [os.urandom(16) for _ in range(2000)]
            t = time.monotonic()
            answer = w.call(3, 12, "Metadata", {"Topics": [{"TopicId": i, "Name": None} for i in ids],
                                                "AllowAutoTopicCreation": False,
                                                "IncludeTopicAuthorizedOperations": False})
            assert {t["ErrorCode"] for t in answer["Topics"]} == {100}  # UNKNOWN_TOPIC_ID
            parts = [{"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0, "LastFetchedEpoch": -1,
                      "LogStartOffset": -1, "PartitionMaxBytes": 1024}]
            answer = w.call(1, 13, "Fetch", {
                "ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 0, "MaxBytes": 1 << 20, "IsolationLevel": 0,
                "SessionId": 0, "SessionEpoch": -1, "Topics": [{"TopicId": i, "Partitions": parts} for i in ids],
                "ForgottenTopicsData": [], "RackId": ""})
            assert len(answer["Responses"]) == len(ids)
            print(f"{len(ids)} made-up ids: Metadata and Fetch answered in {time.monotonic() - t:.1f} s")
            assert plane.learn_topic_ids([]) == known
            assert qm._topics().sensor_stats(Q.FETCH) == (0, 0)
        finally:
            w.close()
    finally:
        proxy.stop()
        qm.close()
