"""Topic quotas (KIP-1010) through the binding: ``QuotaKernel._topics()`` (``set`` / ``describe``), the
handle's response steps with ``topics=[(topic, bytes), ...]``, Fetch caps, metrics rows tagged
``topic`` and the bound on topic sensors."""

from __future__ import annotations

import math

import pytest

import kquota
from kquota import ClientQuotaType as Q
from kquota.exceptions import QuotaConfigError

pytest.importorskip("prometheus_client")
from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import kquota.prometheus as kprom  # noqa: E402


def manager():
    return kquota.QuotaManager(expiry_interval_seconds=None)


def test_set_describe_and_remove_topic_quotas():
    qm = manager()
    qm._topics().set("orders", "producer_byte_rate", 2000)
    qm._topics().set(None, "consumer_byte_rate", 5000.0)
    assert sorted(qm._topics().describe(), key=repr) == sorted(
        [("orders", "producer_byte_rate", 2000.0), (None, "consumer_byte_rate", 5000.0)], key=repr
    )
    qm._topics().set("orders", "producer_byte_rate", None)
    assert qm._topics().describe() == [(None, "consumer_byte_rate", 5000.0)]


@pytest.mark.parametrize(
    "topic,key,value",
    [
        ("t", "request_percentage", 10.0),
        ("t", "producer_byte_rate", 1.5),
        ("t", "producer_byte_rate", -1.0),
        ("t", "consumer_byte_rate", math.nan),
        ("bad topic", "producer_byte_rate", 100.0),
        ("x" * 250, "producer_byte_rate", 100.0),
        ("..", "producer_byte_rate", 100.0),
    ],
)
def test_bad_topic_quotas_are_one_line_config_errors(topic, key, value):
    qm = manager()
    with pytest.raises(QuotaConfigError) as e:
        qm._topics().set(topic, key, value)
    assert "\n" not in str(e.value) and "topic=" in str(e.value)
    assert qm._topics().describe() == []


def test_the_largest_of_client_and_topic_throttles_goes_out():
    """Kafka's fresh-sensor example on the topic sensor: 5000 B, 5000 B at 200 ms, then 1000 B at
    1 s against 1000 B/s gives (11000 / 10 s - 1000) / 1000 * 10 s = 1000 ms; the client quota
    (10 MB/s) gives none, so the topic's throttle is the response's."""
    qm = manager()
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 10_000_000})])
    qm._topics().set("orders", "producer_byte_rate", 1000)
    a = qm.client("alice", "c1")
    b = qm.client("bob", "c2")
    assert a.produce_response(5000, 0, True, 0, topics=[("orders", 5000)]) == (0, None)
    assert b.produce_response(5000, 0, True, 200, topics=[("orders", 5000), ("free", 100)]) == (0, None)
    ms, enforced = a.produce_response(1000, 0, True, 1000, topics=[("orders", 1000)])
    assert (ms, enforced) == (1000, Q.PRODUCE)
    # Without topics the old call form records the client quota only.
    assert a.produce_response(1000, 0, True, 1000) == (0, None)
    # The throttle went into the topic's throttle-time, not the client's.
    rows = {(m.group, m.name, tuple(sorted(m.tags.items()))): m.value for m in qm.metrics(now_ms=1000)}
    assert rows[("Produce", "throttle-time", (("topic", "orders"),))] == 1000.0
    assert rows[("Produce", "quota-limit", (("topic", "orders"),))] == 1000.0
    assert rows[("Produce", "byte-rate", (("topic", "orders"),))] == pytest.approx(11_000 / 10)
    assert not any(k[1] == "throttle-time" and ("user", "alice") in k[2] for k in rows)
    # No sensor (and no row) for a topic without a quota.
    assert not any(("topic", "free") in k[2] for k in rows)
    assert qm._topics().sensor_stats(Q.PRODUCE) == (1, 0)


def test_a_larger_client_throttle_wins_and_ties_are_the_clients():
    qm = manager()
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 1000})])
    qm._topics().set(None, "producer_byte_rate", 1000)
    a = qm.client("alice", "c1")
    a.produce_response(5000, 0, True, 0, topics=[("t", 5000)])
    a.produce_response(5000, 0, True, 200, topics=[("t", 5000)])
    # Both give 1000 ms: the client's quota is the one enforced (its throttle-time recorded).
    assert a.produce_response(1000, 0, True, 1000, topics=[("t", 1000)]) == (1000, Q.PRODUCE)
    rows = {(m.group, m.name, tuple(sorted(m.tags.items()))): m.value for m in qm.metrics(now_ms=1000)}
    assert ("Produce", "throttle-time", (("topic", "t"),)) not in rows
    assert rows[("Produce", "throttle-time", (("client-id", ""), ("user", "alice")))] == 1000.0


