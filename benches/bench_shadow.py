"""Shadow quotas' prediction: what a shadow configuration predicts against what promoting it gives.

Three producers (librdkafka, each on a fixed schedule: its demand) write through a ``kquota
proxy`` (in-process, native data plane) to Apache Kafka. The enforced store holds no produce
quota; the shadow store gets configuration B, under which producer ``over`` is over its quota and
the two others are not. Over a window of ``--window`` seconds the shadow's would-be throttle time
and delayed bytes are read (``ProxyServer.shadow_predictions``); then B is promoted (``kquota
configs --promote-shadow``) and, over the next window of the same length, the enforced throttle
time (the request log's ``throttle_time_ms``) and the throttled bytes (the producer's demand in
request bytes, measured in the shadow window, less the bytes the proxy recorded) are measured.
Target: each within ±10% of the prediction.

``--cost``: the shadow's cost instead. A ``kquota proxy`` process (``--threads 1``) relays three
paced producers (``COST_RATE`` each) with no quota enforced, alternately without and with a
``--shadow-store`` limiting one of them below its rate and the metrics port (utilization) scraped
every second (ABAB, ``--window`` s each): the proxy's
CPU time per MB relayed, each client's delivered rate and whether any client saw a throttle.
Target: CPU per MB within 10% of without, rates unchanged, no throttle.

Both windows start with the quota's sensor new (the enforced configuration held no produce
quota, as the shadow held none before B): the same start for both, as the prediction assumes.

    KQUOTA_TEST_KAFKA_DIR=/tmp/kq-kafka-main python benches/bench_shadow.py

Writes benches/results/shadow.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(BENCH_DIR), "tests", "support")]
RESULTS_DIR = os.environ.get("KQ_BENCH_RESULTS_DIR") or os.path.join(BENCH_DIR, "results")

#: client id -> (demand bytes/s, configuration B's producer_byte_rate or None).
PRODUCERS = {"over": (800_000, 320_000), "under": (300_000, 1_000_000), "free": (200_000, None)}
MESSAGE = b"s" * 1000
TICK = 0.02


def paced_producer(address: str, topic: str, client_id: str, rate: int, stop: threading.Event) -> None:
    """Offers ``rate`` bytes/s on a fixed schedule whatever the throttle (a backlog builds up in
    the client while it is throttled, as an application's would)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 5,
                  "queue.buffering.max.kbytes": 2_000_000, "queue.buffering.max.messages": 10_000_000,
                  "message.timeout.ms": 600_000})
    per_tick = rate * TICK / len(MESSAGE)
    owed = 0.0
    t0 = time.monotonic()
    tick = 0
    while not stop.is_set():
        tick += 1
        owed += per_tick
        while owed >= 1:
            p.produce(topic, MESSAGE)
            owed -= 1
        p.poll(0)
        time.sleep(max(0.0, t0 + tick * TICK - time.monotonic()))
    p.purge()
    p.flush(1)


def per_client(preds: list) -> dict:
    out: dict = {}
    for pr in preds:
        t = out.setdefault(pr.client_id, [0, 0])
        t[0] += pr.throttle_time_ms
        t[1] += pr.delayed_bytes
    return out


