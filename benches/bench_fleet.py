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
3. Through the proxy: two ``kquota proxy`` processes in front of one tansu, following the same
   ``kafka:///`` store (a quota far above the rate on every client id, so each request is
   recorded), one ``--quota-scope proxy`` and one ``--quota-scope fleet``; the same
   confluent-kafka producer client produces 1 KB messages through each, segments alternating;
   the row is the ratio of medians (fleet / proxy) with the range of the paired ratios.

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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))
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
    from proxy_support import Tansu

    from kquota.proxy.fleet import FleetCoordinator

    broker = Tansu()
    qm = kquota.QuotaManager(window_num=2)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 10000.0})])
    c = FleetCoordinator(qm, broker.address, "bench-quotas", interval_s=1.0, key=os.urandom(32))
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


def through_the_proxy(segments: int = 12, n: int = 150_000) -> dict:
    import tempfile
    import uuid

    from bench_proxy_clients import produce_segment, producer
    from bench_proxy_tls import ProxyCli
    from proxy_support import Tansu, make_topic
    from waiting import free_port

    from kquota.stores import open_store

    broker = Tansu()
    procs: dict[str, ProxyCli] = {}
    try:
        store = f"q-{uuid.uuid4().hex[:8]}"
        with open_store(f"kafka://{broker.address}/{store}") as s:
            s.alter([({"client-id": None}, {"producer_byte_rate": 1e12})])
        tmp = tempfile.mkdtemp(prefix="kq-bench-fleet-")
        with open(os.path.join(tmp, "fleet.key"), "wb") as f:
            f.write(os.urandom(32).hex().encode())
        with open(os.path.join(tmp, "proxy.properties"), "w") as f:
            f.write(f"kquota.fleet.usage.key.file={os.path.join(tmp, 'fleet.key')}\n")
        for scope in ("proxy", "fleet"):
            procs[scope] = ProxyCli(broker.address, f"127.0.0.1:{free_port()}", tmp, "--store", f"kafka:///{store}",
                                    "--quota-scope", scope, "--config", os.path.join(tmp, "proxy.properties"))
        topics = {scope: make_topic(broker.address) for scope in procs}
        prods = {scope: producer(f"127.0.0.1:{p.port}", topics[scope], "bench-fleet") for scope, p in procs.items()}
        rates: dict[str, list[float]] = {"proxy": [], "fleet": []}
        for i in range(segments):
            for scope in (("proxy", "fleet") if i % 2 == 0 else ("fleet", "proxy")):
                rates[scope].append(produce_segment(prods[scope], topics[scope], n))
        pairs = [f / p for f, p in zip(rates["fleet"], rates["proxy"])]
        return {"segments": segments, "messages": n, "msg_per_s": rates,
                "fleet_over_proxy": statistics.median(rates["fleet"]) / statistics.median(rates["proxy"]),
                "pair_range": [min(pairs), max(pairs)]}
    finally:
        for p in procs.values():
            p.stop()
        broker.stop()


def main() -> None:
    report = {"record_path": record_path(), "usage": usage_bytes(), "proxy": through_the_proxy()}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "fleet.json"), "w") as f:
        json.dump(report, f, indent=2)
    rp, us, px = report["record_path"], report["usage"], report["proxy"]
    md = (
        "# --quota-scope fleet\n\n| row | value |\n|---|---|\n"
        f"| record path, proxy scope (median ns/call) | {rp['median_ns']['proxy']:.0f} |\n"
        f"| record path, fleet scope, shares set (median ns/call) | {rp['median_ns']['fleet']:.0f} |\n"
        f"| fleet / proxy | {rp['fleet_over_proxy']:.3f} |\n"
        f"| record path, fleet scope, shares re-set every 0.5 s (median ns/call) | {rp['median_ns']['fleet-reset']:.0f} |\n"
        f"| fleet re-set / proxy | {rp['fleet_reset_over_proxy']:.3f} |\n"
        f"| usage bytes/s per proxy, {us['entities']} active entities | {us['bytes_per_second']:.0f} |\n"
        f"| through kquota proxy: produce msg/s, proxy scope (median) | {statistics.median(px['msg_per_s']['proxy']):.0f} |\n"
        f"| through kquota proxy: produce msg/s, fleet scope (median) | {statistics.median(px['msg_per_s']['fleet']):.0f} |\n"
        f"| through kquota proxy: fleet / proxy (paired range) | {px['fleet_over_proxy']:.3f} "
        f"({px['pair_range'][0]:.2f}-{px['pair_range'][1]:.2f}) |\n"
    )
    with open(os.path.join(RESULTS, "fleet.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
