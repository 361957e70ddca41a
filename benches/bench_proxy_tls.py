"""``kquota proxy`` with TLS on both sides, the rows ``bench_proxy.py --tls-only`` runs.

The broker's TLS listener is stunnel in front of tansu (tests/tls_support.py); the proxy listens
with SSL and connects to that listener with SSL (``--listen SSL://``, ``--bootstrap-server
SSL://`` and ``--broker-config``), so a client pays TLS once either way and the proxy pays it
twice (decrypting and encrypting every byte: splice is impossible through TLS). Rows:

1. produce and consume throughput, the same client (confluent-kafka, SSL) through the proxy vs
   straight to the broker's TLS listener: proxy / direct, segments alternating (targets >= 0.8
   produce, >= 0.7 consume);
2. proxy CPU seconds per MB moved (produce + consume), with TLS and, for comparison, a
   PLAINTEXT proxy in front of a plain tansu moving the same segments;
3. added produce latency at 10k msg/s (linger 0), p50 (target <= 0.5 ms) and p99, with the 95%
   bootstrap interval over the alternating segment pairs (bench_proxy.added_latency).

The machine's load average before and after is printed with the rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from bench_proxy_clients import consume_segment, produce_latency, produce_segment, producer
from bench_proxy_procs import Relay
from bench_proxy_report import added_latency
from proxy_support import Tansu, make_topic
from waiting import free_port, wait_port
from tls_support import TlsBroker, make_pki, make_tls_topic, ssl_client_config

MB = 1024 * 1024 / 1024  # 1 KB messages per MB


class ProxyCli(Relay):
    """``kquota proxy`` in its own process with the given addresses and options."""

    def __init__(self, bootstrap: str, listen: str, store_dir: str, *extra: str) -> None:
        self.port = int(listen.rpartition(":")[2])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", bootstrap, "--listen", listen,
             "--store", f"sqlite:///{store_dir}/q.db", "--log-level", "WARNING", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_port(self.port, 30)


def _segments(args: argparse.Namespace) -> int:
    return max(2, args.repeats * args.segments)


def _throughput(direct: str, proxy: str, relay: Relay, conf: dict, n: int, segments: int,
                topics: tuple[str, str]) -> tuple[list[float], list[float], list[float], list[float], float, float]:
    """Alternating produce then consume segments: the rates of each side and the proxy's CPU
    seconds over its produce and consume segments."""
    prods = {direct: producer(direct, topics[0], "bench-tls", conf), proxy: producer(proxy, topics[1], "bench-tls", conf)}
    rates: dict[str, list[float]] = {direct: [], proxy: []}
    cpu = 0.0
    for i in range(segments):
        for address in ((direct, proxy) if i % 2 == 0 else (proxy, direct)):
            before = relay.cpu_seconds()
            rates[address].append(produce_segment(prods[address], topics[address == proxy], n))
            if address == proxy:
                cpu += relay.cpu_seconds() - before
    consumed: dict[str, list[float]] = {direct: [], proxy: []}
    for i in range(segments):
        for address in ((direct, proxy) if i % 2 == 0 else (proxy, direct)):
            before = relay.cpu_seconds()
            consumed[address].append(consume_segment(address, topics[address == proxy], i * n, n, "bench-tls", conf))
            if address == proxy:
                cpu += relay.cpu_seconds() - before
    return rates[direct], rates[proxy], consumed[direct], consumed[proxy], cpu, 2 * segments * n / MB


def tls_rows(args: argparse.Namespace) -> None:
    """Runs the TLS rows and prints them."""
    load_before = os.getloadavg()
    store_dir = tempfile.mkdtemp(prefix="kq-bench-tls-")
    pki = make_pki()
    n, segments = args.messages, _segments(args)
    conf = ssl_client_config(pki)
    broker_config = os.path.join(store_dir, "broker.properties")
    with open(broker_config, "w") as f:
        f.write(f"security.protocol=SSL\nssl.truststore.location={pki.ca.pem}\n")
    proxy_config = os.path.join(store_dir, "proxy.properties")
    with open(proxy_config, "w") as f:
        f.write(f"ssl.keystore.location={pki.server.keystore_pem}\n")
    rows: dict[str, str] = {}
    broker = TlsBroker(pki)
    try:
        proxy = ProxyCli(f"SSL://{broker.address}", f"SSL://127.0.0.1:{free_port()}", store_dir,
                         "--config", proxy_config, "--broker-config", broker_config)
        try:
            topics = (make_tls_topic(broker.address, conf), make_tls_topic(broker.address, conf))
            pd, pp, cd, cp, cpu_tls, mb = _throughput(broker.address, proxy.address, proxy, conf, n, segments, topics)
            rows["produce throughput, TLS both sides [proxy / direct TLS]"] = (
                f"{statistics.median(pp) / statistics.median(pd):.2f}x (direct {statistics.median(pd):,.0f} msg/s, "
                f"proxy {statistics.median(pp):,.0f} msg/s; target >= 0.8)")
            rows["consume throughput, TLS both sides [proxy / direct TLS]"] = (
                f"{statistics.median(cp) / statistics.median(cd):.2f}x (direct {statistics.median(cd):,.0f} msg/s, "
                f"proxy {statistics.median(cp):,.0f} msg/s; target >= 0.7)")
            rows["proxy CPU per MB, TLS both sides"] = f"{1000 * cpu_tls / mb:.2f} ms/MB"
            lat_topics = (make_tls_topic(broker.address, conf), make_tls_topic(broker.address, conf))
            direct_lat: list[list[float]] = []
            proxy_lat: list[list[float]] = []
            for i in range(args.latency_pairs):
                order = ((broker.address, lat_topics[0], direct_lat), (proxy.address, lat_topics[1], proxy_lat))
                for address, topic, into in order[:: 1 if i % 2 == 0 else -1]:
                    into.append(sorted(produce_latency(address, topic, 10_000, args.latency_seconds, "bench-tls-lat",
                                                       conf)))
            for q, target in ((0.5, "<= 0.5 ms"), (0.99, "reported")):
                est, lo, hi = added_latency(direct_lat, proxy_lat, q)
                rows[f"added latency p{int(q * 100)} at 10k msg/s, TLS both sides"] = (
                    f"{est:+.3f} ms [{lo:+.3f}, {hi:+.3f}] (target {target})")
        finally:
            proxy.stop()
    finally:
        broker.stop()
    plain = Tansu()
    try:
        proxy = ProxyCli(plain.address, f"127.0.0.1:{free_port()}", store_dir)
        try:
            topics = (make_topic(plain.address), make_topic(plain.address))
            *_, cpu_plain, mb = _throughput(plain.address, proxy.address, proxy, {}, n, segments, topics)
            rows["proxy CPU per MB, PLAINTEXT"] = f"{1000 * cpu_plain / mb:.2f} ms/MB"
        finally:
            proxy.stop()
    finally:
        plain.stop()
    head = (f"TLS rows: {n} messages x {segments} segments per side, {args.latency_pairs} latency pairs of "
            f"{args.latency_seconds} s; load average before {tuple(round(x, 2) for x in load_before)}, after "
            f"{tuple(round(x, 2) for x in os.getloadavg())}")
    print(head)
    for name, value in rows.items():
        print(f"  {name}: {value}")
    if not args.no_write:
        import datetime

        stamp = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "proxy_tls.md"), "w") as f:
            f.write(f"# kquota proxy with TLS on both sides\n\nRun {stamp}, release build. {head}.\n\n"
                    "| row | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows.items()))
