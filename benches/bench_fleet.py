"""``--quota-scope fleet`` costs: the per-request record path with fleet shares against without,
and the usage bytes a proxy writes to the cluster.

    python benches/bench_fleet.py          # after a release install; needs tansu for part 2

1. Record path: ``h.record_and_get_throttle_time_ms`` on a cached handle, proxy scope (no shares)
   against fleet scope (a share map of 1,000 entities set), and fleet scope with the map set
   again every 0.5 s from another thread as the coordinator does (each set bumps the limits
   generation; here the set also competes for the GIL with the Python recording loop, which the
   proxy's Rust data plane does not hold). Rounds alternate; the row is the
   ratio of medians (fleet / proxy). The data plane of ``kquota proxy`` calls the same kernel
   path (rust/kquota-proxy), so this is the per-request difference of the two scopes.
2. Usage bytes: one coordinator (``kquota.proxy.fleet``) with 1,000 active entities recorded
   continuously (10 batches a second), 30 reports of 1 s against tansu; bytes per second.

Writes ``benches/results/fleet.{json,md}``. Nothing fails on timing.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time

import kquota

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.environ.get("KQ_BENCH_RESULTS_DIR") or os.path.join(HERE, "results")
CALLS = 200_000
ROUNDS = 7
ENTITIES = 1000


def _round(h) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(CALLS):
        h.record_and_get_throttle_time_ms("PRODUCE", 1.0)
    return (time.perf_counter_ns() - t0) / CALLS


def record_path() -> dict:
    shares = {("", f"client-{i}"): 1 / 3 for i in range(ENTITIES)}
    out = {"proxy": [], "fleet": [], "fleet-reset": []}
    for scope in ["proxy", "fleet", "fleet-reset"] * ROUNDS:
        qm = kquota.QuotaManager(window_num=2)
        qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1e12})])
        h = qm.client("", "client-0")
        stop = threading.Event()
        resetter = None
        if scope != "proxy":
            qm._set_shares("PRODUCE", 1 / 3, shares)
        if scope == "fleet-reset":

            def reset() -> None:
                flip = 0
                while not stop.wait(0.5):
                    flip ^= 1
                    qm._set_shares("PRODUCE", 1 / 3, {**shares, ("", "client-0"): 0.3 + 0.01 * flip})

            resetter = threading.Thread(target=reset, daemon=True)
            resetter.start()
        _round(h)  # warm
        out[scope].append(_round(h))
        stop.set()
        if resetter is not None:
            resetter.join()
        qm.close()
    med = {k: statistics.median(v) for k, v in out.items()}
    return {"ns_per_call": out, "median_ns": med, "fleet_over_proxy": med["fleet"] / med["proxy"],
            "fleet_reset_over_proxy": med["fleet-reset"] / med["proxy"]}


def usage_bytes() -> dict:
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    from proxy_support import Tansu

    from kquota.proxy.fleet import FleetCoordinator

    broker = Tansu()
    qm = kquota.QuotaManager(window_num=2)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 10000.0})])
    c = FleetCoordinator(qm, broker.address, "bench-quotas", interval_s=1.0)
    try:
        reports = 30
        t0 = time.monotonic()
        base = 0
        for step in range(reports + 1):
            for k in range(10):
                for i in range(ENTITIES):
                    qm.record_no_throttle("PRODUCE", "", f"client-{i}", 300.0 if i % 2 else 100.0)
                time.sleep(max(0.0, t0 + step + (k + 1) * 0.1 - time.monotonic()))
            if step == 0:
                base = c.bytes_sent
            c.step()
        per_s = (c.bytes_sent - base) / reports
    finally:
        c.stop()
        qm.close()
        broker.stop()
    return {"entities": ENTITIES, "reports": reports, "bytes_per_second": per_s}


def main() -> None:
    report = {"record_path": record_path(), "usage": usage_bytes()}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "fleet.json"), "w") as f:
        json.dump(report, f, indent=2)
    rp, us = report["record_path"], report["usage"]
    md = (
        "# --quota-scope fleet\n\n| row | value |\n|---|---|\n"
        f"| record path, proxy scope (median ns/call) | {rp['median_ns']['proxy']:.0f} |\n"
        f"| record path, fleet scope, shares set (median ns/call) | {rp['median_ns']['fleet']:.0f} |\n"
        f"| fleet / proxy | {rp['fleet_over_proxy']:.3f} |\n"
        f"| record path, fleet scope, shares re-set every 0.5 s (median ns/call) | {rp['median_ns']['fleet-reset']:.0f} |\n"
        f"| fleet re-set / proxy | {rp['fleet_reset_over_proxy']:.3f} |\n"
        f"| usage bytes/s per proxy, {us['entities']} active entities | {us['bytes_per_second']:.0f} |\n"
    )
    with open(os.path.join(RESULTS, "fleet.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
