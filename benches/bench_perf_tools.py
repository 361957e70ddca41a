"""Apache Kafka's own perf tools through ``kquota proxy`` and straight to the broker, on the
PLAINTEXT and SSL listeners: writes ``benches/results/perf_tools.md`` and ``perf_tools.json``.

``kafka-producer-perf-test`` (a fixed record count at a capped rate: by default 200,000 records of
1024 bytes at 50,000 records/s, about 50 MB/s) and ``kafka-consumer-perf-test`` (the same count
back) run from Apache's jars (``scripts/kafka.sh tool``) against the broker of ``scripts/kafka.sh``
and against a ``kquota proxy`` process in front of the same listener (no quota in its store: the
cost of the proxy itself). Direct and proxied runs alternate, pass after pass, so a slow stretch
of a shared machine hits both. Per row: throughput, the producer's latency percentiles (the tool's
own: avg, p50, p99, p99.9 in ms), and the proxy's CPU per MB moved (``utime + stime`` of the proxy
process from ``/proc/<pid>/stat`` over the tool's run, divided by the MB the tool reports; as
millicores per MB/s this is the same number times 1000). Kroxylicious' published figures for its
proxy stand beside ours.

Run: ``python benches/bench_perf_tools.py [--quick] [--passes N] [--listeners PLAINTEXT,SSL]
[--kafka-dir DIR]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))

from kafka_broker import KafkaBroker  # noqa: E402
from kafka_proxy import KquotaProxy  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PRODUCER_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max "
    r"latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")
KROXYLICIOUS = (
    "Kroxylicious' published numbers for its passthrough proxy (no filters; kroxylicious.io/performance, "
    "OpenMessaging Benchmark, 1 KB messages, 3-broker cluster, one proxy pod limited to 1000m CPU): publish "
    "rate unchanged; publish latency avg +0.17 ms (2.62 -> 2.79 ms) and p99 +1.08 ms at 10 topics x 5,000 "
    "msg/s (about 50 MB/s); CPU about 25 millicores per MB/s (the sizing figure quoted for capacity planning; their "
    "posts have given 10 to 35 millicores per MB/s as the coefficient was refined)."
)


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def client_file(broker: KafkaBroker, listener: str, directory: Path) -> Path:
    """The broker helper's admin client properties for ``listener`` without ``bootstrap.servers``
    (the tools are pointed at the broker or at the proxy on their command line)."""
    text = broker.client_properties[listener].read_text().splitlines()
    path = directory / f"client-{listener}.properties"
    path.write_text("".join(line + "\n" for line in text if not line.startswith("bootstrap.servers")))
    return path


def start_proxy(broker: KafkaBroker, listener: str, directory: Path) -> KquotaProxy:
    """``kquota proxy`` in front of ``listener``; on SSL, TLS on both sides: the broker's test
    certificate (127.0.0.1) towards clients, the proxy's own certificate (mutual TLS) towards Kafka."""
    bootstrap = broker.listeners[listener]
    if listener == "PLAINTEXT":
        return KquotaProxy(bootstrap, directory)
    tls = broker.tls
    upstream = directory / "proxy-upstream.properties"
    upstream.write_text(f"security.protocol=SSL\nssl.truststore.location={tls.ca_pem}\n"
                        f"ssl.keystore.type=PKCS12\nssl.keystore.location={tls.proxy.p12}\n"
                        f"ssl.keystore.password={tls.password}\n")
    return KquotaProxy(f"SSL://{bootstrap}", directory, "--broker-config", str(upstream), listen="SSL",
                       config={"ssl.keystore.location": str(tls.server.keystore_pem),
                               "ssl.truststore.location": str(tls.ca_pem), "ssl.client.auth": "required"})


def produce(broker: KafkaBroker, address: str, props: Path, topic: str, records: int, size: int,
            throughput: int) -> dict:
    r = broker.tools("kafka-producer-perf-test", "--topic", topic, "--num-records", str(records),
                     "--record-size", str(size), "--throughput", str(throughput), "--producer.config", str(props),
                     "--producer-props", f"bootstrap.servers={address}", "acks=1", timeout=600)
    row = parse_producer(r.stdout, size) if r.returncode == 0 else None
    if row is None:
        raise RuntimeError(f"kafka-producer-perf-test failed: {(r.stderr or r.stdout).strip()[-600:]}")
    return row


def parse_producer(stdout: str, size: int) -> dict | None:
    """The producer tool's final summary line (None if it printed none)."""
    lines = [m for m in (PRODUCER_LINE.search(x) for x in stdout.splitlines()) if m]
    if not lines:
        return None
    g = lines[-1].groups()
    return {"records": int(g[0]), "records_per_s": float(g[1]), "mb_per_s": float(g[2]), "avg_ms": float(g[3]),
            "max_ms": float(g[4]), "p50_ms": int(g[5]), "p95_ms": int(g[6]), "p99_ms": int(g[7]),
            "p999_ms": int(g[8]), "mb": int(g[0]) * size / (1024 * 1024)}


