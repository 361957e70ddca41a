"""How closely real clients flat out through ``kquota proxy`` track their quota, next to the
kernel's closed-loop reference: what Kafka's broker gives a client that sends one request, waits
for its answer and throttle, then sends the next (shared by ``benches/bench_accuracy.py`` and
``tests/proxy/test_proxy_accuracy.py``).

A cell is one client kind at one quota. Its rate is the bytes the proxy recorded for the client
(its request log: request bytes for Produce, response bytes for Fetch, as the quota counts them)
over a measurement window, divided by the quota. The reference replays the same request sizes
through a fresh kernel with the same quota and window, closed-loop, and measures the same window.

Why long windows: Kafka's sampled rate forgets a whole sample at once, so a client flat out gets
a burst each time the sample holding an earlier burst leaves the window (every ``window_num``
windows): the rate over 30 s moves by the size of that burst with the phase of the window, for
Kafka's own closed loop too (0.86-1.17x over 12-42 s for the same 1 MB requests). The mean over
several such periods is what tracks the quota.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import kquota
from proxy_support import VALUE, ProxyThread, produce_all

HERE = os.path.dirname(os.path.abspath(__file__))

#: Messages kafka-python's producer may hold unsent (8 MB of ``VALUE``, confluent-kafka's queue here).
KAFKA_PYTHON_BACKLOG = 8192
#: Client kinds measured, producers then consumers.
PRODUCERS = ("confluent-16k", "confluent-1m", "kafka-python", "aiokafka")
CONSUMERS = ("confluent", "confluent-64k", "aiokafka", "kafka-python")


class RequestRows:
    """The proxy's request log kept in memory: ``(ts_ms, client_id, quota_type, value)``."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, str, float]] = []
        self.lock = threading.Lock()

    def add(self, ts_ms: int, user: str, client_id: str, quota_type: str, value: float, throttle_time_ms: int = 0,
            shadow_throttle_time_ms: object = None, shadow_delayed_bytes: object = None,
            topic: object = None) -> None:
        if topic is not None:
            return  # a request's topic row: the request's own row has its bytes
        with self.lock:
            self.rows.append((ts_ms, client_id, quota_type, value))

    def close(self) -> None:
        pass

    def of(self, client_id: str, quota_type: str) -> list[tuple[int, float]]:
        with self.lock:
            return [(t, v) for t, c, q, v in self.rows if c == client_id and q == quota_type]


@dataclass
class Cell:
    kind: str
    role: str  # "produce" or "consume"
    quota: float
    client_id: str
    start_ms: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    error: list = field(default_factory=list)


def rate_over(rows: list[tuple[int, float]], t0_ms: int, start_s: float, end_s: float) -> float:
    """Bytes per second recorded in ``[t0 + start, t0 + end)``."""
    lo, hi = t0_ms + start_s * 1000, t0_ms + end_s * 1000
    return sum(v for t, v in rows if lo <= t < hi) / (end_s - start_s)


def first_burst(rows: list[tuple[int, float]], window_ms: int) -> float:
    """Bytes recorded in the first sample window from the client's first record (Kafka lets a
    new client send about ``quota * (window_num - 1) * window`` at once: the rate of an empty
    sensor is taken over ``window_num - 1`` windows)."""
    if not rows:
        return 0.0
    t0 = min(t for t, _ in rows)
    return sum(v for t, v in rows if t < t0 + window_ms)


