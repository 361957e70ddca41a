"""Topic quotas held whatever the leaders: a topic quota against Kafka's own per-broker client
quotas, with partition leadership moved mid-run.

    python benches/bench_topic_quotas.py [--window 60] [--kafka-dir DIR]

Setup: Apache Kafka with three brokers (``scripts/kafka.sh start --brokers 3``; ``--kafka-dir``
attaches to one started so, else one is started in a temporary directory and stopped at the
end); per run a fresh topic of 6 partitions, replication factor 2, whose preferred leaders are
brokers 1, 2, 3, 1, 2, 3 and every one of which has a replica on broker 1; three confluent-kafka
producers with different client ids writing 10 KB values flat out to every partition; a budget of
1 MB/s for the topic.

Runs, each: the producers start; after a warm-up the first window (``--window`` s) measures the
aggregate delivered rate; then leadership moves (Kafka's ``kafka-reassign-partitions`` puts broker
1 first in every partition's replica list, a reorder that moves no data, then a preferred-leader
election through the Admin API's ElectLeaders: every partition is led by broker 1); after a
settling time a second window of the same length measures again.

* ``one-proxy``: the producers through one ``kquota proxy`` (kafka:// store on the cluster) with
  the topic quota ``topics/<t> producer_byte_rate=1000000``;
* ``fleet-of-3``: three ``kquota proxy --quota-scope fleet`` following the same store, one
  producer through each, the same topic quota;
* ``kafka-per-broker``: the producers straight to the brokers, with Kafka's own client quota
  ``clients/<id> producer_byte_rate=333333`` (the budget split over the three producers), which
  each broker enforces on its own.

Rates are values delivered (acknowledged) per second, counted by each producer's delivery
callback (a little under the record batches a quota counts). Quotas use Kafka's default window
(11 samples of 1 s). The machine is shared: each run records the load average before and after.
Writes ``benches/results/topic_quotas.{json,md}``. Nothing fails on the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))
RESULTS = os.environ.get("KQ_BENCH_RESULTS_DIR") or os.path.join(HERE, "results")

BUDGET = 1_000_000  # bytes/s for the topic
PRODUCERS = 3
PARTITIONS = 6
#: Replicas of each partition, preferred leader first: leaders on all three brokers, and broker 1
#: a replica of every partition so that a reorder alone can move every leader there.
ASSIGNMENT = [[1, 2], [2, 1], [3, 1], [1, 3], [2, 1], [3, 1]]
VALUE = b"v" * 10_000
WARMUP_S = 15.0  # past the first quota window's burst (11 s)
SETTLE_S = 15.0  # after the move: clients have the new leaders, the windows hold only new samples


class Meter:
    """Bytes delivered per producer, timestamped."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []
        self.errors = 0
        self.throttle_ms: list[int] = []
        self.lock = threading.Lock()

    def delivered(self, err: object, msg: object) -> None:
        if err is None:
            with self.lock:
                self.events.append((time.monotonic(), len(VALUE)))
        else:
            self.errors += 1

    def throttled(self, event: object) -> None:
        self.throttle_ms.append(int(event.throttle_time * 1000))  # type: ignore[attr-defined]

    def rate(self, start: float, end: float) -> float:
        with self.lock:
            return sum(n for t, n in self.events if start <= t < end) / (end - start)


