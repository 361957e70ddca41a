"""Real clients flat out through the proxy track their quota as Kafka's closed loop does (a
CI-sized run of ``benches/bench_accuracy.py``: a few cells, short quota windows), and a
throttled client's ``throttle-time`` series is exposed with a finite, positive value."""

from __future__ import annotations

import pytest
import math
import re
import urllib.request

from proxy_accuracy import Cell, measure, preload, run_cells
from proxy_support import make_topic
from waiting import free_port

pytestmark = pytest.mark.timing

WINDOW_NUM = 2  # a 1 s burst allowance: Kafka's sample-expiry swings are one window, not ten
START_S = 6.0  # after 3 quota windows
#: The largest request here, a 1 MB Fetch at 200 KB/s, is 5 s of quota: the window holds
#: eighteen of them, so that the request a window's phase may add or drop between the closed
#: loop and the proxy (one of six over 30 s: 0.83x) stays well inside the 10% bounds below.
END_S = START_S + 90.0


def test_clients_flat_out_track_their_quota_like_kafkas_closed_loop(broker):
    topics = {"produce": make_topic(broker.address), "consume": make_topic(broker.address)}
    preload(broker.address, topics["consume"], int(200_000 * (END_S + 10)))  # what a consumer reads, and more
    cells = [
        Cell("confluent-16k", "produce", 200_000, "acc-c16"),
        Cell("confluent-1m", "produce", 1_000_000, "acc-c1m"),
        Cell("kafka-python", "produce", 200_000, "acc-kp"),
        Cell("aiokafka", "produce", 200_000, "acc-aio"),
        Cell("confluent", "consume", 200_000, "acc-cc"),
        Cell("aiokafka", "consume", 200_000, "acc-ac"),
    ]
    rows = run_cells(broker, cells, WINDOW_NUM, END_S, topics)
    failures = []
    for c in cells:
        assert not c.error, (c.kind, c.error)
        r = measure(c, rows, WINDOW_NUM, START_S, END_S)
        line = f"{c.role} {c.kind}: {r.rate:.3f}x (closed loop {r.reference:.3f}x, {r.requests} requests)"
        print(line)
        # Within 0.9-1.1x of the quota, and within 10% of what Kafka's closed loop gives the
        # same request sizes over the same window.
        if not (0.9 <= r.rate <= 1.1 and abs(r.rate - r.reference) <= 0.1):
            failures.append(line)
    assert not failures, failures


def test_throttled_clients_throttle_time_series_is_finite_and_positive(broker, tmp_path):
    from confluent_kafka import Producer

    from proxy_cli import start_proxy, stop_proxy  # the CLI process helpers
    from kquota.stores.sqlite import SQLiteConfigStore

    with SQLiteConfigStore(str(tmp_path / "q.db")) as store:
        store.alter([({"client-id": "throttled"}, {"producer_byte_rate": 50_000})])
    cfg = tmp_path / "proxy.properties"
    cfg.write_text("quota.window.num=2\n")
    metrics_port = free_port()
    proc, port = start_proxy(broker, tmp_path, "--metrics-port", str(metrics_port), "--config", str(cfg))
    try:
        address = f"127.0.0.1:{port}"
        topic = make_topic(address)
        throttles: list[float] = []
        p = Producer({"bootstrap.servers": address, "client.id": "throttled", "linger.ms": 5,
                      "throttle_cb": lambda e: throttles.append(e.throttle_time)})
        for _ in range(400):
            p.produce(topic, b"x" * 1000)
            p.poll(0)
        p.flush(30)
        assert any(t > 0 for t in throttles)
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    finally:
        code, text = stop_proxy(proc)
    assert code == 0, text
    series = re.findall(r'^kafka_server_produce_throttle_time\{([^}]*)\} (\S+)$', body, re.M)
    mine = [float(v) for labels, v in series if 'client_id="throttled"' in labels]
    assert mine, body
    assert all(math.isfinite(v) and v > 0 for v in mine), mine
    # The type's average (no labels) is no longer Kafka's Avg of nothing either.
    total = re.search(r"^kafka_server_produce_throttle_time (\S+)$", body, re.M)
    assert total and math.isfinite(float(total.group(1))) and float(total.group(1)) > 0
