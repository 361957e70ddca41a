"""Smoke test of the benchmark suite's Python part (quick mode, the build under test).

Runs ``pytest benches``, ``benches/compare.py`` and ``benches/summary.py`` exactly as
``scripts/bench.sh`` does, with ``KQ_BENCH_QUICK=1`` and the results redirected to a temporary
directory (the committed results are never touched), then checks that every output parses and
lists every row: measured where the build and the installed peers allow it, otherwise marked
unavailable with the reason. Nothing here looks at the timings.
"""

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

import kquota
from waiting import wait_until

pytestmark = pytest.mark.process

pytest.importorskip("pytest_benchmark")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHES = os.path.join(REPO, "benches")


def _run(args, env):
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _load(path):
    with open(path) as f:
        return json.load(f)


def _bench_module(name):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", os.path.join(BENCHES, f"{name}.py"))
    sys.path.insert(0, BENCHES)
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(BENCHES)
    return mod


def test_quick_suite_writes_every_row(tmp_path):
    env = {**os.environ, "KQ_BENCH_QUICK": "1", "KQ_BENCH_RESULTS_DIR": str(tmp_path),
           "KQ_BENCH_CRITERION_DIR": str(tmp_path / "no-criterion"), "KQ_BENCH_LATENCY_CALLS": "20000"}
    env.pop("KQ_BENCH_STARTED", None)
    # Run as scripts/bench.sh runs it, not as a pytest-xdist worker: pytest-benchmark turns itself
    # off when it sees PYTEST_XDIST_WORKER.
    for name in [k for k in env if k.startswith("PYTEST_XDIST_")]:
        env.pop(name)
    _run(["-m", "pytest", "benches", "-q", "-p", "no:cacheprovider"], env)
    _run([os.path.join("benches", "compare.py")], env)
    _run([os.path.join("benches", "summary.py")], env)

    # Record path: every variant measured, every ratio computed.
    support = _bench_module("bench_support")
    record = _load(tmp_path / "python_record.json")
    assert set(record["results"]) == set(support.VARIANTS)
    assert [r["key"] for r in record["ratios"]] == [r[0] for r in support.RATIOS]
    assert all(r["median_ns"] > 0 for r in record["results"].values())

    # Keyed comparison: every row present; measured iff what it needs exists, else the reason.
    compare = _load(tmp_path / "python_compare.json")
    rows = compare["rows"]
    assert compare["quick"] is True
    assert compare["row_order"] and set(compare["row_order"]) == set(rows)
    expected = {"loop_only", "empty_named", "empty_handle", "noop", "kquota_handle", "kquota_named",
                "kquota_callback", "kquota_request_time_named", "kquota_request_time_handle",
                "kquota_mutation_named", "kquota_mutation_handle", "kquota_batch_replay", "oracle",
                "limits_fixed", "limits_moving", "pyrate_log", "token_bucket"}
    assert expected <= set(rows)
    needs = {
        "kquota_request_time_named": hasattr(kquota.QuotaManager, "record_request_time"),
        "kquota_mutation_named": hasattr(kquota.QuotaManager, "record_controller_mutations"),
        "kquota_callback": hasattr(kquota, "ClientQuotaCallback"),
        "limits_fixed": importlib.util.find_spec("limits") is not None,
        "limits_moving": importlib.util.find_spec("limits") is not None,
        "pyrate_log": importlib.util.find_spec("pyrate_limiter") is not None,
        "token_bucket": importlib.util.find_spec("token_bucket") is not None,
    }
    for key, r in rows.items():
        if r["available"]:
            assert r["median_ns"] > 0 and r["rounds"] > 0, key
            assert r["all_admitted"] is True, f"{key}: the timed path was not the admitted one"
            if r["baseline"]:
                assert r["ratio"] > 0, key
        else:
            assert r["reason"], key
            assert "median_ns" not in r, f"{key}: an unavailable row must carry no number"
        if key in needs and not needs[key]:
            assert not r["available"], f"{key} measured although its API/package is missing"
    for key in ("kquota_handle", "kquota_named", "oracle", "noop", "empty_named"):
        assert rows[key]["available"], key
    for key, present in needs.items():
        if present and key.startswith(("limits", "pyrate", "token")):
            assert rows[key]["available"], f"{key}: {rows[key].get('reason')}"
    if os.environ.get("CI"):
        # The test extra installs the peers (scripts/test.sh): in CI every peer row is measured.
        for key in ("limits_fixed", "limits_moving", "pyrate_log", "token_bucket"):
            assert rows[key]["available"], f"{key}: {rows[key].get('reason')}"
    for key in ("kquota_request_time_named", "kquota_mutation_named", "kquota_batch_replay"):
        if not rows[key]["available"]:
            assert rows[key]["reason"].startswith("not available in this build"), key
    lat = compare["latency"]["ns_per_call"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]

    # Summary: parses, names the machine and versions, and lists every row of every suite.
    summary = _load(tmp_path / "summary.json")
    m = summary["machine"]
    for k in ("cpu_model", "logical_cpus", "python", "rustc", "kquota", "peers", "date"):
        assert k in m, k
    keys = {(r["suite"], r["key"]) for r in summary["rows"]}
    assert {("python_compare", k) for k in rows} <= keys
    assert {("python_record", f"{r['numerator']}/{r['denominator']}") for r in record["ratios"]} <= keys
    crit = [r for r in summary["rows"] if r["suite"] == "criterion"]
    assert {r["key"] for r in crit} == {"sensor_record_and_measure", "handle_record_one_thread",
                                        "handle_record_two_threads_distinct_sensors",
                                        "handle_record_two_threads_same_sensor", "named_record_one_thread",
                                        "topic_rate_one_thread", "topic_rate_two_threads_same_sensor",
                                        "topic_record_one_thread", "topic_record_two_threads_same_topic",
                                        "handle_record_one_thread_topic_quotas_configured"}
    assert all(r["value"] is None and r["status"].startswith("not run") for r in crit)
    assert summary["suites"]["native"].startswith("not run")
    for r in summary["rows"]:
        assert (r["value"] is None) == (r["status"] != "ok"), r
    md = (tmp_path / "summary.md").read_text()
    for key in rows:
        assert f"| {key} |" in md, key
    # An unavailable row shows its own reason (whatever it is) in the summary table.
    for key, r in rows.items():
        if not r["available"]:
            line = next(x for x in md.splitlines() if x.startswith(f"| {key} |"))
            assert f"| {r['reason']} |" in line, (key, line)


