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

import pytest

import kquota

pytest.importorskip("pytest_benchmark")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
                                        "handle_record_two_threads_same_sensor", "named_record_one_thread"}
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