def closed_loop(sizes: list[float], role: str, quota: float, window_num: int, start_s: float, end_s: float,
                gap_ms: int = 1) -> float:
    """The kernel's closed-loop reference: ``sizes`` (cycled) sent one at a time, each after the
    previous one's throttle (and ``gap_ms``); the rate recorded over ``[start, end)`` / quota.
    Consumers take the Fetch step: an empty answer is retried after its throttle."""
    key = "producer_byte_rate" if role == "produce" else "consumer_byte_rate"
    qm = kquota.QuotaManager(window_num=window_num, window_size_seconds=1, expiry_interval_seconds=None)
    try:
        qm.alter_client_quotas([({"client-id": "ref"}, {key: quota})])
        h = qm.client("", "ref")
        t, recorded, i = 0, [], 0
        while t < end_s * 1000 and sizes:
            size = sizes[i % len(sizes)]
            if role == "produce":
                throttle, _ = h.produce_response(size, 0.0, True, t)
                recorded.append((t, size))
                i += 1
            else:
                answer, throttle, _ = h.fetch_response(size, h.fetch_request_cap(), 0.0, t)
                if answer != "empty":
                    recorded.append((t, size))
                    i += 1
            t += max(int(throttle), 0) + gap_ms
        return rate_over(recorded, 0, start_s, end_s) / quota
    finally:
        qm.close()


# ------------------------------------------------------------------ clients


def _confluent_producer(address: str, cell: Cell, topic: str, batch: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": address, "client.id": cell.client_id, "linger.ms": 5,
                  "batch.size": batch, "queue.buffering.max.kbytes": 8192, "log_level": 0})
    while not cell.stop.is_set():
        try:
            p.produce(topic, VALUE)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(0)


def _kafka_python_producer(address: str, cell: Cell, topic: str) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    p = KafkaProducer(bootstrap_servers=address, client_id=cell.client_id, batch_size=16384, linger_ms=5,
                      max_block_ms=30_000)
    # The topic's metadata first, with time to spare: a loaded machine's first metadata answer can
    # take more than the loop's 100 ms, and kafka-python 2.3.3 then fails formatting its own
    # KafkaTimeoutError (a TypeError out of send). The loop itself must not block (it keeps the
    # backlog bounded below), so its sends get 100 ms (kafka-python reads the setting per send).
    p.partitions_for(topic)
    p.config["max_block_ms"] = 100
    # kafka-python does not bound its accumulator by buffer_memory: flat out, it grew by 90 MB/s
    # and spent its CPU on the backlog (0.50x at 100 KB/s, and batches past delivery.timeout.ms).
    # The loop keeps at most as many messages unsent as confluent-kafka's 8 MB queue holds. Its
    # sender thread sleeps through the end of a throttle until a send wakes it (left alone, it
    # sent nothing for 19 s after a 160 ms throttle), so a full backlog wakes it (flush).
    room = threading.BoundedSemaphore(KAFKA_PYTHON_BACKLOG)
    while not cell.stop.is_set():
        if not room.acquire(timeout=0.005):
            try:
                p.flush(timeout=0)
            except KafkaTimeoutError:
                pass
            continue
        try:
            p.send(topic, VALUE).add_both(lambda *_: room.release())
        except KafkaTimeoutError:
            room.release()
    try:
        p.close(timeout=0)
    except Exception:  # noqa: BLE001 (unsent batches are dropped; the measurement is over)
        pass


def _aiokafka_producer(address: str, cell: Cell, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=address, client_id=cell.client_id, max_batch_size=16384,
                             linger_ms=5)
        await p.start()
        try:
            while not cell.stop.is_set():
                await p.send(topic, VALUE)  # queued; waits while the accumulator is full
        finally:
            try:
                await asyncio.wait_for(p.stop(), 5)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 (unsent batches are dropped)
                pass

    asyncio.run(run())


def _confluent_consumer(address: str, cell: Cell, topic: str, extra: dict) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": address, "client.id": cell.client_id, "group.id": cell.client_id,
                  "enable.auto.commit": False, "log_level": 0, **extra})
    c.assign([TopicPartition(topic, 0, 0)])
    while not cell.stop.is_set():
        c.consume(1000, 0.2)
    c.close()