def _samples(rng, n, lo=1.0, hi=2.0):
    return sorted(rng.uniform(lo, hi) for _ in range(n))


def test_bench_proxy_pooled_quantile_matches_a_sort_of_the_pool():
    """The bisection quantile is the pooled sort's k-th sample, weights counting a segment twice."""
    import random

    bench = _bench_module("bench_proxy")
    rng = random.Random(7)
    segments = [_samples(rng, rng.randrange(50, 150), 0.5, 40.0) for _ in range(9)]
    weights = [rng.randrange(0, 3) for _ in segments]
    weights[0] = 1
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        pool = sorted(v for s in segments for v in s)
        assert abs(bench.pooled_pct(segments, q) - pool[min(len(pool) - 1, int(q * len(pool)))]) < 1e-9
        pool = sorted(v for s, w in zip(segments, weights) for _ in range(w) for v in s)
        assert abs(bench.pooled_pct(segments, q, weights) - pool[min(len(pool) - 1, int(q * len(pool)))]) < 1e-9


def test_bench_proxy_latency_verdict_judges_the_whole_interval(tmp_path, monkeypatch):
    """met / NOT met only when the bootstrap interval is on one side of the target, else unresolved."""
    import random

    bench = _bench_module("bench_proxy")
    rng = random.Random(11)
    direct = [_samples(rng, 100) for _ in range(16)]
    shifted = lambda by: [[v + by for v in s] for s in direct]  # noqa: E731

    row = bench.latency_row(direct, shifted(0.1), 0.5, "added <= 0.3 ms")
    assert abs(row["added"] - 0.1) < 1e-6 and row["ci95"][0] <= row["added"] <= row["ci95"][1]
    assert row["verdict"] == "met" and row["pairs"] == 16
    assert bench.latency_row(direct, shifted(2.0), 0.99, "added <= 1.0 ms")["verdict"] == "NOT met"

    # One stalled proxied segment: 30 of its 100 samples 5 ms late. Pooled, they are the top 1%,
    # so the point estimate says +5 ms, but a resample without that pair says 0: the run cannot tell.
    stalled = [list(s) for s in direct]
    stalled[3] = sorted(v + (5.0 if i < 30 else 0.0) for i, v in enumerate(stalled[3]))
    row = bench.latency_row(direct, stalled, 0.99, "added <= 1.0 ms")
    assert row["added"] > 1.0 and row["ci95"][0] < 1.0 < row["ci95"][1]
    assert row["verdict"].startswith("unresolved")
    assert "verdict" not in bench.latency_row(direct, direct, 0.99, "control")

    # Throughput: the ratio of medians over 7 interleaved pairs, judged the same way.
    base = [200_000.0, 180_000.0, 230_000.0, 210_000.0, 190_000.0, 250_000.0, 170_000.0]
    assert bench.ratio_row(base, [v * 0.95 for v in base], 0.9)["verdict"] == "met"
    assert bench.ratio_row(base, [v * 0.7 for v in base], 0.9)["verdict"] == "NOT met"
    uneven = bench.ratio_row(base, [v * f for v, f in zip(base, (0.6, 1.0, 0.6, 1.0, 0.6, 1.0, 0.95))], 0.9)
    assert uneven["ci95"][0] < 0.9 < uneven["ci95"][1] and uneven["verdict"].startswith("unresolved")
    assert "verdict" not in bench.ratio_row(base, base, "control")
    assert bench.ratio_row(base, base, "floor")["target"] == "floor"

    text = bench.render({"generated": "now", "messages": 1, "repeats": 1, "latency_pairs": 16, "latency_seconds": 1.0,
                         "machine": {"cpu_count": 2, "platform": "p", "python": "3", "loadavg_before": [0, 0, 0],
                                     "loadavg_after": [0, 0, 0]},
                         "proxy_exit_code": {"native": 0}, "rows": {"latency p99 [x]": row}})
    lo, hi = row["ci95"]
    assert f"{row['added']:+.3f} ms (95%: {lo:+.2f} to {hi:+.2f})" in text and row["verdict"] in text

    # The benchmark summary carries the interval and the verdict from proxy.json, not a re-derived one.
    (tmp_path / "proxy.json").write_text(json.dumps({"generated": "now", "rows": {"latency p99 [x]": row}}))
    summary = _bench_module("summary")
    monkeypatch.setattr(summary, "RESULTS", str(tmp_path))
    line = next(x for x in summary.proxy_lines() if x.startswith("| latency p99 [x]"))
    assert f"({lo:+.2f} to {hi:+.2f})" in line and row["verdict"] in line