def run(broker: str, window: float, warmup: float) -> dict:
    from kquota.cli import main as kquota_main
    from proxy_support import make_topic
    from shadow_rig import ShadowRig
    from waiting import wait_until

    tmp = tempfile.mkdtemp(prefix="kq-shadow-")
    load_start = os.getloadavg()[0]
    host, port = broker.rsplit(":", 1)
    rig = ShadowRig((host, int(port)), tmp, poll=0.1)
    proxy, qm, shadow_qm, shadow_store = rig.proxy, rig.qm, rig.shadow_qm, rig.shadow_store
    stop = threading.Event()
    topic = make_topic(proxy.address, prefix="shadow-bench-")
    threads = [threading.Thread(target=paced_producer, args=(proxy.address, topic, c, rate, stop))
               for c, (rate, _) in PRODUCERS.items()]
    try:
        for t in threads:
            t.start()
        time.sleep(warmup)
        shadow_store.alter([({"client-id": c}, {"producer_byte_rate": q}) for c, (_, q) in PRODUCERS.items()
                            if q is not None])
        assert wait_until(lambda: len(shadow_qm.describe_client_quotas()) == 2, 10)
        s0, s0_wall, before = time.monotonic(), time.time(), per_client(proxy.proxy.shadow_predictions())
        time.sleep(max(0.0, s0 + window - time.monotonic()))
        s1_wall, after = time.time(), per_client(proxy.proxy.shadow_predictions())
        assert kquota_main(rig.promote_args()) == 0
        assert wait_until(lambda: len(qm.describe_client_quotas()) == 2, 10)
        p0, p0_wall = time.monotonic(), time.time()
        time.sleep(max(0.0, p0 + window - time.monotonic()))
        p1_wall = time.time()
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        rig.close()
    rows = rig.own_rows()

    def window_sum(client: str, lo: float, hi: float, column: str, quota_type: str = "PRODUCE") -> float:
        return sum(r[column] or 0 for r in rows if r["client_id"] == client and r["quota_type"] == quota_type
                   and lo * 1000 <= r["ts_ms"] < hi * 1000)

    def muted_ms(client: str, lo: float, hi: float) -> float:
        """The time (ms) within [lo, hi) the client's connection was muted: the union of each
        throttled response's [ts, ts + throttle) (the throttles of pipelined responses overlap)."""
        spans = sorted((r["ts_ms"], r["ts_ms"] + r["throttle_time_ms"]) for r in rows
                       if r["client_id"] == client and r["throttle_time_ms"] and lo * 1000 <= r["ts_ms"] < hi * 1000)
        total, end = 0.0, float("-inf")
        for a, b in spans:
            b = min(b, hi * 1000)
            if b > end:
                total += b - max(a, end)
                end = b
        return total

    out = []
    for c, (rate, quota) in PRODUCERS.items():
        shadow_span = s1_wall - s0_wall
        demand = window_sum(c, s0_wall, s1_wall, "value") / shadow_span  # request bytes/s, unthrottled
        predicted_ms = after.get(c, [0, 0])[0] - before.get(c, [0, 0])[0]
        predicted_bytes = after.get(c, [0, 0])[1] - before.get(c, [0, 0])[1]
        span = p1_wall - p0_wall
        measured_ms = window_sum(c, p0_wall, p1_wall, "throttle_time_ms")
        sent = window_sum(c, p0_wall, p1_wall, "value")
        measured_bytes = max(0.0, demand * span - sent)
        # The shadow window may be a few ms shorter or longer than the enforced one: scale.
        scale = span / shadow_span
        out.append({
            "client_id": c, "demand_bytes_per_s": rate, "quota_b": quota, "measured_demand_request_bytes_per_s": demand,
            "predicted_throttle_ms": predicted_ms * scale, "measured_muted_ms": muted_ms(c, p0_wall, p1_wall),
            "measured_throttle_ms_sum": measured_ms, "demand_request_bytes": demand * span,
            "predicted_delayed_bytes": predicted_bytes * scale, "measured_throttled_bytes": measured_bytes,
            "sent_request_bytes_per_s_after": sent / span,
        })
    loadavg = f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (1-minute)"
    return {"window_seconds": window, "loadavg": loadavg, "rows": out}


#: Each producer's demand in the cost rows (bytes/s).
COST_RATE = 1_500_000


