"""``kquota proxy`` as a process: quotas from a store, the request log in the pipeline's schema,
metrics, a clean exit 0 on SIGTERM / SIGINT with no traceback, and the proxy guide's loop (capture,
recommend, apply, enforced live) on real traffic."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import urllib.request

import pytest
from proxy_cli import assert_enforced_once_applied, capture_and_recommend, start_proxy, stop_proxy
from waiting import free_port, wait_until

pytestmark = pytest.mark.process

confluent_kafka = pytest.importorskip("confluent_kafka")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_runs_logs_requests_and_exits_cleanly(broker, tmp_path, sig):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kquota.stores.sqlite import SQLiteConfigStore

    with SQLiteConfigStore(str(tmp_path / "q.db")) as store:
        store.alter([({"client-id": "logged"}, {"producer_byte_rate": 10_000_000})])
    metrics_port = free_port()
    log_dir = tmp_path / "requests"
    cfg = tmp_path / "proxy.properties"
    cfg.write_text("# broker-style\nquota.window.num=5\nsocket.request.max.bytes=2000000\n")
    # Two native worker threads in one of the runs: the connection state is shared across them.
    threads = ("--threads", "2") if sig == signal.SIGINT else ()
    proc, port = start_proxy(broker, tmp_path, "--request-log", str(log_dir), "--metrics-port", str(metrics_port),
                             "--config", str(cfg), *threads)
    topic = f"cli-topic-{uuid.uuid4().hex[:8]}"  # the broker is the session's
    try:
        address = f"127.0.0.1:{port}"
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": address})
        for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            f.result(10)
        p = Producer({"bootstrap.servers": address, "client.id": "logged"})
        for i in range(200):
            p.produce(topic, b"m%d" % i)
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": address, "client.id": "reader", "group.id": "r",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        wait_until(lambda: got.extend(m for m in c.consume(500, 0.5) if not m.error()) or len(got) >= 200, 15, 0)
        c.close()
        assert len(got) == 200
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        assert 'client_id="logged"' in body
    finally:
        code, text = stop_proxy(proc, sig)
    assert code == 0, text
    assert "Traceback" not in text
    assert "kquota proxy listening on 127.0.0.1:%d" % port in text
    assert "(native data plane)" in text
    files = sorted(log_dir.glob("*.parquet"))
    assert files, text
    table = pq.read_table([str(f) for f in files]) if len(files) > 1 else pq.read_table(str(files[0]))
    assert table.schema.names == ["ts_ms", "broker", "user", "client_id", "quota_type", "value", "topic",
                                  "throttle_time_ms", "shadow_throttle_time_ms", "shadow_delayed_bytes"]
    rows = table.to_pylist()
    # No quota and no --shadow-store: no throttle, the shadow's columns null.
    assert all(r["throttle_time_ms"] == 0 and r["shadow_throttle_time_ms"] is None
               and r["shadow_delayed_bytes"] is None for r in rows)
    produce = [r for r in rows if r["client_id"] == "logged" and r["quota_type"] == "PRODUCE" and r["topic"] is None]
    fetch = [r for r in rows if r["client_id"] == "reader" and r["quota_type"] == "FETCH" and r["topic"] is None]
    assert produce and fetch
    # Each Produce's topic row: the one topic, its bytes within the request's.
    topic_rows = [r for r in rows if r["client_id"] == "logged" and r["topic"] is not None]
    assert {r["topic"] for r in topic_rows} == {topic} and len(topic_rows) == len(produce)
    assert all(0 < t["value"] < p["value"] for t, p in zip(topic_rows, produce))
    assert all(r["user"] == "ANONYMOUS" and r["broker"] == 0 and r["value"] > 0 for r in produce + fetch)
    assert any(r["quota_type"] == "REQUEST" for r in rows)
    assert abs(produce[0]["ts_ms"] - time.time() * 1000) < 120_000


def test_cli_bad_arguments_fail_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "nohost",
                        "--store", f"sqlite:///{tmp_path}/q.db"], capture_output=True, timeout=30, check=False)
    assert r.returncode == 1
    assert r.stderr.decode().strip().splitlines() == [
        "kquota: error: --bootstrap-server must be [PROTOCOL://]HOST:PORT, got 'nohost'"]
    bad = tmp_path / "bad.properties"
    bad.write_text("quota.window.num=zero\n")
    r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1",
                        "--store", f"sqlite:///{tmp_path}/q.db", "--config", str(bad)],
                       capture_output=True, timeout=30, check=False)
    assert r.returncode == 1
    assert "quota.window.num must be an integer" in r.stderr.decode()
    assert "Traceback" not in r.stderr.decode()
    for extra, message in ((["--threads", "0"], "--threads must be between 1 and 64, got 0"),
                           (["--threads", "65"], "--threads must be between 1 and 64, got 65")):
        r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1",
                            "--store", f"sqlite:///{tmp_path}/q.db", *extra], capture_output=True, timeout=30, check=False)
        assert r.returncode == 1
        assert r.stderr.decode().strip().splitlines() == [f"kquota: error: {message}"]


def test_cli_help_names_every_option():
    r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--help"], capture_output=True, timeout=30, check=False)
    text = r.stdout.decode()
    for option in ("--bootstrap-server", "--listen", "--store", "--quota-window-num", "--quota-window-size-seconds",
                   "--config", "--metrics-port", "--request-log", "--admin-principals", "--threads", "--event-loop"):
        assert option in text
    assert "--data-plane" not in text  # one data plane: the asyncio one is retired
    assert "(default: 1)" in " ".join(text.split())


def test_request_log_is_a_pipeline_input(tmp_path, spark):
    """The rotated files read as one request log in the pipeline (no bad rows), and the pipeline's
    simulate replays them: capture -> usage/recommend/simulate on real traffic."""
    from kquota.pipeline.schema import read_requests
    from kquota.proxy.request_log_writer import RequestLogWriter

    log = RequestLogWriter(str(tmp_path / "log"), rotate_rows=100)
    for i in range(250):
        log.add(1_700_000_000_000 + i, "alice" if i % 2 else "ANONYMOUS", f"c{i % 3}",
                ["PRODUCE", "FETCH", "REQUEST"][i % 3], 1000.0 + i)
    log.close()
    files = sorted(os.listdir(tmp_path / "log"))
    assert len(files) == 3 and all(f.startswith("requests-") and f.endswith(".parquet") for f in files)
    requests = read_requests(spark, str(tmp_path / "log"))
    assert requests.bad_total() == 0
    assert requests.requests.count() == 250


def test_request_log_rotates_on_time_without_traffic(tmp_path):
    from kquota.proxy.request_log_writer import RequestLogWriter

    log = RequestLogWriter(str(tmp_path), rotate_rows=1000, rotate_seconds=0.3)
    log.add(1, "u", "c", "PRODUCE", 10)
    wait_until(lambda: list(tmp_path.glob("*.parquet")), 5)
    assert len(list(tmp_path.glob("*.parquet"))) == 1  # written with no further add()
    log.close()


@pytest.mark.timing
def test_captured_traffic_recommended_and_applied_is_enforced_live(broker, spark, tmp_path):
    """The proxy guide's loop (docs/guides/proxy.md), every step through kquota's own commands on
    real traffic: ``kquota proxy --request-log`` captures a client producing at a steady ~100 KB/s;
    ``kquota pipeline usage`` and ``recommend`` turn the capture into that client's quota (its p99
    per-second rate x 1.2); ``kquota configs --alter --quota-file`` writes the recommendation to the
    store; and a running proxy following that store holds the same client, now producing as fast as
    it can, to the recommended rate."""
    from kquota.cli import main

    topic, rec, quota = capture_and_recommend(broker, tmp_path)

    def apply(_address: str) -> None:
        assert main(["configs", "--store", f"sqlite:///{tmp_path}/q.db", "--alter", "--quota-file",
                     str(rec / "quotas.json")]) == 0

    assert_enforced_once_applied(broker, tmp_path, topic, quota, apply)


def test_admin_principals_split_at_commas_except_inside_a_distinguished_name():
    from kquota.proxy.cli import _principal_list

    assert _principal_list("User:admin,ANONYMOUS") == ["User:admin", "ANONYMOUS"]
    assert _principal_list("User:CN=admin,OU=ops,O=kquota,User:bob") == ["User:CN=admin,OU=ops,O=kquota", "User:bob"]
    # Kafka's super.users separator.
    assert _principal_list("User:CN=a, OU=b;ANONYMOUS") == ["User:CN=a, OU=b", "ANONYMOUS"]
