"""Comparative benchmark: kquota against the floors and against the peers a user would pick.

Run: ``python benches/compare.py`` (``bash scripts/bench.sh`` runs it with everything else).
Writes ``results/python_compare.{json,md}``: every row's median ns per call, its baseline and
the ratio, plus the latency distribution of the handle call.

The work is keyed: ``ENTITIES`` distinct (user, client-id) pairs visited round robin, one
record of one unit (kquota: 100 bytes) per call, so every limiter holds ``ENTITIES`` live
keys. One round = one pass over the entities; per-call time = round time / ``ENTITIES``.
Rows are measured in interleaved passes (every row once, then every row again, ...), each pass
with fresh objects, and the medians pool every round of every pass. See
``docs/guides/performance.md``.
"""

from __future__ import annotations

import array
import datetime as _dt
import gc
import json
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (_HERE, os.path.join(os.path.dirname(_HERE), "tests", "support")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import kquota  # noqa: E402

import bench_support  # noqa: E402
import peers  # noqa: E402
from peers import Runner, Unavailable  # noqa: E402
from compare_rows import P, QUICK, ROW_KEYS, ROWS, VALUE, _manager, entities  # noqa: E402

PASSES = int(os.environ.get("KQ_BENCH_COMPARE_PASSES", "1" if QUICK else "5"))
#: Seconds of timed rounds per row per pass (at least MIN_ROUNDS rounds).
BUDGET_S = float(os.environ.get("KQ_BENCH_COMPARE_BUDGET_S", "0.02" if QUICK else "0.5"))
MIN_ROUNDS = 3 if QUICK else 20
WARMUP_ROUNDS = 1 if QUICK else 5
#: Handle calls in the latency run, timed in batches of LAT_BATCH.
LAT_CALLS = int(os.environ.get("KQ_BENCH_LATENCY_CALLS", "100000" if QUICK else "5000000"))
LAT_BATCH = 64

JSON_PATH = os.path.join(bench_support.RESULTS_DIR, "python_compare.json")
MD_PATH = os.path.join(bench_support.RESULTS_DIR, "python_compare.md")


# ---------------------------------------------------------------------------------- measuring


def _measure_pass(runner: Runner, n_calls: int) -> list[float]:
    """Per-call ns of each timed round of one pass."""
    pc = time.perf_counter_ns
    run, prep = runner.run, runner.prep
    for _ in range(WARMUP_ROUNDS):
        if prep:
            prep()
        run()
    out = []
    spent = 0
    budget = BUDGET_S * 1e9
    while len(out) < MIN_ROUNDS or spent < budget:
        if prep:
            prep()
        t0 = pc()
        run()
        dt = pc() - t0
        spent += dt
        out.append(dt / n_calls)
        if len(out) >= 100_000:
            break
    return out


def measure_rows(ents, rows=ROWS, passes=PASSES, log=print) -> dict:
    results: dict[str, dict] = {}
    for key, group, label, base, _b in rows:
        results[key] = {"group": group, "label": label, "baseline": base, "available": True,
                        "passes": {}}
    for p in range(passes):
        for key, _g, _l, _base, build in rows:
            r = results[key]
            if not r["available"]:
                continue
            try:
                runner = build(ents)
            except Unavailable as e:
                r["available"] = False
                r["reason"] = str(e)
                continue
            try:
                gc.collect()
                r["passes"][p] = _measure_pass(runner, runner.calls or len(ents))
                r.setdefault("all_admitted", True)
                r["all_admitted"] = r["all_admitted"] and bool(runner.check())
            except Exception as e:  # an API that exists but differs: report it, time nothing
                r["available"] = False
                r["reason"] = f"failed: {type(e).__name__}: {e}"
                r["passes"] = {}
                log(f"{key}: {r['reason']}")
            finally:
                if runner.close:
                    runner.close()
        log(f"pass {p + 1}/{passes} done")
    for key, r in results.items():
        pooled = [x for xs in r["passes"].values() for x in xs]
        if not pooled:
            r.pop("passes")
            continue
        q = statistics.quantiles(pooled, n=4) if len(pooled) >= 4 else [pooled[0]] * 3
        r.update(median_ns=statistics.median(pooled), min_ns=min(pooled), iqr_ns=q[2] - q[0],
                 rounds=len(pooled),
                 pass_medians_ns=[statistics.median(xs) for _p, xs in sorted(r["passes"].items())])
        r.pop("passes")
    for key, r in results.items():
        base = r["baseline"]
        if r.get("median_ns") is not None and base and results[base].get("median_ns"):
            b = results[base]
            r["ratio"] = r["median_ns"] / b["median_ns"]
            per = [x / y for x, y in zip(r["pass_medians_ns"], b["pass_medians_ns"])]
            r["ratio_range"] = [min(per), max(per)] if per else None
    return results


def latency_distribution(n_calls: int = LAT_CALLS, batch: int = LAT_BATCH) -> dict:
    """Per-call latency of the warm handle call over a long run, from batches of ``batch``
    calls timed with ``perf_counter_ns`` (a single call is shorter than the timer's own cost).
    Each batch's mean is one sample; the same loop with no call gives the floor."""
    qm = _manager()
    f = qm.client("user-00000", "client-00000").record_and_get_throttle_time_ms
    pc = time.perf_counter_ns
    inner = range(batch)
    n_batches = max(1, n_calls // batch)

    def sample(call):
        out = array.array("q", bytes(8 * n_batches))
        for i in range(n_batches):
            t0 = pc()
            if call:
                for _ in inner:
                    f(P, VALUE, None)
            else:
                for _ in inner:
                    pass
            out[i] = pc() - t0
        return sorted(x / batch for x in out)

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    gc.collect()
    sample(True)  # warm
    floor = sample(False)
    calls = sample(True)
    qm.close()
    summary = {q: pct(calls, v) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999))}
    summary["max"] = calls[-1]
    summary["mean"] = statistics.fmean(calls)
    return {"calls": n_batches * batch, "batch": batch, "ns_per_call": summary,
            "floor_ns_per_call": {"p50": pct(floor, 0.5), "p99": pct(floor, 0.99),
                                  "p99.9": pct(floor, 0.999)},
            "gc_enabled": gc.isenabled()}


