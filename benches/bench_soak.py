"""The security soak: ``kquota proxy`` under hostile load while producers run under their quotas;
writes ``benches/results/soak.md`` (and ``soak.json``), whose figures ``docs/security.md`` quotes.

One ``kquota proxy`` process (its memory is the one measured) in front of a fresh tansu, with a
SQLite store giving each of ``--producers`` client ids ``--quota`` B/s. While they produce flat
out (confluent-kafka, 16 KB batches), the proxy is held under:

- ``--idle`` connections opened and held silent for the whole run;
- ``--reconnects`` new connections a second, each sending one ApiVersions and closing;
- ``--declarations`` connections at a time that declare a 100 MB Metadata frame, send its first
  16 KB and stall (reopened when the proxy closes them).

Measured: the proxy's resident memory (VmRSS) sampled every second, the most over the run and at
the end; each producer's recorded rate (the proxy's request log: request bytes, as the quota
counts them) from 12 s after its first record to the end (at least 120 s, several of Kafka's
sample-expiry periods, as ``bench_accuracy.py`` measures), against its quota. Bounds: memory stays below
``--max-rss-mb`` and every producer is within 0.95-1.05x of its quota.

Run: ``python benches/bench_soak.py [--seconds 135] [--idle 2000] [--reconnects 200]``.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import resource
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))

from proxy_support import Meter, Tansu, make_topic, produce_loop  # noqa: E402
from waiting import free_port, wait_port  # noqa: E402

RESULTS = os.path.join(HERE, "results")
#: The declared size of each hostile frame, and how much of it is sent before stalling.
DECLARED = 100 * 1024 * 1024
SENT = 16 * 1024


def _api_versions_frame(correlation_id: int) -> bytes:
    """ApiVersions v0 (header v1: key, version, correlation id, client id "soak")."""
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"soak"
    return struct.pack(">i", len(body)) + body


def _declaration_prefix() -> bytes:
    """A Metadata v1 request's first 16 KB under a size prefix of 100 MB."""
    header = struct.pack(">hhih", 3, 1, 1, 4) + b"soak"
    return struct.pack(">i", DECLARED) + header + b"\x00" * (SENT - len(header) - 4)


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Hostile:
    """The three kinds of hostile load, each on its own thread, until ``stop``."""

    def __init__(self, port: int, idle: int, reconnects: float, declarations: int) -> None:
        self.port, self.idle, self.reconnects, self.declarations = port, idle, reconnects, declarations
        self.stop = threading.Event()
        self.held: list[socket.socket] = []
        self.counts = {"idle_opened": 0, "reconnects": 0, "reconnect_failures": 0, "declarations": 0,
                       "declarations_closed_by_proxy": 0}
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self._hold_idle, self._reconnect, self._declare)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)
        for s in self.held:
            s.close()

    def _connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def _hold_idle(self) -> None:
        for _ in range(self.idle):
            if self.stop.is_set():
                return
            try:
                self.held.append(self._connect())
                self.counts["idle_opened"] += 1
            except OSError:
                time.sleep(0.01)

    def _reconnect(self) -> None:
        interval, n = 1.0 / self.reconnects, 0
        t0 = time.monotonic()
        while not self.stop.is_set():
            n += 1
            try:
                with self._connect() as s:
                    s.sendall(_api_versions_frame(n))
                    s.recv(4)
                self.counts["reconnects"] += 1
            except OSError:
                self.counts["reconnect_failures"] += 1
            delay = t0 + n * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def _declare(self) -> None:
        socks: list[socket.socket] = []
        prefix = _declaration_prefix()
        while not self.stop.is_set():
            while len(socks) < self.declarations:
                try:
                    s = self._connect()
                    s.sendall(prefix)
                    s.setblocking(False)
                    socks.append(s)
                    self.counts["declarations"] += 1
                except OSError:
                    break
            for s in list(socks):
                try:
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                self.counts["declarations_closed_by_proxy"] += 1
                socks.remove(s)
                s.close()
            time.sleep(0.2)
        for s in socks:
            s.close()


