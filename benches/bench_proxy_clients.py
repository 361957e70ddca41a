"""The benchmark clients of the proxy benches (librdkafka through confluent-kafka, 1 KB
messages): a warmed-up throughput producer, produce and consume segments timed in steady state,
paced produce latency. A module of their own so that ``bench_proxy.py`` and
``bench_proxy_tls.py``, which both use them, import each other in one direction only."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

VALUE = b"x" * 1024


def producer(address: str, topic: str, client_id: str, conf: dict | None = None) -> Producer:
    """A throughput producer (acks=1, linger 5 ms, room for a whole segment queued), warmed up:
    its first message, offset 0 of ``topic``, is acknowledged (connections, metadata) untimed."""
    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 5, "acks": 1,
                  "queue.buffering.max.messages": 200_000, **(conf or {})})
    p.produce(topic, VALUE)
    assert p.flush(30) == 0
    return p


def produce_segment(p: Producer, topic: str, n: int) -> float:
    """Messages per second to produce and acknowledge ``n`` 1 KB messages with ``p``."""
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


def consume_segment(address: str, topic: str, start: int, n: int, client_id: str, conf: dict | None = None) -> float:
    """Messages per second to consume offsets ``start + 1 .. start + n`` with a new consumer.

    Timed from the message at ``start`` (connection set-up and the first fetch not timed); a
    consumer of its own per segment, so none prefetches while the other side is timed."""
    c = Consumer({"bootstrap.servers": address, "client.id": client_id, "group.id": client_id,
                  "enable.auto.commit": False, **(conf or {})})
    c.assign([TopicPartition(topic, 0, start)])
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


def produce_latency(address: str, topic: str, rate: int, seconds: float, client_id: str,
                    conf: dict | None = None) -> list[float]:
    """Per-message produce->ack latency (ms) at a paced ``rate`` msg/s, linger 0."""
    lat: list[float] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            lat.append(msg.latency() * 1000)  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 0, "acks": 1, **(conf or {})})
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
