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
from kquota import _kquota  # noqa: E402

import bench_support  # noqa: E402
import features  # noqa: E402
import peers  # noqa: E402
from peers import Runner, Unavailable  # noqa: E402

QUICK = bench_support.QUICK
ENTITIES = int(os.environ.get("KQ_BENCH_ENTITIES", "1000"))
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

P = kquota.ClientQuotaType.PRODUCE
VALUE = 100
NANOS = 100_000  # request-time rows: 0.1 ms of I/O thread time per request (below 1100 % at any speed this loop reaches)
MUTATIONS = 1
QUOTA = {  # users/<default>: far above the offered load, so every call takes the admitted path
    "producer_byte_rate": 10 * 1024 * 1024,
    "request_percentage": 1100,  # the most 8 io + 3 network threads allow
    "controller_mutation_rate": 1e9,
}


def entities(n: int = ENTITIES) -> list[tuple[str, str, str]]:
    return [(f"user-{i:05d}", f"client-{i:05d}", f"user-{i:05d}:client-{i:05d}") for i in range(n)]


def _manager():
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"user": None}, QUOTA)])
    return qm


# ------------------------------------------------------------------------------------ floors


def empty5(quota_type, user, client_id, value, now_ms=None):
    pass


def empty4(user, client_id, value, now_ms=None):
    pass


def empty3(quota_type, value, now_ms=None):
    pass


def empty2(value, now_ms=None):
    pass


#: Entity counts of the scale rows: a broker's live clients, every call a different entity.
#: Quick mode shrinks them (the rows are still present, their numbers are not meant to be read).
SCALE = {"100k": 10_000 if QUICK else 100_000, "1m": 20_000 if QUICK else 1_000_000}
_SCALED: dict[int, list] = {}


def _scaled(build, n: int):
    """``build`` over its own ``n`` entities (built once, shared by every pass) instead of the
    suite's ``ENTITIES``; per-call time = round / ``n``."""
    def scaled(_ents):
        ents = _SCALED.get(n)
        if ents is None:
            ents = _SCALED[n] = entities(n)
        runner = build(ents)
        runner.calls = n
        return runner

    return scaled


def b_loop_only(ents):
    def run():
        for _u, _c, _k in ents:
            pass

    return Runner(run, lambda: True)


def _named_floor(fn, *, typed=True):
    def build(ents):
        if typed:
            def run():
                for u, c, _k in ents:
                    fn(P, u, c, VALUE, None)
        else:
            def run():
                for u, c, _k in ents:
                    fn(u, c, VALUE, None)
        return Runner(run, lambda: True)

    return build


def _per_entity_floor(fn, *, typed=True):
    def build(ents):
        fns = [fn] * len(ents)
        if typed:
            def run():
                for f in fns:
                    f(P, VALUE, None)
        else:
            def run():
                for f in fns:
                    f(VALUE, None)
        return Runner(run, lambda: True)

    return build


# ------------------------------------------------------------------------------------ kquota


def b_kquota_named(ents, qm=None):
    qm = qm or _manager()
    rec = qm.record_and_get_throttle_time_ms

    def run():
        for u, c, _k in ents:
            rec(P, u, c, VALUE, None)

    return Runner(run, lambda: not any([rec(P, u, c, VALUE, None) for u, c, _k in ents]), close=qm.close)


HOT_ENTITIES = 32


def b_kquota_named_hot(ents):
    """The named call over only ``HOT_ENTITIES`` entities, round robin, same calls per round:
    every (user, client_id) pair fits the extension's small cache of recent named calls."""
    hot = [ents[i % HOT_ENTITIES] for i in range(len(ents))]
    return b_kquota_named(hot)


def b_kquota_named_now(ents):
    """Explicit ``now_ms`` (one value per round, advancing 1 ms): the oracle's shape."""
    qm = _manager()
    rec = qm.record_and_get_throttle_time_ms
    clock = [0]

    def run():
        t = clock[0]
        clock[0] = t + 1
        for u, c, _k in ents:
            rec(P, u, c, VALUE, t)

    def check():
        t = clock[0]
        clock[0] = t + 1
        return not any([rec(P, u, c, VALUE, t) for u, c, _k in ents])

    return Runner(run, check, close=qm.close)


