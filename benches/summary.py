"""Combines every suite's results into ``results/summary.{json,md}``.

Run last by ``bash scripts/bench.sh``; by hand: ``python benches/summary.py``. Reads, from the
results directory, ``python_record.json`` (pytest-benchmark record path), ``python_compare.json``
(keyed comparison with peers, latency), ``native.json`` (native report) and criterion's
estimates under ``rust/target/criterion``. A suite whose file is missing, or older than
``KQ_BENCH_STARTED`` (epoch seconds, set by bench.sh), is listed as not run / stale rather than
silently mixed in.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import bench_support  # noqa: E402
import peers  # noqa: E402

RESULTS = bench_support.RESULTS_DIR
CRITERION_DIR = os.environ.get("KQ_BENCH_CRITERION_DIR") or os.path.join(
    bench_support.REPO_DIR, "rust", "target", "criterion")
STARTED = float(os.environ.get("KQ_BENCH_STARTED", "0") or 0)

#: criterion bench id -> (label, baseline id); the two-thread rows' ratio is wall time per
#: iteration (each thread doing one record) over the one-thread time: 1.0 = perfect scaling,
#: 2.0 = fully serialized.
CRITERION = {
    "sensor_record_and_measure": ("rate sensor record+measure alone", None),
    "handle_record_one_thread": ("handle record, one thread", "sensor_record_and_measure"),
    "handle_record_two_threads_distinct_sensors": ("handle record, two threads on distinct sensors",
                                                   "handle_record_one_thread"),
    "handle_record_two_threads_same_sensor": ("handle record, two threads on one sensor (contention)",
                                              "handle_record_one_thread"),
    "named_record_one_thread": ("named record, one thread", "handle_record_one_thread"),
    "topic_rate_one_thread": ("topic rate (striped) record+measure, one thread", "sensor_record_and_measure"),
    "topic_rate_two_threads_same_sensor": ("topic rate, two threads on one topic sensor (contention)",
                                           "topic_rate_one_thread"),
    "topic_record_one_thread": ("topic record through the kernel, one thread", "topic_rate_one_thread"),
    "topic_record_two_threads_same_topic": ("topic record, two threads on one topic (contention)",
                                            "topic_record_one_thread"),
    "handle_record_one_thread_topic_quotas_configured": ("handle record with topic quotas configured, one thread",
                                                         "handle_record_one_thread"),
}


def _load(name: str):
    path = os.path.join(RESULTS, name)
    try:
        mtime = os.path.getmtime(path)
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"not run ({name} missing or unreadable: {type(e).__name__})"
    if STARTED and mtime < STARTED:
        return None, f"stale ({name} is from an earlier run)"
    return data, None


def _row(suite, key, label, value, unit="ns", baseline=None, baseline_value=None, status="ok",
         **extra):
    ratio = (value / baseline_value) if (value is not None and baseline_value) else None
    if value is None and status == "ok":
        status = "no value"
    return {"suite": suite, "key": key, "label": label, "value": value, "unit": unit,
            "baseline": baseline, "baseline_value": baseline_value, "ratio": ratio,
            "status": status, **extra}


def record_rows() -> tuple[list, str | None]:
    data, why = _load("python_record.json")
    if data is None:
        return [], why
    res = data["results"]
    rows = []
    for r in data["ratios"]:
        num, den = r["numerator"], r["denominator"]
        target = None if r["target_op"] is None else f"{r['target_op']} {r['target']:g}"
        rows.append(_row("python_record", f"{num}/{den}", bench_support.VARIANTS.get(num, num),
                         res[num]["median_ns"], "ns/call", den, res[den]["median_ns"],
                         target=target, met=r["met"]))
    return rows, None


#: Keyed-comparison rows with a target ratio over their baseline (the empty Python function with
#: the same arguments): row key -> (op, value).
COMPARE_TARGETS = {
    "kquota_named": ("<=", 3.0),
    "kquota_named_100k": ("<=", 3.0),
    "kquota_request_time_named": ("<=", 3.5),
    "kquota_request_time_handle": ("<=", 3.0),
    "kquota_mutation_handle": ("<=", 3.0),
}


def _met(ratio, op, target):
    if ratio is None:
        return None
    return ratio <= target if op == "<=" else ratio >= target


def compare_rows() -> tuple[list, str | None, dict | None]:
    data, why = _load("python_compare.json")
    if data is None:
        return [], why, None
    rows = []
    for key in data["row_order"]:
        r = data["rows"][key]
        if not r["available"]:
            rows.append(_row("python_compare", key, r["label"], None, "ns/call", r["baseline"],
                             status=r["reason"]))
            continue
        base = data["rows"].get(r["baseline"]) if r["baseline"] else None
        extra = {}
        if key in COMPARE_TARGETS:
            op, target = COMPARE_TARGETS[key]
            extra = {"target": f"{op} {target:g}", "met": _met(r.get("ratio"), op, target)}
        rows.append(_row("python_compare", key, r["label"], r["median_ns"], "ns/call", r["baseline"],
                         base.get("median_ns") if base else None,
                         all_admitted=r.get("all_admitted"), group=r["group"], **extra))
    lat = data["latency"]
    for q in ("p50", "p99", "p99.9"):
        rows.append(_row("python_latency", f"handle_{q}", f"handle call {q} (mean of {lat['batch']}-call batches)",
                         lat["ns_per_call"][q], "ns/call", "handle_p50" if q != "p50" else None,
                         lat["ns_per_call"]["p50"] if q != "p50" else None))
    return rows, None, data


def pipeline_rows() -> tuple[list, str | None]:
    """generate + simulate on Spark (``benches/bench_pipeline.py``): seconds against the issue's
    targets, simulate over the Spark floor measured in the same run, and the scale curve."""
    data, why = _load("pipeline.json")
    if data is None or "spark_runs" not in data:
        return [], why or "not run (pipeline.json predates the Spark floor)"
    rows = []
    for s in data["spark_runs"]:
        n = f"{s['rows'] / 1e6:g}M"
        rows.append(_row("pipeline", f"generate_simulate_{n}", f"`generate` + `simulate`, {s['rows']:,} requests, "
                         f"{s['master']} (load {s['load_before']})", s["generate_plus_simulate_s"], "s",
                         target="<= 30 s" if s["rows"] == 10_000_000 else None,
                         met=s["generate_plus_simulate_s"] <= 30))
        rows.append(_row("pipeline", f"simulate_floor_{n}", f"`simulate` / Spark floor (read, group by broker, "
                         f"write), {s['rows']:,} requests", s["simulate_s"], "s", "spark_floor", s["floor_s"],
                         target="<= 2" if s["rows"] == 10_000_000 else None, met=s["simulate_over_floor"] <= 2))
    return rows, None


def native_rows() -> tuple[list, str | None, dict | None]:
    data, why = _load("native.json")
    if data is None:
        return [], why, None
    by_key = {r["key"]: r for r in data["rows"]}
    base_of = {"handle_two_threads_distinct_ns": "handle_one_thread_ns",
               "handle_two_threads_same_ns": "handle_one_thread_ns",
               "handle_one_thread_ns": "sensor_record_ns",
               "latency_p99_ns": "latency_p50_ns", "latency_p999_ns": "latency_p50_ns"}
    rows = []
    for r in data["rows"]:
        b = base_of.get(r["key"])
        target = None if r["target_op"] is None else f"{r['target_op']} {r['target']:g}"
        rows.append(_row("native", r["key"], r["measure"], r["value"], r["unit"], b,
                         by_key[b]["value"] if b else None, target=target, met=r["met"]))
    return rows, None, data


def criterion_rows() -> tuple[list, str | None]:
    est = {}
    for bench in CRITERION:
        path = os.path.join(CRITERION_DIR, bench, "new", "estimates.json")
        try:
            if STARTED and os.path.getmtime(path) < STARTED:
                continue
            with open(path) as f:
                est[bench] = json.load(f)["median"]["point_estimate"]
        except (OSError, ValueError, KeyError):
            continue
    rows = []
    for bench, (label, base) in CRITERION.items():
        if bench not in est:
            rows.append(_row("criterion", bench, label, None, "ns/iter", base,
                             status="not run (no fresh criterion estimate)"))
        else:
            rows.append(_row("criterion", bench, label, est[bench], "ns/iter", base, est.get(base)))
    return rows, (None if est else "not run")


def _cmd(*args) -> str | None:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine() -> dict:
    import kquota

    m = bench_support.machine_info()
    b = bench_support.build_info()
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": m["cpu_model"], "logical_cpus": m["logical_cpus"],
        "physical_cores": m["physical_cores"], "usable_cpus": m["usable_cpus"],
        "platform": m["platform"], "python": m["python"], "rustc": _cmd("rustc", "--version"),
        "kquota": getattr(kquota, "__version__", None), "kquota_build": b["mode"],
        "git": m["git"],
        "peers": {d: peers.version(d) for d in ("limits", "pyrate-limiter", "token-bucket")},
        "pytest_benchmark": m["pytest_benchmark"],
    }


def build() -> dict:
    rec, rec_why = record_rows()
    cmp_, cmp_why, cmp_data = compare_rows()
    nat, nat_why, nat_data = native_rows()
    crit, crit_why = criterion_rows()
    pipe, pipe_why = pipeline_rows()
    quick = bool(bench_support.QUICK or (cmp_data or {}).get("quick") or (nat_data or {}).get("quick"))
    return {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine(),
        "suites": {"python_record": rec_why or "ok", "python_compare": cmp_why or "ok",
                   "native": nat_why or "ok", "criterion": crit_why or "ok", "pipeline": pipe_why or "ok"},
        "rows": rec + cmp_ + nat + crit + pipe,
    }


def _num(v, unit=""):
    if v is None:
        return "—"
    if unit in ("x",) or abs(v) < 10:
        return f"{v:,.2f}"
    return f"{v:,.1f}"


_TITLES = {
    "python_record": "Python call cost against the floors (one entity, `benches/test_bench_record.py`)",
    "python_compare": "Keyed work: kquota, floors and peers (`benches/compare.py`)",
    "python_latency": "Latency distribution of the handle call from Python (`benches/compare.py`)",
    "native": "Native kernel (`rust/quota-core/examples/native_report.rs`)",
    "criterion": "Native kernel, criterion (`rust/quota-core/benches/record.rs`)",
    "pipeline": "Spark pipeline (`benches/bench_pipeline.py`; seconds, ratio to the Spark floor of the same run)",
}


#: (suite, key, what the ratio says) shown first, in this order, when measured.
HEADLINE = [
    ("python_record", "handle/empty_handle_args", "handle call / empty Python function (one entity)"),
    ("python_record", "named/empty_named_args", "named call / empty Python function (one entity)"),
    ("python_compare", "kquota_handle", "handle call / empty function, 1000 entities"),
    ("python_compare", "kquota_named", "named call / empty function, 1000 entities"),
    ("python_compare", "kquota_named_100k", "named call / empty function, 100k entities"),
    ("python_compare", "kquota_named_1m", "named call / empty function, 1M entities (reported)"),
    ("python_compare", "kquota_named_hot", "named call / empty function, 32 entities (cached names)"),
    ("python_compare", "oracle", "pure-Python oracle / kquota named (explicit now)"),
    ("python_compare", "limits_fixed", "limits fixed window / kquota named"),
    ("python_compare", "limits_moving", "limits moving window / kquota named"),
    ("python_compare", "pyrate_log", "pyrate-limiter in-memory / kquota named"),
    ("python_compare", "token_bucket", "token-bucket / kquota named"),
    ("python_compare", "kquota_callback", "named with a Python callback / named"),
    ("python_compare", "kquota_request_time_named", "request-time named call / empty function, 1000 entities"),
    ("python_compare", "kquota_request_time_handle", "request-time handle call / empty function"),
    ("python_compare", "kquota_mutation_handle", "mutation handle call / empty function"),
    ("python_compare", "kquota_batch_replay", "batch replay per request / named call"),
    ("pipeline", "simulate_floor_10M", "`simulate` 10M requests / Spark floor (same run)"),
    ("criterion", "handle_record_two_threads_distinct_sensors", "2 threads, distinct sensors / 1 thread (1.0 = perfect scaling)"),
    ("criterion", "handle_record_two_threads_same_sensor", "2 threads, one sensor / 1 thread (2.0 = serialized)"),
    ("criterion", "topic_record_two_threads_same_topic", "2 threads, one topic sensor / 1 thread (target <= 2.0)"),
    ("criterion", "handle_record_one_thread_topic_quotas_configured",
     "client record with topic quotas configured / without (target <= 1.1)"),
]


def _target_note(r) -> str:
    if not r.get("target"):
        return ""
    return f"{r['target']}: {'met' if r.get('met') else 'NOT met'}"


def render(report: dict) -> str:
    m = report["machine"]
    lines = [
        "# kquota benchmark summary",
        "",
        f"Generated {report['generated_at']}"
        + (" in QUICK mode (smoke test: do not read the numbers)" if report["quick"] else "") + ".",
        "Ratios are the result (row over its baseline, both measured in this run); absolute "
        "numbers are context for this machine only. See `benches/README.md` for how to read it.",
        "",
        f"- Machine: {m['cpu_model']}, {m['logical_cpus']} logical CPUs ({m['physical_cores']} cores), "
        f"{m['usable_cpus']} usable; {m['platform']}",
        f"- Python {m['python']}; {m['rustc'] or 'rustc: unknown'}; kquota {m['kquota']} "
        f"({m['kquota_build']} build); git {((m.get('git') or {}).get('commit') or '?')[:12]}",
        "- Peers: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in m["peers"].items()),
        "- Suites: " + ", ".join(f"{k}: {v}" for k, v in report["suites"].items()),
        "",
    ]
    by = {(r["suite"], r["key"]): r for r in report["rows"]}
    lines += ["## Headline ratios", "", "| ratio | value | row median | baseline median | target |",
              "|---|---:|---:|---:|---|"]
    for suite, key, what in HEADLINE:
        r = by.get((suite, key))
        if r is None:
            continue
        if r["ratio"] is None:
            lines.append(f"| {what} | {r['status'] if r['status'] != 'ok' else '—'} | | | |")
        else:
            lines.append(f"| {what} | {r['ratio']:.2f}× | {_num(r['value'])} {r['unit']} | "
                         f"{_num(r['baseline_value'])} {r['unit']} | {_target_note(r)} |")
    lines.append("")
    for suite, title in _TITLES.items():
        rows = [r for r in report["rows"] if r["suite"] == suite]
        if not rows:
            continue
        lines += [f"## {title}", "", "| row | what | value | unit | baseline | ratio | note |",
                  "|---|---|---:|---|---|---:|---|"]
        for r in rows:
            note = []
            if r.get("target"):
                note.append(f"target {_target_note(r)}")
            if r.get("all_admitted") is False:
                note.append("some calls were limited")
            value = _num(r["value"], r["unit"]) if r["status"] == "ok" else r["status"]
            ratio = f"{r['ratio']:.2f}×" if r["ratio"] is not None else "—"
            lines.append(f"| {r['key']} | {r['label']} | {value} | {r['unit']} | {r['baseline'] or ''} | "
                         f"{ratio} | {'; '.join(note)} |")
        lines.append("")
    lines += proxy_lines()
    lines += accuracy_lines()
    lines += table_lines("proxy_tls.md", "Proxy with TLS on both sides",
                         "`bench_proxy.py --tls-only` (benches/bench_proxy_tls.py), run separately")
    lines += table_lines("fleet.md", "--quota-scope fleet: per-request cost and usage bytes",
                         "`benches/bench_fleet.py`, run separately")
    return "\n".join(lines)


def accuracy_lines() -> list:
    """A pointer to ``accuracy.md`` (``bench_accuracy.py``, run separately), if present."""
    if not os.path.exists(os.path.join(RESULTS, "accuracy.md")):
        return []
    return ["## Accuracy: real clients flat out through the proxy, against Kafka's closed loop", "",
            "`benches/bench_accuracy.py`, run separately: each producer and consumer kind at 100 KB/s, 1 MB/s "
            "and 10 MB/s next to the kernel's closed-loop replay of the same requests; see "
            "[accuracy.md](accuracy.md).", ""]


def table_lines(name: str, title: str, source: str) -> list:
    """The table of a results file written by a benchmark run separately (``name`` under
    ``results/``), under ``title``, if present."""
    path = os.path.join(RESULTS, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        table = [line.rstrip("\n") for line in f if line.startswith("|")]
    return [f"## {title}", "", f"{source}; see [{name}]({name}).", "", *table, ""]


def proxy_lines() -> list:
    """The proxy rows (``bench_proxy.py``'s ``proxy.json``, run separately), if present."""
    try:
        with open(os.path.join(RESULTS, "proxy.json")) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    lines = [f"## Kafka proxy, through the proxy vs direct (`benches/bench_proxy.py`, {data['generated']}; "
             f"details in `proxy.md`)", "", "| row | direct | proxy | ratio / added (95% interval) | target | |",
             "|---|---:|---:|---:|---|---|"]
    for key, row in data["rows"].items():
        verdict = row.get("verdict", "")
        if "ratio" in row:
            ci = " ({:.2f} to {:.2f})".format(*row["ci95"]) if "ci95" in row else ""
            lines.append(f"| {key} | {row['direct']:,.0f} {row['unit']} | {row['proxy']:,.0f} {row['unit']} | "
                         f"{row['ratio']:.2f}×{ci} | {row['target']} | {verdict} |")
        elif "added" in row:
            ci = " ({:+.2f} to {:+.2f})".format(*row["ci95"]) if "ci95" in row else ""
            lines.append(f"| {key} | {row['direct']:.3f} ms | {row['proxy']:.3f} ms | {row['added']:+.3f} ms{ci} | "
                         f"{row['target']} | {verdict} |")
        elif "value" in row:
            direct = f"{row['direct_value']:.2f} {row['unit']}" if "direct_value" in row else ""
            lines.append(f"| {key} | {direct} | {row['value']:.2f} {row['unit']} | | | |")
        elif "answered" in row:
            lines.append(f"| {key} | | {row['answered']} / {row['connections']} answered | | all at once | |")
    return lines + [""]


def main() -> dict:
    report = build()
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "summary.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    md = render(report)
    with open(os.path.join(RESULTS, "summary.md"), "w") as f:
        f.write(md)
    print(md)
    return report


if __name__ == "__main__":
    main()