def recorded_rates(log_dir: str, warmup_s: float, end_ms: int) -> dict[str, float]:
    """Produce bytes per second the proxy recorded per client id from ``warmup_s`` after that
    client's first record to ``end_ms`` (as benches/bench_accuracy.py measures: Kafka's sampled
    rate swings with the phase of its sample expiry, so the window must span several periods)."""
    import pyarrow.parquet as pq

    rows: dict[str, list[tuple[int, float]]] = {}
    for path in glob.glob(os.path.join(log_dir, "**", "*.parquet"), recursive=True):
        t = pq.read_table(path, columns=["ts_ms", "client_id", "quota_type", "value"]).to_pylist()
        for r in t:
            if r["quota_type"] == "PRODUCE":
                rows.setdefault(r["client_id"], []).append((r["ts_ms"], r["value"]))
    rates = {}
    for cid, rs in rows.items():
        start_ms = min(ts for ts, _ in rs) + int(warmup_s * 1000)
        rates[cid] = sum(v for ts, v in rs if start_ms <= ts < end_ms) / ((end_ms - start_ms) / 1000)
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=135, help="length of the run (default 135)")
    ap.add_argument("--warmup", type=float, default=12,
                    help="seconds from a producer's first record to the measurement window (default 12)")
    ap.add_argument("--producers", type=int, default=3, help="producers, each with its own quota (default 3)")
    ap.add_argument("--quota", type=float, default=1_000_000, help="each producer's producer_byte_rate (B/s)")
    ap.add_argument("--idle", type=int, default=2000, help="idle connections held (default 2000)")
    ap.add_argument("--reconnects", type=float, default=200, help="new connections a second (default 200)")
    ap.add_argument("--declarations", type=int, default=10, help="100 MB declarations held at once (default 10)")
    ap.add_argument("--max-rss-mb", type=float, default=512, help="memory bound for the proxy (default 512)")
    ap.add_argument("--out", default=RESULTS, help="results directory (default benches/results)")
    args = ap.parse_args(argv)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.idle + 1024)), hard))
    broker = Tansu()
    tmp = subprocess.check_output(["mktemp", "-d"]).decode().strip()
    log_dir = os.path.join(tmp, "log")
    db = os.path.join(tmp, "q.db")
    ids = [f"soak-{i}" for i in range(args.producers)]
    for cid in ids:
        subprocess.run([sys.executable, "-m", "kquota", "configs", "--store", f"sqlite:///{db}", "--alter",
                        "--add-config", f"producer_byte_rate={int(args.quota)}", "--entity-type", "clients",
                        "--entity-name", cid], check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    conf = os.path.join(tmp, "proxy.properties")
    with open(conf, "w") as f:
        f.write(f"max.connections={args.idle + 1000}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", broker.address, "--listen",
         f"127.0.0.1:{port}", "--store", f"sqlite:///{db}", "--request-log", log_dir, "--config", conf,
         "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    hostile = Hostile(port, args.idle, args.reconnects, args.declarations)
    stop = threading.Event()
    meters = {cid: Meter() for cid in ids}
    rss: list[int] = []
    try:
        wait_port(port, 20)
        address = f"127.0.0.1:{port}"
        topic = make_topic(address)
        rss.append(rss_kb(proc.pid))
        base_rss = rss[0]
        t0_ms = int(time.time() * 1000)
        hostile.start()
        producers = [threading.Thread(target=produce_loop, args=(address, topic, cid, meters[cid], stop), daemon=True)
                     for cid in ids]
        for t in producers:
            t.start()
        t_end = time.monotonic() + args.seconds
        while time.monotonic() < t_end:
            time.sleep(1)
            if proc.poll() is not None:
                raise SystemExit(f"the proxy exited: {proc.stderr.read().decode()[-2000:]}")
            rss.append(rss_kb(proc.pid))
            print(f"[{len(rss) - 1:3d} s] rss {rss[-1] / 1024:.0f} MB, idle {hostile.counts['idle_opened']}, "
                  f"reconnects {hostile.counts['reconnects']}, declarations {hostile.counts['declarations']}",
                  flush=True)
        t1_ms = int(time.time() * 1000)
    finally:
        stop.set()
        hostile.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        broker.stop()
    rates = recorded_rates(log_dir, args.warmup, t1_ms)
    ratios = {cid: rates.get(cid, 0.0) / args.quota for cid in ids}
    seconds_measured = (t1_ms - t0_ms) / 1000 - args.warmup
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_at_start": os.getloadavg()[0],
        "seconds": args.seconds, "measured_seconds": round(seconds_measured, 1), "quota": args.quota,
        "idle": args.idle, "reconnects_per_s": args.reconnects, "declarations": args.declarations,
        "counts": hostile.counts, "rss_mb": {"start": round(base_rss / 1024, 1), "max": round(max(rss) / 1024, 1),
                                             "end": round(rss[-1] / 1024, 1)},
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
    }
    ok_mem = max(rss) / 1024 <= args.max_rss_mb
    ok_rate = all(0.95 <= r <= 1.05 for r in ratios.values())
    result["bounds_met"] = {"memory": ok_mem, "rates": ok_rate}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "soak.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [
        "# Security soak: `kquota proxy` under hostile load",
        "",
        f"{result['date']}, {result['machine']}, load average {result['load_at_start']:.2f} at the start; "
        f"`python benches/bench_soak.py --seconds {args.seconds:g}` (tansu behind one `kquota proxy` process).",
        "",
        f"Load held for {args.seconds:g} s: {args.idle} idle connections, {args.reconnects:g} reconnects a second "
        f"(ApiVersions each), {args.declarations} connections at a time declaring a 100 MB frame and sending "
        f"16 KB; {args.producers} producers flat out, each with producer_byte_rate {args.quota:,.0f} B/s.",
        "",
        "| what | measured | bound |",
        "|---|---|---|",
        f"| proxy RSS at start / max / end | {result['rss_mb']['start']} / {result['rss_mb']['max']} / "
        f"{result['rss_mb']['end']} MB | max ≤ {args.max_rss_mb:g} MB: {'met' if ok_mem else 'NOT met'} |",
        f"| idle connections opened | {hostile.counts['idle_opened']} | {args.idle} |",
        f"| reconnects (failed) | {hostile.counts['reconnects']} ({hostile.counts['reconnect_failures']}) | "
        f"{args.reconnects:g}/s |",
        f"| 100 MB declarations sent / closed by the proxy | {hostile.counts['declarations']} / "
        f"{hostile.counts['declarations_closed_by_proxy']} | |",
    ]
    for cid in ids:
        lines.append(f"| {cid} recorded rate / quota over {seconds_measured:.0f} s | {ratios[cid]:.3f} | "
                     f"0.95-1.05: {'met' if 0.95 <= ratios[cid] <= 1.05 else 'NOT met'} |")
    with open(os.path.join(args.out, "soak.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    err = proc.stderr.read().decode() if proc.stderr else ""
    if err.strip():
        print("proxy stderr (last lines):\n" + "\n".join(err.splitlines()[-10:]))
    return 0 if ok_mem and ok_rate else 1


if __name__ == "__main__":
    sys.exit(main())