def test_bench_proxy_throughput_pairs_alternate_segments_on_fresh_brokers(tmp_path, monkeypatch):
    """Each block has two fresh brokers up at once, segments alternate which side goes first
    (produce, then consume of the same offsets), and the CPU per MB is the relay's, over its own
    segments only."""
    import argparse
    import contextlib

    bench = _bench_module("bench_proxy")
    opened: list[tuple] = []
    cpu = [0.0]

    class Relay:
        address = "relay:1"

        def cpu_seconds(self) -> float:
            return cpu[0]

    class Broker:
        def __init__(self, n: int) -> None:
            self.address = f"broker:{n}"

    @contextlib.contextmanager
    def fresh(kind, via=None):
        broker = Broker(len(opened))
        opened.append((kind, via, broker))
        yield broker, (Relay() if via else None)

    class FakeProducer:
        def __init__(self, address: str) -> None:
            self.address = address

    calls: list[tuple] = []
    woken: dict[str, int] = {}  # voluntary context switches per broker address

    def produce_segment(p, topic, n):
        calls.append(("p", p.address, topic))
        cpu[0] += 0.25 if p.address == "relay:1" else 0.0  # only the relay's own segments cost it
        behind = topic[2:]  # the topic's broker ("t-broker:N")
        woken[behind] = woken.get(behind, 0) + (16 if p.address == "relay:1" else 10)
        return 100.0 if p.address.startswith("broker") else 90.0

    def consume_segment(address, topic, start, n, client):
        calls.append(("c", address, topic, start))
        cpu[0] += 0.25 if address == "relay:1" else 0.0
        return 50.0 if address.startswith("broker") else 45.0

    monkeypatch.setattr(bench, "new_topic", lambda broker: f"t-{broker.address}")
    monkeypatch.setattr(bench, "producer", lambda address, topic, client: FakeProducer(address))
    monkeypatch.setattr(bench, "produce_segment", produce_segment)
    monkeypatch.setattr(bench, "consume_segment", consume_segment)
    monkeypatch.setattr(bench, "broker_switches", lambda broker: {"1": woken.get(broker.address, 0)})
    args = argparse.Namespace(repeats=2, segments=3, messages=1000)
    out = bench.throughput_pairs(fresh, "native", "plain", args)

    assert [(k, via) for k, via, _ in opened] == [("tansu", None), ("tansu", "native")] * 2
    assert len({id(b) for _, _, b in opened}) == 4  # fresh brokers per block
    # Pair k: direct first when k is even; the second block continues the count (pairs 3-5).
    first = [c[1] for c in calls if c[0] == "p"][::2]
    assert first == ["broker:0", "relay:1", "broker:0", "relay:1", "broker:2", "relay:1"]
    # Each consume segment reads back its produce segment's offsets, after the warm-up message.
    starts = [(c[1], c[3]) for c in calls if c[0] == "c"][:6]
    assert sorted(starts) == sorted([("broker:0", 0), ("relay:1", 0), ("broker:0", 1000), ("relay:1", 1000),
                                     ("broker:0", 2000), ("relay:1", 2000)])
    # The relay's segments go to the topic on the relay's broker (block 1: broker 1, block 2: broker 3).
    assert {c[2] for c in calls[:12] if c[1] == "relay:1"} == {"t-broker:1"}
    assert {c[2] for c in calls[12:] if c[1] == "relay:1"} == {"t-broker:3"}
    assert out["produce direct"] == [100.0] * 6 and out["produce via"] == [90.0] * 6
    assert out["consume via"] == [45.0] * 6
    # 6 relay segments x 0.25 s over 2 x 3 x 1000 KB messages, per block.
    assert out["cpu_ms_per_mb"] == [pytest.approx(1.5 * 1000 / (2 * 3 * 1000 * 1024 / 1e6))] * 2
    # Each produce segment's wake-ups are its own broker's, per MB (1000 x 1 KB: 1.024 MB).
    assert out["wakeups direct"] == [pytest.approx(10 / 1.024)] * 6
    assert out["wakeups via"] == [pytest.approx(16 / 1.024)] * 6

    rows: dict = {}
    bench.throughput_rows(rows, "native, no quota", out)
    assert abs(rows["produce [native, no quota]"]["ratio"] - 0.9) < 1e-9
    assert rows["produce [native, no quota]"]["verdict"] == "met" and rows["produce [native, no quota]"]["pairs"] == 6
    assert rows["consume [native, no quota]"]["target"] == ">= 0.8"
    wake = rows["broker wake-ups per MB produced [native, no quota]"]
    assert wake["value"] == pytest.approx(16 / 1.024) and wake["direct_value"] == pytest.approx(10 / 1.024)
    bench.throughput_rows(rows, "direct vs direct: the noise", out, "control")
    assert rows["produce [direct vs direct: the noise]"]["target"] == "control"
    assert "verdict" not in rows["produce [direct vs direct: the noise]"]

    # Both reports show the two sides' wake-ups; proxy.md names the congestion control.
    text = bench.render({"generated": "now", "messages": 1, "repeats": 1, "rows": {"w [x]": wake},
                         "machine": {"cpu_count": 2, "platform": "p", "python": "3", "loadavg_before": [0, 0, 0],
                                     "loadavg_after": [0, 0, 0], "tcp_congestion_control": "bbr"},
                         "proxy_exit_code": {}})
    assert "TCP congestion control bbr." in text
    assert f"| w [x] | {16 / 1.024:.2f} per MB | direct: {10 / 1.024:.2f};" in text
    (tmp_path / "proxy.json").write_text(json.dumps({"generated": "now", "rows": {"w [x]": wake}}))
    summary = _bench_module("summary")
    monkeypatch.setattr(summary, "RESULTS", str(tmp_path))
    assert f"| w [x] | {10 / 1.024:.2f} per MB | {16 / 1.024:.2f} per MB |" in summary.proxy_lines()[4]