def test_fetch_caps_and_empty_answers_take_topic_bytes_back():
    qm = manager()
    qm._topics().set("logs", "consumer_byte_rate", 1000)
    h = qm.client("alice", "c1")
    assert h.fetch_request_cap() == math.inf
    # getMaxValueInQuotaWindow: 1000 B/s * (11 - 1) * 1 s.
    assert h.fetch_request_cap(["logs", "other"]) == 10_000.0
    assert h.fetch_request_cap(["other"]) == math.inf
    cap = h.fetch_request_cap(["logs"])
    assert h.fetch_response(10_000, cap, 0, 0, topics=[("logs", 10_000)]) == ("deliver", 0, None)
    # 10500 B over W = 10.1 s is over 1000 B/s, and 500 B is a small share of the window:
    # Kafka's empty answer, whose bytes are taken back from the topic too.
    answer, ms, enforced = h.fetch_response(500, cap, 0, 100, topics=[("logs", 500)])
    assert (answer, ms, enforced) == ("empty", round((10_500 / 10.1 - 1000) / 1000 * 10_100), Q.FETCH)
    rows = {(m.group, m.name, tuple(sorted(m.tags.items()))): m.value for m in qm.metrics(now_ms=100)}
    assert rows[("Fetch", "byte-rate", (("topic", "logs"),))] == pytest.approx(10_000 / 10.1)
    # A response larger than the window is delivered and muted for the time the topic's quota
    # takes to allow it (20000 B at 1000 B/s).
    answer, ms, enforced = h.fetch_response(20_000, cap, 0, 200, topics=[("logs", 20_000)])
    assert (answer, ms, enforced) == ("deliver_muted", 20_000, Q.FETCH)


def test_topic_bytes_are_checked_like_sizes():
    qm = manager()
    qm._topics().set(None, "producer_byte_rate", 1000)
    h = qm.client("alice", "c1")
    with pytest.raises(ValueError):
        h.produce_response(10, 0, True, 0, topics=[("t", -1)])
    with pytest.raises(ValueError):
        h.produce_response(10, 0, True, 0, topics=[("t", math.nan)])


def test_unquoted_and_illegal_topics_create_no_sensors():
    """An attack: Produce naming many distinct topics. Without a quota that covers them nothing
    is kept; under a <default> quota names the broker refuses are kept neither."""
    qm = manager()
    qm._topics().set("quoted", "producer_byte_rate", 1000)
    h = qm.client("mallory", "m")
    topics = [(f"junk-{i}", 1) for i in range(20_000)]
    h.produce_response(20_000, 0, True, 0, topics=topics)
    assert qm._topics().sensor_stats(Q.PRODUCE) == (0, 0)
    qm._topics().set(None, "producer_byte_rate", 1000)
    h.produce_response(10, 0, True, 0, topics=[("a/b", 1), ("x" * 300, 1), ("", 1), ("..", 1)])
    assert qm._topics().sensor_stats(Q.PRODUCE) == (0, 0)


def test_topic_sensors_expire_like_client_sensors():
    qm = manager()
    qm._topics().set(None, "producer_byte_rate", 1000)
    qm.client("alice", "c1").produce_response(10, 0, True, 0, topics=[("t", 10)])
    assert qm._topics().sensor_stats(Q.PRODUCE)[0] == 1
    qm._expire_sensors(3_600_001)
    assert qm._topics().sensor_stats(Q.PRODUCE)[0] == 0


def test_prometheus_series_carry_a_topic_label():
    qm = manager()
    qm._topics().set("orders", "producer_byte_rate", 1000)
    qm.client("alice", "c1").produce_response(5000, 0, True, 0, topics=[("orders", 5000)])
    for text in (
        generate_latest(kprom.registry_for(qm, now_ms=lambda: 0)).decode(),
        b"".join(qm._prometheus_stream(0, [], {})).decode(),
    ):
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        topic = [s for s in samples if s.labels.get("topic") == "orders"]
        names = {s.name for s in topic}
        assert any(n.endswith("byte_rate") for n in names), text
        assert any(n.endswith("quota_limit") for n in names), text