def cost(broker: str, window: float, rounds: int) -> dict:
    from kquota.stores.sqlite import SQLiteConfigStore
    from kafka_proxy import KquotaProxy
    from pathlib import Path
    from proxy_support import Meter, make_topic
    from waiting import free_port, wait_until

    tmp = Path(tempfile.mkdtemp(prefix="kq-shadow-cost-"))
    with SQLiteConfigStore(str(tmp / "shadow.db")) as s:
        s.alter([({"client-id": "cost-0"}, {"producer_byte_rate": COST_RATE // 3})])
    rows = []
    for i in range(2 * rounds):
        shadow = i % 2 == 1
        metrics_port = free_port()
        extra = ["--threads", "1"] + (["--shadow-store", f"sqlite:///{tmp}/shadow.db", "--metrics-port",
                                       str(metrics_port)] if shadow else [])
        proxy = KquotaProxy(broker, tmp, *extra)
        scrapes = [0]
        try:
            topic = make_topic(proxy.address, prefix="shadow-cost-")
            meters = [Meter() for _ in range(3)]
            stop = threading.Event()
            threads = [threading.Thread(target=metered_producer, args=(proxy.address, topic, f"cost-{n}", COST_RATE,
                                                                        stop, m)) for n, m in enumerate(meters)]
            for t in threads:
                t.start()
            time.sleep(2)  # connections made, metadata and first batches out
            cpu0, t0 = Relay.cpu(proxy.proc.pid), time.monotonic()

            def scrape() -> bool:
                if shadow and time.monotonic() >= t0 + scrapes[0]:
                    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
                        text = r.read().decode()
                    assert "shadow_throttle_time_total" in text or scrapes[0] < 3, text[:500]
                    scrapes[0] += 1
                return time.monotonic() >= t0 + window

            wait_until(scrape, window + 5)
            cpu1, t1 = Relay.cpu(proxy.proc.pid), time.monotonic()
            stop.set()
            for t in threads:
                t.join(30)
        finally:
            code, err = proxy.stop()
        delivered = [m.rate(t0, t1) for m in meters]
        mb = sum(delivered) * (t1 - t0) / 1e6
        rows.append({"shadow": shadow, "scrapes": scrapes[0], "cpu_ms_per_mb": (cpu1 - cpu0) * 1000 / mb,
                     "rates": delivered, "throttles": sum(len(m.throttles) for m in meters), "exit": code})
        print(json.dumps(rows[-1]), flush=True)
    from bench_support import build_info
    return {"window_seconds": window, "cost_rate": COST_RATE, "rows": rows, "native_mode": build_info()["mode"]}


class Relay:
    @staticmethod
    def cpu(pid: int) -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metered_producer(address: str, topic: str, client_id: str, rate: int, stop: threading.Event, meter) -> None:
    """``paced_producer`` counting deliveries and throttles into ``meter``."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 5,
                  "throttle_cb": meter.throttled})

    def delivered(err: object, msg: object) -> None:
        if err is None:
            meter.add(len(MESSAGE))

    per_tick = rate * TICK / len(MESSAGE)
    owed, t0, tick = 0.0, time.monotonic(), 0
    while not stop.is_set():
        tick += 1
        owed += per_tick
        while owed >= 1:
            p.produce(topic, MESSAGE, on_delivery=delivered)
            owed -= 1
        p.poll(0)
        time.sleep(max(0.0, t0 + tick * TICK - time.monotonic()))
    p.flush(10)


def write_cost(result: dict) -> None:
    result = {**result, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, "shadow_cost.json"), "w") as f:
        json.dump(result, f, indent=1)
    off = [r["cpu_ms_per_mb"] for r in result["rows"] if not r["shadow"]]
    on = [r["cpu_ms_per_mb"] for r in result["rows"] if r["shadow"]]
    lines = ["# Shadow quotas: cost (with utilization)", "",
             f"`benches/bench_shadow.py --cost`, {result['date']}: a `kquota proxy` process (1 data-plane thread) "
             f"relaying three producers paced at {result['cost_rate']:,} B/s each, no quota enforced, without and "
             f"with a shadow store limiting `cost-0` to a third of its rate and the metrics port (utilization, "
             f"shadow series) scraped every second, alternately, {result['window_seconds']:.0f} s each; the proxy "
             f"runs the native module built {result.get('native_mode', 'unknown')}. Target: CPU per MB within 10% of "
             "without; rates unchanged; no throttle.", "",
             "| run | shadow | proxy CPU ms per MB | delivered B/s (cost-0, cost-1, cost-2) | throttles seen |",
             "|---|---|---|---|---|"]
    for i, r in enumerate(result["rows"]):
        lines.append(f"| {i + 1} | {'on' if r['shadow'] else 'off'} | {r['cpu_ms_per_mb']:.2f} "
                     f"| {', '.join(f'{x:,.0f}' for x in r['rates'])} | {r['throttles']} |")
    lines += ["", f"Mean CPU per MB: off {sum(off) / len(off):.2f} ms, on {sum(on) / len(on):.2f} ms "
                  f"({(sum(on) / len(on)) / (sum(off) / len(off)) * 100 - 100:+.1f}%)."]
    with open(os.path.join(RESULTS_DIR, "shadow_cost.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def error(predicted: float, measured: float, whole: float) -> str:
    """The error relative to the prediction; for a prediction of 0, relative to ``whole`` (the
    window's length or demand: an unthrottled client's "throttled bytes" are the noise of two
    windows' demands)."""
    if predicted == 0:
        return "exact (both 0)" if measured == 0 else f"{measured / whole * 100:+.1f}% of the window's"
    return f"{(measured - predicted) / predicted * 100:+.1f}%"


def write(result: dict) -> None:
    result = {**result, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, "shadow.json"), "w") as f:
        json.dump(result, f, indent=1)
    w = result["window_seconds"]
    lines = ["# Shadow quotas: prediction against promotion", "",
             f"`benches/bench_shadow.py`, {result['date']}: three paced producers through the proxy, "
             f"configuration B evaluated as a shadow for {w:.0f} s, then promoted and measured over the next "
             f"{w:.0f} s. Target: each within ±10%. Throttle time measured as the time the client's connection "
             "was muted (the union of its throttled responses' spans, which is what the shadow predicts); "
             "the sum of the throttles the responses carried (Kafka's `throttle-time` sums them) is shown beside. "
             "Throttled bytes measured = the client's demand (request bytes/s in the shadow window) x the window, "
             "less the request bytes the proxy recorded.", "",
             "| client | demand B/s | B quota | throttle ms predicted | muted ms measured | error "
             "| throttle sum ms (error) | delayed bytes predicted | throttled bytes measured | error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['client_id']} | {r['demand_bytes_per_s']:,} | {r['quota_b'] or 'none'} "
                     f"| {r['predicted_throttle_ms']:,.0f} | {r['measured_muted_ms']:,.0f} "
                     f"| {error(r['predicted_throttle_ms'], r['measured_muted_ms'], w * 1000)} "
                     f"| {r['measured_throttle_ms_sum']:,.0f} "
                     f"({error(r['predicted_throttle_ms'], r['measured_throttle_ms_sum'], w * 1000)}) "
                     f"| {r['predicted_delayed_bytes']:,.0f} | {r['measured_throttled_bytes']:,.0f} "
                     f"| {error(r['predicted_delayed_bytes'], r['measured_throttled_bytes'], r['demand_request_bytes'])} |")
    over = next(r for r in result["rows"] if r["quota_b"] is not None and r["predicted_throttle_ms"] > 0)
    demand, sent, quota = over["measured_demand_request_bytes_per_s"], over["sent_request_bytes_per_s_after"], over["quota_b"]
    lines += ["", f"`{over['client_id']}` after the promotion sent {sent:,.0f} request B/s (quota {quota:,}, demand "
                  f"{demand:,.0f}) and was muted {over['measured_muted_ms'] / (w * 10):.0f}% of the window; the shadow "
                  f"predicted {over['predicted_throttle_ms'] / (w * 10):.0f}% ({sent / demand:.2f} of its demand let "
                  "through). The shadow follows the would-be client's backlog (librdkafka here, its buffer holding "
                  "what it could not send): the bytes sent during the would-be mute are held, and at the mute's end "
                  "the next response drains them request by request until one is throttled, as the queued requests "
                  "of a muted connection are read when it is unmuted. The delayed bytes are what the backlog grows "
                  "by (bytes held in place of drained ones are not: the client sent as many meanwhile). "
                  f"Load average during the run (2 cores, shared): {result.get('loadavg', 'n/a')}."]
    with open(os.path.join(RESULTS_DIR, "shadow.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", default=os.environ.get("KQUOTA_BENCH_BROKER", "127.0.0.1:19092"),
                    help="a PLAINTEXT Kafka broker (default: the test broker's 127.0.0.1:19092)")
    ap.add_argument("--window", type=float, default=20.0, help="seconds of each window (default: 20)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of traffic before the shadow (default: 3)")
    ap.add_argument("--cost", action="store_true", help="measure the shadow's cost instead of its prediction")
    ap.add_argument("--rounds", type=int, default=2, help="with --cost: runs without and with a shadow (default: 2)")
    args = ap.parse_args()
    if args.cost:
        write_cost(cost(args.broker, args.window, args.rounds))
        return
    result = run(args.broker, args.window, args.warmup)
    print(json.dumps(result, indent=1))
    write(result)


if __name__ == "__main__":
    main()