def consume(broker: KafkaBroker, address: str, props: Path, topic: str, records: int) -> dict:
    r = broker.tools("kafka-consumer-perf-test", "--bootstrap-server", address, "--topic", topic, "--messages",
                     str(records), "--consumer.config", str(props), "--group", f"perf-{uuid.uuid4().hex[:8]}",
                     "--timeout", "60000", timeout=600)
    row = parse_consumer(r.stdout) if r.returncode == 0 else None
    if row is None:
        raise RuntimeError(f"kafka-consumer-perf-test failed: {(r.stderr or r.stdout).strip()[-600:]}")
    return row


def parse_consumer(stdout: str) -> dict | None:
    """The consumer tool's CSV row (start.time, end.time, data.consumed.in.MB, MB.sec,
    data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec)."""
    rows = [x for x in stdout.splitlines() if x.count(",") >= 9 and not x.startswith("start.time")]
    if not rows:
        return None
    f = [x.strip() for x in rows[-1].split(",")]
    return {"mb": float(f[2]), "mb_per_s": float(f[3]), "records": int(f[4]), "rebalance_ms": float(f[6]),
            "fetch_ms": float(f[7]), "fetch_mb_per_s": float(f[8])}


def run_listener(broker: KafkaBroker, listener: str, throughput: int, args: argparse.Namespace,
                 directory: Path) -> list[dict]:
    records = min(args.num_records, throughput * args.seconds)
    props = client_file(broker, listener, directory)
    proxy = start_proxy(broker, listener, directory)
    rows: list[dict] = []
    try:
        for n in range(args.passes):
            topic = f"perf-{listener.lower()}-{uuid.uuid4().hex[:6]}"
            for path in ("direct", "proxy"):
                broker.create_topic(f"{topic}-{path}")
            for path in ("direct", "proxy"):  # the direct run writes the topic both consumers read
                address = broker.listeners[listener] if path == "direct" else proxy.address
                before = cpu_seconds(proxy.proc.pid)
                row = produce(broker, address, props, f"{topic}-{path}", records, args.record_size, throughput)
                cpu = cpu_seconds(proxy.proc.pid) - before
                rows.append({"listener": listener, "throughput": throughput, "pass": n, "tool": "producer", "path": path, **row,
                             "proxy_cpu_s": cpu if path == "proxy" else None})
                print(json.dumps(rows[-1]), flush=True)
            for path in ("direct", "proxy"):
                address = broker.listeners[listener] if path == "direct" else proxy.address
                before = cpu_seconds(proxy.proc.pid)
                row = consume(broker, address, props, f"{topic}-direct", records)
                cpu = cpu_seconds(proxy.proc.pid) - before
                rows.append({"listener": listener, "throughput": throughput, "pass": n, "tool": "consumer", "path": path, **row,
                             "proxy_cpu_s": cpu if path == "proxy" else None})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        code, err = proxy.stop()
        if code not in (0, -15):
            print(f"kquota proxy exited {code}: {err.strip()[-400:]}", file=sys.stderr)
    return rows


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def report(rows: list[dict], meta: dict, out: str) -> None:
    lines = [
        "# Apache Kafka's perf tools through `kquota proxy` and straight to the broker", "",
        f"Run {meta['started']} on {meta['machine']}, {meta['cores']} cores, load average "
        f"{meta['loadavg_start'][0]:.1f} / {meta['loadavg_start'][1]:.1f} / {meta['loadavg_start'][2]:.1f} at the "
        f"start, {meta['loadavg_end'][0]:.1f} / {meta['loadavg_end'][1]:.1f} / {meta['loadavg_end'][2]:.1f} at the end "
        "(1 / 5 / 15 min; the machine is shared with other work, so the numbers are noisy). Apache Kafka "
        f"{meta['kafka']} (`scripts/kafka.sh`, one KRaft broker; tools from the same jars through `java -cp`), "
        f"`kquota proxy` as a process with an empty quota store; SSL: TLS on both sides, mutual TLS to the broker. "
        f"Producer: `kafka-producer-perf-test --record-size {meta['record_size']} --throughput T --num-records "
        f"min({meta['num_records']}, T x {meta['seconds']} s)` (acks=1) for each cap T in the table (records/s; "
        f"T x {meta['record_size']} B is the offered rate); consumer: `kafka-consumer-perf-test --messages` the same "
        "count, of the direct run's topic. A cap above what the machine sustains measures the saturated rate (the "
        "producer's latency is then its own queue); one below it measures the latency added. "
        f"{meta['passes']} pass(es), direct and proxy alternating; "
        "medians over the passes. Latencies are the producer tool's own (ms, integer percentiles). Proxy CPU: "
        "utime + stime of the proxy process over the tool's run (JVM start included, when the proxy idles) per MB "
        "the tool moved; millicores per MB/s is the same figure x 1000.", "",
        "| listener | cap (records/s) | tool | direct MB/s | proxy MB/s | ratio | avg ms direct / proxy (+) | p50 ms | p99 ms "
        "| p99.9 ms | proxy CPU s / MB | millicores per MB/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for listener, cap in dict.fromkeys((r["listener"], r["throughput"]) for r in rows):
        for tool in ("producer", "consumer"):
            mine = [r for r in rows if r["listener"] == listener and r["throughput"] == cap and r["tool"] == tool]
            d = [r for r in mine if r["path"] == "direct"]
            p = [r for r in mine if r["path"] == "proxy"]
            if not d or not p:
                continue
            key = "mb_per_s" if tool == "producer" else "fetch_mb_per_s"
            dm, pm = _med(d, key), _med(p, key)
            cpu_mb = statistics.median(r["proxy_cpu_s"] / r["mb"] for r in p if r["mb"])
            if tool == "producer":
                lat = [f"{_med(d, k):.2f} / {_med(p, k):.2f} ({_med(p, k) - _med(d, k):+.2f})" if k == "avg_ms"
                       else f"{_med(d, k):.0f} / {_med(p, k):.0f} ({_med(p, k) - _med(d, k):+.0f})"
                       for k in ("avg_ms", "p50_ms", "p99_ms", "p999_ms")]
            else:
                lat = ["-"] * 4
            lines.append(f"| {listener} | {cap} | {tool} | {dm:.1f} | {pm:.1f} | {pm / dm if dm else 0:.3f} | "
                         + " | ".join(lat) + f" | {cpu_mb:.4f} | {cpu_mb * 1000:.1f} |")
    lines += ["", "Consumer MB/s is the tool's `fetch.MB.sec` (the fetch phase, without the group join).", "",
              "Beside ours: " + KROXYLICIOUS, ""]
    with open(out, "w") as f:
        f.write("\n".join(lines))
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump({"meta": meta, "kroxylicious": KROXYLICIOUS, "rows": rows}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listeners", default="PLAINTEXT,SSL", help="broker listeners, comma-separated "
                    "(PLAINTEXT, SSL) (default: %(default)s)")
    ap.add_argument("--num-records", type=int, default=200000, help="records per run (default: %(default)s)")
    ap.add_argument("--record-size", type=int, default=1024, help="bytes per record (default: %(default)s)")
    ap.add_argument("--throughput", default="50000", help="producer caps, records/s, comma-separated; each is a row "
                    "(default: %(default)s)")
    ap.add_argument("--seconds", type=int, default=20, help="records per run at most cap x this (default: %(default)s)")
    ap.add_argument("--passes", type=int, default=3, help="direct/proxy pairs per listener (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20,000 records at 10,000/s, one pass, "
                    "report in a temporary directory unless --out is given")
    ap.add_argument("--kafka-dir", default=None, help="state directory of a broker started by scripts/kafka.sh "
                    "(default: start one)")
    ap.add_argument("--out", default=None, help="report path (default: benches/results/perf_tools.md)")
    args = ap.parse_args()
    if args.quick:
        args.num_records, args.throughput, args.passes = 20000, "10000", 1
    bad = set(args.listeners.split(",")) - {"PLAINTEXT", "SSL"}
    if bad:
        ap.error(f"--listeners takes PLAINTEXT and SSL, not {', '.join(sorted(bad))}")
    try:
        caps = [int(x) for x in args.throughput.split(",")]
    except ValueError:
        ap.error(f"--throughput takes whole numbers of records/s, comma-separated, not {args.throughput!r}")
    if min([args.num_records, args.record_size, args.passes, args.seconds, *caps]) <= 0:
        ap.error("--num-records, --record-size, --throughput, --seconds and --passes must be positive")
    out = args.out or os.path.join(os.environ.get("KQ_BENCH_RESULTS_DIR") or (
        tempfile.mkdtemp(prefix="kquota-bench-") if args.quick else os.path.join(HERE, "results")), "perf_tools.md")
    broker = KafkaBroker(Path(args.kafka_dir)) if args.kafka_dir else KafkaBroker.start()
    meta = {"started": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "machine": platform.machine(), "cores": os.cpu_count(), "kafka": broker.version,
            "num_records": args.num_records, "record_size": args.record_size, "throughputs": caps,
            "seconds": args.seconds,
            "passes": args.passes, "loadavg_start": os.getloadavg()}
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="kquota-perf-") as tmp:
            for listener in args.listeners.split(","):
                for cap in caps:
                    rows += run_listener(broker, listener, cap, args, Path(tmp))
    finally:
        broker.stop()
    meta["loadavg_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    report(rows, meta, out)
    print("wrote", out)


if __name__ == "__main__":
    main()