def _aiokafka_consumer(address: str, cell: Cell, topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> None:
        c = AIOKafkaConsumer(bootstrap_servers=address, client_id=cell.client_id, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            while not cell.stop.is_set():
                await c.getmany(timeout_ms=200, max_records=1000)
        finally:
            await c.stop()

    asyncio.run(run())


def _kafka_python_consumer(address: str, cell: Cell, topic: str) -> None:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=address, client_id=cell.client_id, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    while not cell.stop.is_set():
        c.poll(timeout_ms=200, max_records=1000)
    c.close()


def client(kind: str, role: str) -> Callable[[str, Cell, str], None]:
    """The loop of one client kind (runs until ``cell.stop``)."""
    if role == "produce":
        return {
            "confluent-16k": lambda a, c, t: _confluent_producer(a, c, t, 16384),
            "confluent-1m": lambda a, c, t: _confluent_producer(a, c, t, 1 << 20),
            "kafka-python": _kafka_python_producer,
            "aiokafka": _aiokafka_producer,
        }[kind]
    return {
        "confluent": lambda a, c, t: _confluent_consumer(a, c, t, {}),
        "confluent-64k": lambda a, c, t: _confluent_consumer(
            a, c, t, {"fetch.max.bytes": 65536, "max.partition.fetch.bytes": 65536, "message.max.bytes": 65536}),
        "aiokafka": _aiokafka_consumer,
        "kafka-python": _kafka_python_consumer,
    }[kind]


def preload(address: str, topic: str, nbytes: int) -> None:
    """Writes about ``nbytes`` of ``VALUE`` messages to ``topic`` (straight to the broker)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": address, "linger.ms": 20, "batch.size": 1 << 20, "log_level": 0,
                  "queue.buffering.max.kbytes": 1 << 20})
    produce_all(p, topic, nbytes // len(VALUE) + 1)
    assert p.flush(120) == 0


def run_cells(broker: Any, cells: list[Cell], window_num: int, end_s: float, topics: dict[str, str]) -> RequestRows:
    """Runs every cell's client at once through one proxy (each its own client id and quota, each
    client in a process of its own, as real clients are) for ``end_s`` seconds; returns the
    proxy's request rows."""
    rows = RequestRows()
    qm = kquota.QuotaManager(window_num=window_num, window_size_seconds=1)
    qm.alter_client_quotas([
        ({"client-id": c.client_id}, {("producer_byte_rate" if c.role == "produce" else "consumer_byte_rate"): c.quota})
        for c in cells])
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm, request_log=rows)
    procs: list[tuple[Cell, subprocess.Popen]] = []
    try:
        for c in cells:
            c.start_ms = int(time.time() * 1000)
            procs.append((c, subprocess.Popen(
                [sys.executable, __file__, c.kind, c.role, proxy.address, topics[c.role], c.client_id, str(end_s + 1)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=HERE))))
        for c, proc in procs:
            try:
                _, err = proc.communicate(timeout=end_s + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if proc.returncode != 0:
                c.error.append(" | ".join(err.decode(errors="replace").strip().splitlines()[-3:])
                               or f"exit {proc.returncode}")
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        proxy.stop()
        qm.close()
    return rows


def _client_main(argv: list[str]) -> None:
    """``proxy_accuracy.py KIND ROLE ADDRESS TOPIC CLIENT_ID SECONDS``: one client flat out."""
    kind, role, address, topic, client_id, seconds = argv
    cell = Cell(kind, role, 0.0, client_id)
    threading.Timer(float(seconds), cell.stop.set).start()
    client(kind, role)(address, cell, topic)
    os._exit(0)  # no client library's background thread outlives the measurement


@dataclass
class Result:
    cell: Cell
    rate: float  # recorded rate / quota over the window
    reference: float  # closed-loop reference over the same window
    burst: float  # first window's bytes / Kafka's first-window allowance
    requests: int


def measure(cell: Cell, rows: RequestRows, window_num: int, start_s: float, end_s: float) -> Result:
    qt = "PRODUCE" if cell.role == "produce" else "FETCH"
    mine = rows.of(cell.client_id, qt)
    sizes = [v for _, v in mine]
    rate = rate_over(mine, cell.start_ms, start_s, end_s) / cell.quota
    ref = closed_loop(sizes, cell.role, cell.quota, window_num, start_s, end_s)
    allowance = cell.quota * (window_num - 1)
    burst = first_burst(mine, 1000) / allowance
    return Result(cell, rate, ref, burst, len(mine))


if __name__ == "__main__":
    _client_main(sys.argv[1:])