# ---------------------------------------------------------------------------------- reporting


def versions() -> dict:
    return {"kquota": getattr(kquota, "__version__", None),
            "limits": peers.version("limits"),
            "pyrate-limiter": peers.version("pyrate-limiter"),
            "token-bucket": peers.version("token-bucket")}


def fmt(x, spec=",.1f"):
    return "—" if x is None else format(x, spec)


def render_markdown(report: dict) -> str:
    res = report["rows"]
    lines = [
        "# kquota vs floors and peers: keyed work from Python",
        "",
        f"Generated {report['generated_at']}{' (QUICK mode: smoke test, do not read the numbers)' if report['quick'] else ''}. "
        f"{report['entities']} entities visited round robin, one record of one unit per call; "
        f"{report['passes']} interleaved passes; per-call ns = round time / {report['entities']}, "
        f"medians pooled over every round. The ratio is the row's median over its baseline's, "
        f"with the range of the same ratio over the passes.",
        "",
        "| row | what | median ns/call | baseline | ratio | range over passes | all admitted |",
        "|---|---|---:|---|---:|---|---|",
    ]
    for key in ROW_KEYS:
        r = res[key]
        if not r["available"]:
            lines.append(f"| {key} | {r['label']} | {r['reason']} | {r['baseline'] or ''} | — | — | — |")
            continue
        rr = r.get("ratio_range")
        lines.append(
            f"| {key} | {r['label']} | {fmt(r.get('median_ns'))} | {r['baseline'] or ''} | "
            f"{fmt(r.get('ratio'), '.2f') + '×' if r.get('ratio') else '—'} | "
            f"{f'{rr[0]:.2f}–{rr[1]:.2f}×' if rr else '—'} | {'yes' if r.get('all_admitted') else '**no**'} |")
    lat = report["latency"]
    ns, fl = lat["ns_per_call"], lat["floor_ns_per_call"]
    lines += [
        "",
        f"## Latency of the handle call ({lat['calls']:,} calls, batches of {lat['batch']})",
        "",
        "Each sample is the mean of one batch of calls timed with `perf_counter_ns`; the floor is "
        "the same loop with no call (loop + timer, per call).",
        "",
        "| | p50 | p90 | p99 | p99.9 | max | mean |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| handle call, ns/call | {ns['p50']:.1f} | {ns['p90']:.1f} | {ns['p99']:.1f} | {ns['p99.9']:.1f} | "
        f"{ns['max']:.1f} | {ns['mean']:.1f} |",
        f"| floor (loop + timer), ns/call | {fl['p50']:.1f} | | {fl['p99']:.1f} | {fl['p99.9']:.1f} | | |",
        "",
        "## Versions",
        "",
    ]
    lines += [f"- {k}: {v or 'not installed'}" for k, v in report["versions"].items()]
    m = report["machine"]
    lines += [f"- CPU: {m['cpu_model']}, {m['logical_cpus']} logical CPUs, {m['usable_cpus']} usable",
              f"- Python: {m['python']}", f"- kquota build: {report['build']['mode']}", ""]
    return "\n".join(lines)


def main(argv=None) -> dict:
    ents = entities()
    t0 = time.perf_counter()
    rows = measure_rows(ents)
    lat = latency_distribution()
    report = {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": QUICK,
        "entities": len(ents),
        "passes": PASSES,
        "budget_s_per_row_per_pass": BUDGET_S,
        "rows": rows,
        "row_order": ROW_KEYS,
        "latency": lat,
        "versions": versions(),
        "machine": bench_support.machine_info(),
        "build": bench_support.build_info(),
        "elapsed_s": time.perf_counter() - t0,
    }
    os.makedirs(bench_support.RESULTS_DIR, exist_ok=True)
    with open(JSON_PATH, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    md = render_markdown(report)
    with open(MD_PATH, "w") as f:
        f.write(md)
    print(md)
    return report


if __name__ == "__main__":
    main()