def b_kquota_handle(ents):
    qm = _manager()
    fns = [qm.client(u, c).record_and_get_throttle_time_ms for u, c, _k in ents]

    def run():
        for f in fns:
            f(P, VALUE, None)

    return Runner(run, lambda: not any([f(P, VALUE, None) for f in fns]), close=qm.close)


def b_kquota_callback(ents):
    qm = features.callback_manager(float(QUOTA["producer_byte_rate"]))
    return b_kquota_named(ents, qm)


def b_kquota_callback_polled(ents):
    qm = features.callback_manager(float(QUOTA["producer_byte_rate"]), polled=True)
    return b_kquota_named(ents, qm)


def b_request_time_named(ents):
    features.require_method("record_request_time")
    qm = _manager()
    rec = qm.record_request_time

    def run():
        for u, c, _k in ents:
            rec(u, c, NANOS, None)

    return Runner(run, lambda: not any([rec(u, c, NANOS, None) for u, c, _k in ents]), close=qm.close)


def b_request_time_handle(ents):
    qm = _manager()
    features.require_handle_method(qm, "record_request_time")
    fns = [qm.client(u, c).record_request_time for u, c, _k in ents]

    def run():
        for f in fns:
            f(NANOS, None)

    return Runner(run, lambda: not any([f(NANOS, None) for f in fns]), close=qm.close)


def b_mutation_named(ents):
    features.require_method("record_controller_mutations")
    qm = _manager()
    rec = qm.record_controller_mutations

    def run():
        for u, c, _k in ents:
            rec(u, c, MUTATIONS, None)

    return Runner(run, lambda: not any([rec(u, c, MUTATIONS, None) for u, c, _k in ents]), close=qm.close)


def b_mutation_handle(ents):
    qm = _manager()
    features.require_handle_method(qm, "record_controller_mutations")
    fns = [qm.client(u, c).record_controller_mutations for u, c, _k in ents]

    def run():
        for f in fns:
            f(MUTATIONS, None)

    return Runner(run, lambda: not any([f(MUTATIONS, None) for f in fns]), close=qm.close)


REPLAY_PER_ENTITY = 100  # requests per entity in one replayed batch


def b_batch_replay(ents):
    """One round = one batch of ``REPLAY_PER_ENTITY * len(ents)`` PRODUCE requests (entities
    round robin, 1 ms per ``len(ents)`` requests) replayed through the pipeline's batch API; the
    numpy arrays are built untimed before each round. Per-request time = round / batch size."""
    import numpy as np

    _spec, replay = features.batch_replay()
    qm = _manager()
    n = len(ents) * REPLAY_PER_ENTITY
    pairs = [(u, c) for u, c, _k in ents]
    ids = np.arange(n, dtype=np.int32) % len(ents)
    steps = np.arange(n, dtype=np.int64) // len(ents)
    types = np.zeros(n, dtype=np.int8)  # PRODUCE
    values = np.full(n, float(VALUE))
    clock = [0]
    batch = [None]

    def prep():
        t0 = clock[0]
        clock[0] = t0 + REPLAY_PER_ENTITY
        batch[0] = steps + t0

    def run():
        replay(qm, batch[0], types, ids, pairs, values)

    def check():
        prep()
        return not np.asarray(replay(qm, batch[0], types, ids, pairs, values)).any()

    return Runner(run, check, prep=prep, close=qm.close, calls=n)


# ------------------------------------------------------------------------------------- peers


def b_oracle(ents):
    from oracle import OracleQuotaManager

    qm = OracleQuotaManager()
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": QUOTA["producer_byte_rate"]})])
    rec = qm.record_and_get_throttle_time_ms
    clock = [0]

    def run():
        t = clock[0]
        clock[0] = t + 1
        for u, c, _k in ents:
            rec(P, u, c, VALUE, t)

    def check():
        t = clock[0]
        clock[0] = t + 1
        return not any([rec(P, u, c, VALUE, t) for u, c, _k in ents])

    return Runner(run, check)


