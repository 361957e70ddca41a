"""Shadow quotas on real clients (confluent-kafka / librdkafka) against Apache Kafka: a shadow
configuration limiting one producer is evaluated on the proxy's traffic and never enforced (that
producer's rate and throttles are unchanged), its would-be throttle shows in the metrics and the
request log for that producer only; ``kquota configs --promote-shadow`` then makes it the
enforced one, and the producer is throttled to it. And ``--shadow-store``'s bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from kquota.cli import main
from kquota.entity import ClientQuotaEntity
from kquota.proxy.shadow import SHADOW_DELAYED_BYTES, SHADOW_THROTTLE_TIME
from kquota.quota_type import ClientQuotaType
from kquota.stores.sqlite import SQLiteConfigStore
from proxy_support import Meter, make_topic, produce_loop
from shadow_rig import ShadowRig
from waiting import wait_until

pq = pytest.importorskip("pyarrow.parquet")

#: The shadow's producer_byte_rate for client "shadow-a": far below what an unthrottled producer
#: sends through the proxy (several MB/s here), so Kafka's rule would throttle it at once.
QUOTA = 100_000


def _a_throttle(proxy) -> int:
    return sum(p.throttle_time_ms for p in proxy.proxy.shadow_predictions() if p.client_id == "shadow-a")


@pytest.mark.timing  # rates measured in its own run: one at a time (the xdist group "alone")
@pytest.mark.parametrize("marked", [False, True], ids=["shadow-store", "marked"])
def test_shadow_is_evaluated_never_enforced_then_promoted(broker, tmp_path, marked):
    rig = ShadowRig(("127.0.0.1", broker.port), str(tmp_path), marked=marked, window_num=2, window_size_seconds=1)
    rig.set_shadow([({"client-id": "shadow-a"}, {"producer_byte_rate": QUOTA})])
    # The enforced quota of A (marked: beside its mark) is far above what A sends.
    rig.enforced_store.alter([({"client-id": "shadow-a"}, {"producer_byte_rate": 1000 * QUOTA})])
    proxy, qm = rig.proxy, rig.qm
    a_entity = ClientQuotaEntity({"client-id": "shadow-a"})
    # Each manager takes its configuration: the enforced one never the mark, the shadow its value.
    assert wait_until(lambda: qm.describe_client_quotas().get(a_entity) == {"producer_byte_rate": 1000 * QUOTA}
                      and rig.shadow_qm.describe_client_quotas().get(a_entity) == {"producer_byte_rate": QUOTA}, 10), \
        (qm.describe_client_quotas(), rig.shadow_qm.describe_client_quotas())
    stop = threading.Event()
    meters = {name: Meter() for name in ("shadow-a", "shadow-b")}
    threads = []
    try:
        topic = make_topic(proxy.address)
        threads = [threading.Thread(target=produce_loop, args=(proxy.address, topic, name, meter, stop))
                   for name, meter in meters.items()]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        assert wait_until(lambda: _a_throttle(proxy) > 0, 15), proxy.proxy.shadow_predictions()
        # Let the shadow run 3 s of the producers' steady state, then look.
        wait_until(lambda: time.monotonic() >= t0 + 4, 10)
        shadow_end = time.monotonic()
        a_rate = meters["shadow-a"].rate(t0 + 1, shadow_end)
        # Never enforced: no throttle reached A, and A sends far above what the shadow allows
        # (enforced, Kafka's rule holds it within ~1.2x the quota after the burst window).
        assert not meters["shadow-a"].throttles and not meters["shadow-b"].throttles
        assert a_rate > 3 * QUOTA, a_rate
        preds = proxy.proxy.shadow_predictions()
        a = [p for p in preds if p.client_id == "shadow-a"]
        assert [p.quota_type for p in a] == [ClientQuotaType.PRODUCE], preds
        assert a[0].throttle_time_ms > 0 and a[0].delayed_bytes > 0, preds
        # B has no shadow quota: nothing would have throttled it.
        assert not [p for p in preds if p.client_id == "shadow-b"], preds
        metrics = {(m.name, m.tags.get("client-id")): m.value for m in qm.metrics() if m.group == "Produce"}
        assert metrics[(SHADOW_THROTTLE_TIME, "shadow-a")] > 0
        assert metrics[(SHADOW_DELAYED_BYTES, "shadow-a")] > 0
        assert (SHADOW_THROTTLE_TIME, "shadow-b") not in metrics

        # Promote: the enforced store takes the shadow's configuration; A is throttled to it.
        assert main(rig.promote_args()) == 0
        promoted = time.monotonic()
        assert rig.enforced_store.describe()[a_entity] == {"producer_byte_rate": QUOTA}  # no mark left
        assert wait_until(lambda: meters["shadow-a"].throttles, 10), "no throttle after the promotion"
        wait_until(lambda: time.monotonic() >= promoted + 7, 10)
        after = meters["shadow-a"].rate(promoted + 3, promoted + 7)
        assert after <= 1.3 * QUOTA, (a_rate, after)
        assert not meters["shadow-b"].throttles
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        rig.close()
    by_client: dict = {}
    for r in rig.own_rows():
        if r["quota_type"] == "PRODUCE":
            by_client.setdefault(r["client_id"], []).append(r)
    # Every native row carries the shadow's columns (a shadow is configured): A's would-be
    # throttles sum above 0, B's are all 0.
    assert all(r["shadow_throttle_time_ms"] is not None for rs in by_client.values() for r in rs)
    # By quota type: a produce would-be throttle is on a PRODUCE row, never its Request row.
    assert sum(r["shadow_throttle_time_ms"] for r in by_client["shadow-a"]) > 0, \
        ([(r["quota_type"], r["client_id"], r["shadow_throttle_time_ms"]) for r in rig.own_rows()
          if r["shadow_throttle_time_ms"]], preds)
    assert sum(r["shadow_throttle_time_ms"] + r["shadow_delayed_bytes"] for r in by_client["shadow-b"]) == 0
    # After the promotion the enforced throttle shows in the log too.
    assert sum(r["throttle_time_ms"] for r in by_client["shadow-a"]) > 0


def _proxy(*extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1", *extra],
                          capture_output=True, timeout=30, check=False)


@pytest.mark.process
def test_shadow_store_bad_input_fails_in_one_line(tmp_path):
    store = f"sqlite:///{tmp_path}/q.db"
    SQLiteConfigStore(str(tmp_path / "q.db")).close()
    for extra, message in (
        (["--shadow-store", "bogus://x"], "--shadow-store: "),
        (["--shadow-store", " "], "--shadow-store: an empty URL"),
        (["--shadow-store", store], "--shadow-store names the enforced --store"),
        # The same store under another spelling: refused by its canonical URL once open.
        (["--shadow-store", str(tmp_path / "q.db")], "--shadow-store names the enforced --store"),
        (["--shadow-store", f"sqlite:///{tmp_path}/absent.db"], "--shadow-store: "),
        (["--shadow-marked", "--shadow-store", f"sqlite:///{tmp_path}/s.db"], "--shadow-marked and --shadow-store are"),
    ):
        r = _proxy("--store", store, *extra)
        err = r.stderr.decode().strip().splitlines()
        assert r.returncode == 1, (extra, err)
        assert len(err) == 1 and err[0].startswith(f"kquota: error: {message}"), (extra, err)


def test_promote_shadow_bad_input_fails_in_one_line_and_changes_nothing(tmp_path, capsys):
    enforced = SQLiteConfigStore(str(tmp_path / "enforced.db"))
    enforced.alter([({"user": "keep"}, {"producer_byte_rate": 1000})])
    enforced.close()
    store = f"sqlite:///{tmp_path}/enforced.db"
    for argv, message in (
        # No --shadow-store: the store's marks are promoted, and it holds none.
        (["--promote-shadow", "--store", store], "no --shadow-store was given: nothing to promote"),
        (["--promote-shadow", "--store", store, "--shadow-store", "bogus://x"], "--shadow-store: "),
        (["--promote-shadow", "--store", store, "--shadow-store", store], "are the same store"),
        (["--promote-shadow", "--store", store, "--shadow-store", f"sqlite:///{tmp_path}/nope.db"],
         "--shadow-store: "),
        (["--promote-shadow", "--store", store, "--shadow-store", store, "--user", "x"], "no entity"),
        (["--describe", "--store", store, "--shadow-store", store], "--shadow-store needs --promote-shadow"),
    ):
        assert main(["configs", *argv]) == 1, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
    with SQLiteConfigStore(str(tmp_path / "enforced.db")) as s:
        assert s.describe() == {ClientQuotaEntity({"user": "keep"}): {"producer_byte_rate": 1000.0}}


def test_promote_shadow_replaces_the_whole_configuration(tmp_path, capsys):
    with SQLiteConfigStore(str(tmp_path / "enforced.db")) as s:
        s.alter([({"user": "gone"}, {"producer_byte_rate": 1000}),
                 ({"user": "kept"}, {"producer_byte_rate": 1000, "consumer_byte_rate": 5})])
    with SQLiteConfigStore(str(tmp_path / "shadow.db")) as s:
        s.alter([({"user": "kept"}, {"producer_byte_rate": 2000}),
                 ({"ip": "10.0.0.1"}, {"connection_creation_rate": 3})])
    assert main(["configs", "--promote-shadow", "--shadow-store", f"sqlite:///{tmp_path}/shadow.db",
                 "--store", f"sqlite:///{tmp_path}/enforced.db"]) == 0
    assert "3 entities changed" in capsys.readouterr().out
    with SQLiteConfigStore(str(tmp_path / "enforced.db")) as e, SQLiteConfigStore(str(tmp_path / "shadow.db")) as s:
        assert e.describe() == s.describe()


@pytest.mark.process
def test_the_proxy_process_evaluates_the_stores_marks_with_shadow_marked(broker, tmp_path):
    """``kquota proxy --shadow-marked``: a quota marked shadow in ``--store`` throttles nobody and
    shows as the would-be throttle of its client on the metrics port and the status page."""
    import re
    import urllib.request

    from confluent_kafka import Producer
    from proxy_cli import start_proxy, stop_proxy
    from waiting import free_port

    with SQLiteConfigStore(str(tmp_path / "q.db")) as s:
        s.alter([({"client-id": "marked"}, {"producer_byte_rate": 100_000_000, "shadow.producer_byte_rate": 50_000})])
    metrics_port = free_port()
    proc, port = start_proxy(broker, tmp_path, "--shadow-marked", "--metrics-port", str(metrics_port))
    try:
        address = f"127.0.0.1:{port}"
        topic = make_topic(address)
        throttles: list[int] = []
        p = Producer({"bootstrap.servers": address, "client.id": "marked", "linger.ms": 5,
                      "statistics.interval.ms": 100,
                      "stats_cb": lambda js: throttles.extend(b["throttle"]["max"] for b in json.loads(js)["brokers"].values())})
        for _ in range(100):  # 1 MB: 20 s of the marked quota
            p.produce(topic, b"x" * 10_000)
            p.poll(0)
        assert p.flush(15) == 0
        p.poll(0.3)

        def shadow_ms() -> float:
            body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
            found = re.search(r'^kafka_server_produce_shadow_throttle_time_total\{[^}]*client_id="marked"[^}]*\} (\S+)$',
                              body, re.M)
            return float(found.group(1)) if found else 0.0

        assert wait_until(lambda: shadow_ms() > 0, 10)
        assert throttles and not any(throttles), throttles  # the mark was never enforced
        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/", timeout=5).read().decode()
        assert "(quotas marked shadow)" in page and "marked" in page
        del p
    finally:
        code, err = stop_proxy(proc)
    assert code == 0 and "Traceback" not in err, err
    assert "shadow quotas marked in sqlite://" in err


@pytest.mark.process
def test_a_proxy_without_shadow_marked_warns_of_the_marks_it_leaves_alone(broker, tmp_path):
    from proxy_cli import start_proxy, stop_proxy

    with SQLiteConfigStore(str(tmp_path / "q.db")) as s:
        s.alter([({"client-id": "a"}, {"producer_byte_rate": 1000, "shadow.producer_byte_rate": 500}),
                 ({"user": None}, {"shadow.consumer_byte_rate": 5})])
    proc, _ = start_proxy(broker, tmp_path)
    code, err = stop_proxy(proc)
    assert code == 0, err
    assert "holds 2 quota(s) marked shadow, not evaluated: start with --shadow-marked" in err, err
