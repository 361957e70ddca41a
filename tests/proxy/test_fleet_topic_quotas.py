"""Topic quotas in ``kquota proxy --quota-scope fleet``, with real proxy processes and real
clients against Apache Kafka's broker: a topic's quota is one budget for the fleet, split among
the proxies by the same rule as a client quota (``kquota.proxy.fleet_shares``), keyed by topic.

The fleet's settings are :mod:`test_proxy_fleet`'s (``quota.window.num=2`` of 1 s)."""

from __future__ import annotations

import time

import pytest
from proxy_support import make_topic, produce_loop
from store_helpers import run_cli
from test_proxy_fleet import clean_from, fleet_metric, measured, settled
from test_proxy_fleet import clients, fleet  # noqa: F401 (fixtures)
from waiting import wait_until

pytestmark = pytest.mark.timing

pytest.importorskip("confluent_kafka")
QUOTA = 200_000  # bytes/s of the topic, for the whole fleet


def topic_quota(fleet, topic, value):
    r = run_cli("--store", f"kafka://{fleet.broker.address}/{fleet.topic}", "--alter", "--add-config",
                f"producer_byte_rate={value}", "--entity-type", "topics", "--entity-name", topic)
    assert r.returncode == 0, r.stderr


def topic_share(metrics_port, topic):
    """This proxy's ``fleet-share`` of ``topic``'s Produce quota (None: not shared yet)."""
    import urllib.request

    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith("kafka_server_fleet_fleet_share{") and f'topic="{topic}"' in line and '"Produce"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_two_proxies_hold_one_topic_quota_together(fleet, broker, clients):
    """Two proxies of one fleet, a producer flat out through each, with different client ids and
    no client quota; the topic's quota is 200 KB/s. Both are saturated, so the split rule gives
    each proxy half of the topic's budget (the shares of an entity add up to 1), and each proxy
    holds its topic sensor to its half by Kafka's rule: the aggregate is the quota, within the
    fleet tests' 15% (a sample of overshoot over the measured span on either proxy). Without
    the fleet's shares each proxy would let the whole quota through: 2x."""
    data = make_topic(broker.address)
    topic_quota(fleet, data, QUOTA)
    members = [fleet.start() for _ in range(2)]
    meters = [clients.run(produce_loop, addr, data, f"topic-producer-{i}") for i, (addr, _) in enumerate(members)]
    ports = [m for _, m in members]
    # Settled: each sees the other, and holds half of the topic's quota.
    settled(ports, 2)
    assert wait_until(lambda: all(abs((topic_share(m, data) or 0) - 0.5) <= 0.02 for m in ports), 30, 0.2), \
        [topic_share(m, data) for m in ports]
    at = time.monotonic()
    total = measured(meters, clean_from(at, 2), 15)
    each = [measured([m], clean_from(at, 2), 15) for m in meters]
    print(f"topic quota over 2 proxies: aggregate {total / QUOTA:.2f}x the quota, each {[round(e / QUOTA, 2) for e in each]}")
    assert 0.85 * QUOTA <= total <= 1.15 * QUOTA, total / QUOTA
    # Neither producer is starved: the split is even for two saturated members.
    assert all(e >= 0.5 * QUOTA / 2 for e in each), each
    # No client quota is shared: only the topic's.
    assert all(fleet_metric(m, "fleet_share_min") == pytest.approx(0.5, abs=0.02) for m in ports)


def test_coordinators_share_a_topic_quota_by_demand_and_report_it(broker):
    """Two coordinators (the proxies' fleet threads, stepped here) of one usage topic on Kafka's
    broker, each kernel with the topic quota 10,000 B/s of ``orders``. Both record the topic
    flat out (saturated): each holds half, its topic sensor's bound is half the quota, and the
    share shows in the metrics and on the status page tagged by topic. Then one goes quiet
    (light): the busy one gets the rest of the quota, the split rule's answer for a light and a
    saturated member. A client's share is untouched by the topic's."""
    import uuid

    import kquota
    from kquota.proxy.fleet import FleetCoordinator
    from kquota.proxy.fleet_shares import FLOOR, split
    from waiting import step_until

    quota = 10_000.0
    interval = 0.3
    store = f"quotas-{uuid.uuid4().hex[:8]}"
    qms = [kquota.QuotaManager(window_num=2), kquota.QuotaManager(window_num=2)]
    coords = []
    try:
        for qm in qms:
            qm.alter_client_quotas([({"topic": "orders"}, {"producer_byte_rate": quota})])
        coords = [FleetCoordinator(qm, broker.address, store, interval_s=interval, key=b"k" * 32) for qm in qms]
        handles = [qm.client("", f"client-{i}") for i, qm in enumerate(qms)]
        busy = [True, True]

        def produce() -> None:
            for h, on in zip(handles, busy):
                if on:
                    h.produce_response(2000.0, 0, topics=[("orders", 2000.0)])

        def shares_are(want) -> bool:
            produce()
            return all(abs(qm._topics().shares("PRODUCE")[1].get("orders", -1) - w) <= 0.02 for qm, w in zip(qms, want))

        assert step_until(coords, lambda: shares_are([0.5, 0.5]), 30, interval), [qm._topics().shares("PRODUCE") for qm in qms]
        assert all(c.fleet_size == 2 for c in coords)
        for qm in qms:
            rows = {(m.group, m.name, tuple(m.tags.items())): m.value for m in qm.metrics()}
            assert rows[("Produce", "quota-limit", (("topic", "orders"),))] == pytest.approx(quota / 2, rel=0.05)
            assert qm._shares("PRODUCE") == (0.5, {})  # no client quota: the clients' map names nobody
        fleet_rows = [m for m in coords[0].metrics() if m.name == "fleet-share"]
        assert [(dict(m.tags), round(m.value, 1)) for m in fleet_rows] == [({"quota-type": "Produce", "topic": "orders"}, 0.5)]
        shown = coords[0].status(10)["shares"]
        assert shown == [{"quota_type": "Produce", "topic": "orders", "share": pytest.approx(0.5, abs=0.02)}]

        # The second goes quiet: light, so the first (saturated) takes what the second does not use.
        busy[1] = False
        want = split(quota, {"a": None, "b": 0.0})
        assert want["b"] == pytest.approx(FLOOR / 2)
        assert step_until(coords, lambda: shares_are([want["a"], want["b"]]), 30, interval), \
            [qm._topics().shares("PRODUCE") for qm in qms]
        # Stopped, a coordinator gives every topic quota back whole.
        coords.pop(0).stop()
        assert qms[0]._topics().shares("PRODUCE") == (1.0, {})
    finally:
        for c in coords:
            c.stop()
        for qm in qms:
            qm.close()
