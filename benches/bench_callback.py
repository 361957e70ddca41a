"""Cost of a cached request with a Python quota callback installed vs the built-in path.

Target: a cached request with a Python callback installed costs no more than 1.5x the
built-in path. Compares, in one process and run, the handle call and the named call of
``record_and_get_throttle_time_ms`` with the quota-groups plugin installed (alice in a group with a
producer quota) against the same calls on a manager with built-in config of the same shape (one
user quota, one sensor). Every cached call takes the same path through the kernel; the callback
was asked once, before measuring.

Run with a release build (the numbers of a dev build mean nothing)::

    MATURIN_PEP517_ARGS="--profile release" python -m pip install -e .
    python benches/bench_callback.py            # writes benches/results/callback.{md,json}

Also reported, without a target: the same calls with ``StorageAwareCallback``, which overrides
``quota_reset_required`` and so is polled (one Python call) on every request, as Kafka polls it,
and with ``PushingStorageAwareCallback``, which pushes resets instead.

Variants are interleaved (every variant of pass 0, then of pass 1, ...) so drift of the machine
hits all alike; each ratio is the median round time of the callback variant over the built-in.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time

import kquota
from kquota import ClientQuotaType
from kquota.plugins import PushingStorageAwareCallback, QuotaGroupsCallback, StorageAwareCallback

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TARGET = 1.5
P = ClientQuotaType.PRODUCE
LIMIT = 1e15  # never throttles: the measured path is record + check, no throttle arithmetic skew


def managers():
    builtin = kquota.QuotaManager()
    builtin.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": LIMIT})])
    groups = kquota.QuotaManager(
        callback=QuotaGroupsCallback(),
        callback_configs={"groups": {"g": {"users": ["alice", "bob"], "quotas": {"producer_byte_rate": LIMIT}}}},
    )
    # informational: a callback overriding quota_reset_required is polled on every request
    storage = kquota.QuotaManager(
        callback=StorageAwareCallback(),
        callback_configs={"paths": ["/data"], "min_free_bytes": 1, "produce_floor": 1, "check_interval_s": 0,
                          "disk_usage": lambda path: (100, 0, 100)},
    )
    storage.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": LIMIT})])
    pushed = kquota.QuotaManager()
    pushed.set_callback(PushingStorageAwareCallback(), {
        "paths": ["/data"], "min_free_bytes": 1, "produce_floor": 1, "check_interval_s": 0,
        "disk_usage": lambda path: (100, 0, 100), "signal_reset": pushed.signal_quota_reset})
    pushed.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": LIMIT})])
    return builtin, groups, storage, pushed


def loops(calls):
    """Variant name -> a function running ``calls`` calls and returning the elapsed ns."""
    builtin, groups, storage, pushed = managers()
    user, client, now = "alice", "client-1", 1_000
    out = {}
    for label, qm in (("builtin", builtin), ("callback", groups), ("polled", storage), ("pushed", pushed)):
        h = qm.client(user, client)
        rec_h = h.record_and_get_throttle_time_ms
        rec_n = qm.record_and_get_throttle_time_ms
        rng = range(calls)

        def handle(rec_h=rec_h, rng=rng):
            t0 = time.perf_counter_ns()
            for _ in rng:
                rec_h(P, 100, now)
            return time.perf_counter_ns() - t0

        def named(rec_n=rec_n, rng=rng):
            t0 = time.perf_counter_ns()
            for _ in rng:
                rec_n(P, user, client, 100, now)
            return time.perf_counter_ns() - t0

        out[f"{label}_handle"] = handle
        out[f"{label}_named"] = named
    # the callback must have been asked exactly once per key, and nothing may throttle
    for fn in out.values():
        fn()
    assert groups.quota_metric_tags(P, user, client) == {"quota-group": "g"}
    assert groups.callback_errors == 0
    return out, groups


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1000, help="calls per timed round")
    ap.add_argument("--rounds", type=int, default=400, help="timed rounds per variant per pass")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--build", default="release", help="build profile of the installed kquota (recorded only)")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args(argv)

    fns, groups = loops(args.calls)
    cb = groups.callback
    asked = {"tags": 0, "limit": 0}
    orig_tags, orig_limit = cb.quota_metric_tags, cb.quota_limit

    def count_tags(*a):
        asked["tags"] += 1
        return orig_tags(*a)

    def count_limit(*a):
        asked["limit"] += 1
        return orig_limit(*a)

    cb.quota_metric_tags, cb.quota_limit = count_tags, count_limit
    rounds: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.passes):
        for name, fn in fns.items():
            for _ in range(20):  # warm-up
                fn()
            rounds[name].extend(fn() / args.calls for _ in range(args.rounds))
    per_call = {k: {"median_ns": statistics.median(v), "min_ns": min(v)} for k, v in rounds.items()}
    ratios = {}
    for kind in ("handle", "named"):
        c, b = per_call[f"callback_{kind}"], per_call[f"builtin_{kind}"]
        ratios[kind] = {
            "median_ratio": c["median_ns"] / b["median_ns"],
            "min_ratio": c["min_ns"] / b["min_ns"],
            "target": TARGET,
            "ok": c["median_ns"] / b["median_ns"] <= TARGET,
        }
    result = {
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "kquota": kquota.__version__,
        "build": args.build,
        "calls_per_round": args.calls,
        "rounds_per_pass": args.rounds,
        "passes": args.passes,
        "per_call": per_call,
        "ratios": ratios,
        "callback_calls_while_measuring": asked,
    }
    lines = [
        "# Cached request with a Python quota callback vs the built-in path",
        "",
        f"`python benches/bench_callback.py` — {result['when']}, Python {result['python']}, "
        f"{result['cpus']} CPUs, kquota {result['kquota']} ({args.build} build); "
        f"{args.passes} interleaved passes × {args.rounds} rounds × {args.calls} calls per variant.",
        "",
        "Callback: `kquota.plugins.QuotaGroupsCallback`, alice in group `g` with a producer quota. "
        "Built-in: `users/alice` with a producer quota. Both: one sensor, never throttled.",
        "",
        "| call | built-in ns/call (median) | callback ns/call (median) | ratio (median) | ratio (min) | target |",
        "|---|---|---|---|---|---|",
    ]
    for kind, label in (("handle", "handle `h.record_and_get_throttle_time_ms(P, 100, now)`"),
                        ("named", "named `qm.record_and_get_throttle_time_ms(P, u, c, 100, now)`")):
        b, c, r = per_call[f"builtin_{kind}"], per_call[f"callback_{kind}"], ratios[kind]
        lines.append(
            f"| {label} | {b['median_ns']:.1f} | {c['median_ns']:.1f} | {r['median_ratio']:.3f}× | "
            f"{r['min_ratio']:.3f}× | ≤ {TARGET}× {'✅' if r['ok'] else '❌'} |"
        )
    info = {
        "polled": "`StorageAwareCallback` (overrides `quota_reset_required`: polled per request)",
        "pushed": "`PushingStorageAwareCallback` (pushes resets, not polled)",
    }
    for variant, what in info.items():
        for kind in ("handle", "named"):
            b, c = per_call[f"builtin_{kind}"], per_call[f"{variant}_{kind}"]
            lines.append(
                f"| {kind}, informational: {what} | {b['median_ns']:.1f} | {c['median_ns']:.1f} | "
                f"{c['median_ns'] / b['median_ns']:.3f}× | {c['min_ns'] / b['min_ns']:.3f}× | — |"
            )
            ratios[f"{variant}_{kind}"] = {"median_ratio": c["median_ns"] / b["median_ns"],
                                           "min_ratio": c["min_ns"] / b["min_ns"], "target": None}
    lines += [
        "",
        f"Callback calls while measuring (cached path): tags {asked['tags']}, limit {asked['limit']}.",
        "",
    ]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "callback.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "callback.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if all(r.get("ok", True) for r in ratios.values()) and asked == {"tags": 0, "limit": 0} else 1


if __name__ == "__main__":
    sys.exit(main())