def test_bench_proxy_broker_switches_counts_a_real_process_sleeping():
    """The wake-ups are read from /proc for every thread of the process: a thread's sleeps
    (voluntary context switches) count, on its own thread; a new thread counts from 0."""
    import threading
    import types

    bench = _bench_module("bench_proxy")
    me = types.SimpleNamespace(proc=types.SimpleNamespace(pid=os.getpid()))
    stop = threading.Event()
    before = bench.broker_switches(me)
    worker = threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(lambda: stop.is_set(), True)])
    worker.start()
    time.sleep(0.05)
    during = bench.broker_switches(me)
    stop.set()
    worker.join()
    assert str(worker.native_id) in during and str(worker.native_id) not in before
    assert bench.switches_since(before, during) >= 10  # most of the worker's ~40 sleeps
    assert bench.switches_since(during, during) == 0


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two usable CPUs")
def test_bench_proxy_broker_core_pins_the_broker_apart_and_restores_this_process():
    """Inside ``broker_core`` every thread of the broker runs on the first core and the relay's and
    this process's on the second; afterwards this process has its CPUs back."""
    import types

    bench = _bench_module("bench_proxy")
    cores = bench.own_cores()
    assert cores is not None and cores[0] != cores[1]
    mine = os.sched_getaffinity(0)
    threaded = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    procs = [subprocess.Popen([sys.executable, "-c", threaded]) for _ in range(2)]
    try:
        # until the broker's second thread is up
        wait_until(lambda: len(os.listdir(f"/proc/{procs[0].pid}/task")) >= 2, 20)
        broker, relay = (types.SimpleNamespace(proc=p) for p in procs)
        assert len(os.listdir(f"/proc/{procs[0].pid}/task")) == 2
        with bench.broker_core([broker], relay, cores):
            for tid in os.listdir(f"/proc/{procs[0].pid}/task"):
                assert os.sched_getaffinity(int(tid)) == {cores[0]}
            for tid in os.listdir(f"/proc/{procs[1].pid}/task"):
                assert os.sched_getaffinity(int(tid)) == {cores[1]}
            assert os.sched_getaffinity(0) == {cores[1]}
        assert os.sched_getaffinity(0) == mine
    finally:
        for p in procs:
            p.kill()
            p.wait()
