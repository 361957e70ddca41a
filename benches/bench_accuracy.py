"""How closely real clients flat out track their quota through ``kquota proxy``, side by side
with Apache Kafka's broker enforcing the same quota itself: writes ``benches/results/accuracy.md``
and ``accuracy.json``.

``--broker kafka`` (the default; ``accuracy_side.py``): for each quota every client kind runs
twice at once against Apache Kafka (``scripts/kafka.sh``): once straight to the broker with the
quota set on the broker by client id, once through the proxy with the quota in the proxy and none
on the broker. Both columns are measured from the client's side (payload bytes delivered or
consumed over the window, the ``throttle_time_ms`` its responses carried, the first second's
burst); target: the proxy's rate within 3% of the broker's in every cell.

``--broker tansu``: the earlier table, through the proxy in front of tansu, rated by the bytes the
proxy recorded:

For each quota (100 KB/s, 1 MB/s, 10 MB/s; Kafka's default 11 windows of 1 s) every client kind
runs flat out at once through one proxy in front of a fresh tansu, each with its own client id
and quota: producers (confluent-kafka with 16 KB and librdkafka's default 1 MB batches,
kafka-python, aiokafka) and consumers (confluent-kafka with default and 64 KB fetches,
aiokafka, kafka-python) of a preloaded topic. Each cell reports the bytes the proxy recorded over
the measurement window divided by the quota, next to the kernel's closed-loop reference for the
same request sizes over the same window (what a broker gives a client that sends one request at
a time and waits out each throttle), and the first window's burst against Kafka's allowance
(``quota * (window_num - 1)`` s). The window starts at 12 s and is long enough that one request
is at most 1/20 of the bytes measured and that several of Kafka's sample-expiry periods fall in
it (see ``tests/support/proxy_accuracy.py`` for why a 30 s window swings with the phase).

Run: ``python benches/bench_accuracy.py [--broker kafka|tansu] [--rates 100000,1000000,10000000]
[--window S] [--quick]``; ``--kafka-dir DIR`` uses a broker already started by ``scripts/kafka.sh``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))

from proxy_accuracy import CONSUMERS, PRODUCERS, Cell, measure, preload, run_cells  # noqa: E402
from proxy_support import Tansu, make_topic  # noqa: E402

import accuracy_report  # noqa: E402

WINDOW_NUM = 11
START_S = 12.0
#: The largest request a client here sends (librdkafka's default batch): the window holds at
#: least 20 of them, and at least 120 s (about ten of Kafka's sample-expiry periods).
LARGEST_REQUEST = 1 << 20


def window_for(quota: float) -> float:
    return max(120.0, 20 * LARGEST_REQUEST / quota)


def run_rate(quota: float, length: float) -> list:
    end = START_S + length
    broker = Tansu()
    try:
        topics = {"produce": make_topic(broker.address), "consume": make_topic(broker.address)}
        print(f"[{quota:.0f} B/s] preloading {quota * (end + 5) / 1e6:.0f} MB", flush=True)
        preload(broker.address, topics["consume"], int(quota * (end + 5)))
        tag = f"{int(quota)}"
        cells = [Cell(k, "produce", quota, f"p-{k}-{tag}") for k in PRODUCERS]
        cells += [Cell(k, "consume", quota, f"c-{k}-{tag}") for k in CONSUMERS]
        print(f"[{quota:.0f} B/s] {len(cells)} clients for {end:.0f} s", flush=True)
        rows = run_cells(broker, cells, WINDOW_NUM, end, topics)
        out = []
        for c in cells:
            if c.error:
                out.append((c, None))
                continue
            out.append((c, measure(c, rows, WINDOW_NUM, START_S, end)))
        return out
    finally:
        broker.stop()


def tansu_lines(rates: list[float], window: float | None) -> list[str]:
    lines = [
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f} at the start); tansu 0.6 behind the native "
        f"plane; quota.window.num={WINDOW_NUM}, 1 s windows; "
        f"all clients of a rate at once, each its own client id and quota. `rate` is the bytes the proxy "
        f"recorded (request bytes for Produce, response bytes for Fetch) from {START_S:.0f} s over the "
        "window, divided by the quota; `closed loop` is the kernel replaying the same request sizes one at a "
        "time, each after its throttle (a broker's answer to a client that waits); `burst` is the first "
        "second's bytes over Kafka's first-window allowance (quota x (window_num - 1) s).",
        "",
        "| quota | client | window | requests | rate | closed loop | burst |",
        "|---|---|---|---|---|---|---|",
    ]
    for q in rates:
        length = window or window_for(q)
        for c, r in run_rate(q, length):
            name = f"{c.role} {c.kind}"
            if r is None:
                lines.append(f"| {q / 1e3:.0f} KB/s | {name} | - | - | failed: {c.error[0]!r} | - | - |")
            else:
                lines.append(f"| {q / 1e3:.0f} KB/s | {name} | {START_S:.0f}-{START_S + length:.0f} s | {r.requests} "
                             f"| {r.rate:.3f}x | {r.reference:.3f}x | {r.burst:.2f} |")
            print(lines[-1], flush=True)
    return lines


def kafka_rows(rates: list[float], window: float | None, kafka_dir: str | None,
               by_role: bool, roles: tuple[str, ...] = ("produce", "consume"),
               fetch_answer: str | None = None) -> tuple[list[dict], dict]:
    from accuracy_side import run_rate as side_rate
    from kafka_broker import KafkaBroker

    broker = KafkaBroker(kafka_dir) if kafka_dir else KafkaBroker.start()
    meta = {"started": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "machine": platform.machine(), "cores": os.cpu_count(), "kafka": broker.version,
            "window_num": WINDOW_NUM, "by_role": by_role, "loadavg_start": os.getloadavg(),
            "fetch_answer": fetch_answer or "deliver-large"}
    rows: list[dict] = []
    try:
        for q in rates:
            new = side_rate(broker, q, WINDOW_NUM, START_S, window or window_for(q), by_role, roles, fetch_answer)
            rows += new
            for r in new:
                print(json.dumps(r), flush=True)
    finally:
        broker.stop()
    meta["loadavg_end"] = os.getloadavg()
    return rows, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                    help="kafka: Apache Kafka's broker, its own quotas beside the proxy's; tansu: the proxy "
                         "alone in front of tansu (default: %(default)s)")
    ap.add_argument("--rates", default="100000,1000000,10000000",
                    help="quotas in bytes/s, comma-separated (default: %(default)s)")
    ap.add_argument("--window", type=float, default=None,
                    help="measurement window in seconds (default: max(120, 20 requests of 1 MB))")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: one rate (1 MB/s), a 20 s window, report in a temporary directory "
                         "unless --out is given")
    ap.add_argument("--kafka-dir", default=None,
                    help="state directory of a broker started by scripts/kafka.sh (default: start one)")
    ap.add_argument("--by-role", action="store_true",
                    help="kafka: run the producers of both columns, then the consumers, instead of all at once "
                         "(half the client processes at a time)")
    ap.add_argument("--roles", default="produce,consume",
                    help="kafka: which clients run, comma-separated: produce, consume (default: %(default)s)")
    ap.add_argument("--fetch-answer", choices=("deliver-large", "kafka"), default=None,
                    help="kafka: the proxy's kquota.fetch.answer; kafka answers every throttled Fetch empty as "
                         "the broker does (default: the proxy's default, deliver-large)")
    ap.add_argument("--out", default=None, help="report path (default: benches/results/accuracy.md)")
    args = ap.parse_args()
    if args.quick:
        args.rates, args.window = "1000000", args.window or 20.0
    out = args.out or (os.path.join(accuracy_report.quick_dir(), "accuracy.md") if args.quick
                       else os.path.join(HERE, "results", "accuracy.md"))
    rates = [float(x) for x in args.rates.split(",")]
    if args.broker == "tansu":
        accuracy_report.write_tansu(out, tansu_lines(rates, args.window))
    else:
        roles = tuple(r.strip() for r in args.roles.split(",") if r.strip())
        if not roles or set(roles) - {"produce", "consume"}:
            ap.error(f"--roles takes produce and/or consume, got {args.roles!r}")
        rows, meta = kafka_rows(rates, args.window, args.kafka_dir, args.by_role, roles, args.fetch_answer)
        accuracy_report.write_kafka(out, rows, meta, START_S)
    print("wrote", out)


if __name__ == "__main__":
    main()