# ------------------------------------------------------------------------------------- rows
# (key, group, label, baseline key, builder). The baseline of a kquota row is the empty Python
# function with the same arguments; of a peer row, kquota's named call on the same work (so a
# peer's ratio is "times kquota's cost").
ROWS = [
    ("loop_only", "floor", "the loop alone, no call (inside every row)", None, b_loop_only),
    ("empty_named", "floor", "empty Python function, named args `(P, user, client_id, 100, None)`",
     None, _named_floor(empty5)),
    ("empty_handle", "floor", "empty Python function, handle args `(P, 100, None)`", None,
     _per_entity_floor(empty3)),
    ("empty_named_untyped", "floor", "empty Python function `(user, client_id, v, None)`", None,
     _named_floor(empty4, typed=False)),
    ("empty_handle_untyped", "floor", "empty Python function `(v, None)`", None,
     _per_entity_floor(empty2, typed=False)),
    ("noop", "floor", "native `_kquota._noop(P, 100, None)` (trivial PyO3 call)", None,
     _per_entity_floor(_kquota._noop)),
    ("empty_named_100k", "floor", f"empty Python function, named args, {SCALE['100k']:,} entities", None,
     _scaled(_named_floor(empty5), SCALE["100k"])),
    ("empty_named_1m", "floor", f"empty Python function, named args, {SCALE['1m']:,} entities", None,
     _scaled(_named_floor(empty5), SCALE["1m"])),
    ("kquota_handle", "kquota", "handle `h.record_and_get_throttle_time_ms(P, 100, None)`, one handle per entity",
     "empty_handle", b_kquota_handle),
    ("kquota_named", "kquota", "named `qm.record_and_get_throttle_time_ms(P, user, client_id, 100, None)`",
     "empty_named", b_kquota_named),
    ("kquota_named_100k", "kquota", f"named, {SCALE['100k']:,} entities round robin (every call a different entity)",
     "empty_named_100k", _scaled(b_kquota_named, SCALE["100k"])),
    ("kquota_named_1m", "kquota", f"named, {SCALE['1m']:,} entities round robin (every call a different entity)",
     "empty_named_1m", _scaled(b_kquota_named, SCALE["1m"])),
    ("kquota_named_hot", "kquota", f"named, only {HOT_ENTITIES} entities round robin (fit the recent-name cache)",
     "empty_named", b_kquota_named_hot),
    ("kquota_named_now", "kquota", "named with explicit `now_ms` (the oracle's shape)", "empty_named",
     b_kquota_named_now),
    ("kquota_callback", "kquota", "named, Python `ClientQuotaCallback` installed (answers cached by the kernel)",
     "kquota_named", b_kquota_callback),
    ("kquota_callback_polled", "kquota", "named, callback overriding `quota_reset_required` (polled every request)",
     "kquota_named", b_kquota_callback_polled),
    ("kquota_request_time_named", "kquota", "`qm.record_request_time(user, client_id, 1e5 ns, None)`",
     "empty_named_untyped", b_request_time_named),
    ("kquota_request_time_handle", "kquota", "`h.record_request_time(1e5 ns, None)`",
     "empty_handle_untyped", b_request_time_handle),
    ("kquota_mutation_named", "kquota", "`qm.record_controller_mutations(user, client_id, 1, None)`",
     "empty_named_untyped", b_mutation_named),
    ("kquota_mutation_handle", "kquota", "`h.record_controller_mutations(1, None)`",
     "empty_handle_untyped", b_mutation_handle),
    ("kquota_batch_replay", "kquota", "batch replay `kquota.pipeline.replay.replay` (100k requests per batch), per request",
     "kquota_named", b_batch_replay),
    ("oracle", "peer", "pure-Python oracle (tests/support/oracle.py), named, explicit `now_ms`",
     "kquota_named_now", b_oracle),
    ("limits_fixed", "peer", "`limits` FixedWindowRateLimiter, MemoryStorage: `hit(item, user, client_id)`",
     "kquota_named", peers.limits_builder("fixed")),
    ("limits_moving", "peer", "`limits` MovingWindowRateLimiter, MemoryStorage", "kquota_named",
     peers.limits_builder("moving")),
    ("limits_sliding", "peer", "`limits` SlidingWindowCounterRateLimiter, MemoryStorage", "kquota_named",
     peers.limits_builder("sliding")),
    ("pyrate_log", "peer", "`pyrate-limiter` InMemoryBucket (sliding log), bucket per key: `try_acquire(key, 1, False)`",
     "kquota_named", peers.pyrate_builder("log")),
    ("pyrate_token", "peer", "`pyrate-limiter` StateBucket + TokenBucket, bucket per key", "kquota_named",
     peers.pyrate_builder("token")),
    ("token_bucket", "peer", "`token-bucket` Limiter, MemoryStorage: `consume(key, 1)`", "kquota_named",
     peers.token_bucket_builder()),
]
ROW_KEYS = [r[0] for r in ROWS]


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