def produce(address: str, topic: str, client_id: str, meter: Meter, stop: threading.Event) -> None:
    """Flat out to every partition in turn until ``stop``."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 5, "batch.size": 65536,
                  "queue.buffering.max.kbytes": 2048, "throttle_cb": meter.throttled,
                  "topic.metadata.refresh.interval.ms": 5000})
    i = 0
    while not stop.is_set():
        try:
            p.produce(topic, VALUE, partition=i % PARTITIONS, on_delivery=meter.delivered)
            i += 1
        except BufferError:
            p.poll(0.02)
        p.poll(0)
    p.flush(30)


def leaders(cluster, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient(cluster.admin_config()).list_topics(topic, timeout=30)
    return {pid: p.leader for pid, p in md.topics[topic].partitions.items()}


def create_topic(cluster, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(cluster.admin_config())
    new = NewTopic(topic, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT)
    admin.create_topics([new], operation_timeout=60)[topic].result(60)
    deadline = time.monotonic() + 60
    while set(leaders(cluster, topic).values()) != {1, 2, 3}:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: leaders {leaders(cluster, topic)} are not on brokers 1, 2 and 3")
        time.sleep(0.5)


def move_leaders(cluster, topic: str, to: int = 1) -> dict:
    """Every partition's leader to broker ``to``: Kafka's reassignment tool reorders each replica
    list (the same replicas, ``to`` first: no data moves), then a preferred-leader election."""
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    plan = {"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": [to] + [b for b in reps if b != to], "log_dirs": ["any"] * len(reps)}
        for p, reps in enumerate(ASSIGNMENT)]}
    t0 = time.monotonic()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(plan, f)
    bootstrap = cluster.listeners["PLAINTEXT"]
    r = cluster.tools("kafka-reassign-partitions", "--bootstrap-server", bootstrap, "--reassignment-json-file", f.name,
                      "--execute")
    os.unlink(f.name)
    if r.returncode != 0:
        raise RuntimeError(f"kafka-reassign-partitions: {r.stderr.strip() or r.stdout.strip()}")
    admin = AdminClient(cluster.admin_config())
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.elect_leaders(ElectionType.PREFERRED, parts).result(30)
        except Exception as e:  # noqa: BLE001 - the reorder may not have reached every broker yet: again
            if time.monotonic() > deadline:
                raise RuntimeError(f"preferred-leader election: {e}") from None
        now = leaders(cluster, topic)
        if set(now.values()) == {to}:
            return {"leaders": now, "seconds": time.monotonic() - t0}
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: leaders {now} after the election, not all {to}")
        time.sleep(1.0)


def set_config(args: list[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "kquota", "configs", *args], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"kquota configs {' '.join(args)}: {r.stderr.strip()}")


def run(name: str, cluster, addresses: list[str], topic: str, client_prefix: str, window: float) -> dict:
    """One run: producers through ``addresses`` (producer i through address i % n), a window,
    the move, a window."""
    meters = [Meter() for _ in range(PRODUCERS)]
    stop = threading.Event()
    threads = [threading.Thread(target=produce, args=(addresses[i % len(addresses)], topic, f"{client_prefix}-{i}",
                                                      meters[i], stop), daemon=True) for i in range(PRODUCERS)]
    load_before = os.getloadavg()
    t0 = time.monotonic()
    for t in threads:
        t.start()
    a = (t0 + WARMUP_S, t0 + WARMUP_S + window)
    time.sleep(max(0.0, a[1] - time.monotonic()))  # measured window
    before_leaders = leaders(cluster, topic)
    moved = move_leaders(cluster, topic)
    b0 = time.monotonic() + SETTLE_S
    b = (b0, b0 + window)
    time.sleep(max(0.0, b[1] - time.monotonic()))  # measured window
    stop.set()
    for t in threads:
        t.join(60)
    rate_a = sum(m.rate(*a) for m in meters)
    rate_b = sum(m.rate(*b) for m in meters)
    out = {
        "run": name, "window_s": window, "budget": BUDGET,
        "before": {"leaders": before_leaders, "rate": rate_a, "x_budget": rate_a / BUDGET,
                   "per_producer": [m.rate(*a) for m in meters]},
        "after": {"leaders": moved["leaders"], "rate": rate_b, "x_budget": rate_b / BUDGET,
                  "per_producer": [m.rate(*b) for m in meters]},
        "move_seconds": moved["seconds"],
        "change": rate_b / rate_a - 1.0 if rate_a else float("nan"),
        "throttled_responses": [sum(1 for x in m.throttle_ms if x > 0) for m in meters],
        "delivery_errors": [m.errors for m in meters],
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    from kafka_broker import KafkaBroker
    from kafka_proxy import KquotaProxy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=60.0, help="seconds of each measured window (before and after the move)")
    ap.add_argument("--kafka-dir", help="state directory of a cluster started by scripts/kafka.sh start --brokers 3")
    ap.add_argument("--runs", default="one-proxy,fleet-of-3,kafka-per-broker", help="comma-separated runs to do")
    ap.add_argument("--keep", action="store_true", help="add these runs to an earlier results file as further repeats")
    opts = ap.parse_args()
    cluster = KafkaBroker(Path(opts.kafka_dir)) if opts.kafka_dir else KafkaBroker.start(brokers=3)
    if cluster.brokers != 3:
        raise SystemExit(f"{cluster.dir} is a cluster of {cluster.brokers} broker(s), not 3")
    hosts = cluster.listeners["PLAINTEXT"]
    tmp = Path(tempfile.mkdtemp(prefix="kq-bench-topicq-"))
    (tmp / "fleet.key").write_text(os.urandom(32).hex())
    results = []
    try:
        for name in opts.runs.split(","):
            tag = uuid.uuid4().hex[:8]
            topic = f"bench-topicq-{tag}"
            create_topic(cluster, topic)
            if name == "kafka-per-broker":
                for i in range(PRODUCERS):
                    r = cluster.tools("kafka-configs", "--bootstrap-server", hosts, "--alter", "--add-config",
                                      f"producer_byte_rate={BUDGET // PRODUCERS}", "--entity-type", "clients",
                                      "--entity-name", f"kq-{tag}-{i}")
                    if r.returncode != 0:
                        raise RuntimeError(f"kafka-configs: {r.stderr.strip()}")
                time.sleep(2)  # the brokers apply the quota from the metadata log
                results.append(run(name, cluster, [hosts], topic, f"kq-{tag}", opts.window))
                continue
            store = f"kquota-bench-{tag}"
            set_config(["--store", f"kafka://{hosts}/{store}", "--alter", "--add-config", f"producer_byte_rate={BUDGET}",
                        "--entity-type", "topics", "--entity-name", topic])
            scope = "fleet" if name == "fleet-of-3" else "proxy"
            proxies = [KquotaProxy(hosts.split(",")[0], tmp, "--store", f"kafka://{hosts}/{store}", "--quota-scope", scope,
                                   config={"kquota.fleet.usage.key.file": str(tmp / "fleet.key")}, brokers=3)
                       for _ in range(3 if scope == "fleet" else 1)]
            try:
                time.sleep(3)  # each proxy has read the store
                results.append(run(name, cluster, [p.address for p in proxies], topic, f"kq-{tag}", opts.window))
            finally:
                for p in proxies:
                    p.stop()
    finally:
        if not opts.kafka_dir:
            cluster.stop()
    write(results, opts.keep)


def write(results: list[dict], keep: bool = False) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "topic_quotas.json")
    earlier = []
    if keep and os.path.exists(path):
        with open(path) as f:
            earlier = json.load(f)["results"]
    for r in results:
        r["repeat"] = 1 + sum(1 for e in earlier if e["run"] == r["run"])
        earlier.append(r)
    order = ["one-proxy", "fleet-of-3", "kafka-per-broker"]
    results = sorted(earlier, key=lambda r: (order.index(r["run"]) if r["run"] in order else len(order), r["repeat"]))
    with open(path, "w") as f:
        json.dump({"results": results}, f, indent=2)
    rows = []
    for r in results:
        rows.append(f"| {r['run']} | {r['repeat']} | {r['before']['rate'] / 1e6:.3f} ({r['before']['x_budget']:.2f}x) "
                    f"| {r['after']['rate'] / 1e6:.3f} ({r['after']['x_budget']:.2f}x) | {r['change'] * 100:+.1f}% "
                    f"| {r['move_seconds']:.1f} | {r['loadavg_before'][0]:.1f} / {r['loadavg_after'][0]:.1f} |")
    w = results[0]["window_s"] if results else 0
    md = ("# Topic quotas: held whatever the leaders\n\n"
          f"Budget 1 MB/s for a 6-partition topic on three Apache Kafka brokers, three producers with different client ids; "
          f"aggregate delivered MB/s over {w:.0f} s windows, before (leaders on brokers 1, 2, 3) and after (every leader "
          "moved to broker 1 by a replica reorder and a preferred-leader election). `benches/bench_topic_quotas.py`.\n\n"
          "| run | repeat | before: MB/s (x budget) | after: MB/s (x budget) | change | move (s) "
          "| load avg 1 min before / after |\n"
          "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    with open(os.path.join(RESULTS, "topic_quotas.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
