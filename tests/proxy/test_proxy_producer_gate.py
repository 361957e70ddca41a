"""A producer that reconnects while throttled does not escape its throttle.

Kafka mutes a throttled channel; librdkafka pipelines Produce requests, and when they wait
behind mutes longer than its ``socket.timeout.ms`` it drops the connection and sends them again
on a new one, which a broker reads at once. In the proxy a throttle holds the producer, not the
connection (``kquota-proxy``'s ``producer_gate``): all its connections are muted, and for a
quota window after it one Produce is in flight at a time across them. Real components: tansu,
confluent-kafka. On tansu, which advertises the port of the forwarder that holds its answers, so
the Produce answers pass it too: the session's Kafka broker advertises its own.

The test makes its own load rather than relying on the suite's: the broker answers slowly while
the producer starts (a forwarder holds its answers), and CPU-burning processes run beside it.
That load once let Produce requests through up to a second inside the throttle before: the
proxy's request half asked the kernel for a throttle estimate, which created the producer's
sensor at the request, so its sample windows started the first answer's latency before Kafka's
(which starts them at the first record) and every throttle fell that much short."""

from __future__ import annotations

import pytest
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

import kquota
from proxy_accuracy import RequestRows
from proxy_fakes import LoopbackServer
from proxy_support import VALUE, ProxyThread, Tansu, make_topic

pytestmark = [pytest.mark.process, pytest.mark.timing]

QUOTA = 40_000  # B/s
BATCH = 160_000  # one request is 4 s of quota: a few pipelined ones wait past socket.timeout.ms
RUN_S = 30
SLOW_S, ANSWER_DELAY_S = 3.0, 0.8  # the broker's slow start: each answer held 0.8 s for 3 s


class SlowStartBroker:
    """A forwarder in front of the broker (which advertises it) holding every answer
    ``ANSWER_DELAY_S`` while its slow phase (``slow_for`` seconds from ``start_slow()``) lasts:
    a broker loaded while the producer starts."""

    def __init__(self) -> None:
        self.upstream: Optional[int] = None
        self.slow_until = 0.0
        self._server = LoopbackServer(self._serve)
        self.port = self._server.port

    def start_slow(self, seconds: float) -> None:
        self.slow_until = time.monotonic() + seconds

    def _serve(self, client: socket.socket) -> None:
        assert self.upstream is not None
        up = socket.create_connection(("127.0.0.1", self.upstream))
        held: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(client, up, None), daemon=True).start()
        threading.Thread(target=self._pump, args=(up, None, held), daemon=True).start()
        # Broker -> proxy: each chunk leaves at its arrival plus the delay while slow.
        while (item := held.get()) is not None:
            due, chunk = item
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                client.sendall(chunk)
            except OSError:
                break
        for s in (client, up):
            s.close()

    def _pump(self, src: socket.socket, dst: Optional[socket.socket], held: Optional[queue.Queue]) -> None:
        try:
            while chunk := src.recv(65536):
                if held is not None:
                    now = time.monotonic()
                    held.put((now + (ANSWER_DELAY_S if now < self.slow_until else 0.0), chunk))
                else:
                    assert dst is not None
                    dst.sendall(chunk)
        except OSError:
            pass
        finally:
            if held is not None:
                held.put(None)
            else:
                try:
                    (dst or src).shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def stop(self) -> None:
        self._server.stop()


def _burn_cpu(seconds: float) -> list[subprocess.Popen]:
    """One CPU-burning process per core, each ending by itself after ``seconds``."""
    code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 2)]


def test_a_producer_reconnecting_while_throttled_waits_its_throttle_out():
    from confluent_kafka import Producer

    slow = SlowStartBroker()
    broker = Tansu(advertised_port=slow.port)
    slow.upstream = broker.port
    topic = make_topic(broker.address)
    rows = RequestRows()
    qm = kquota.QuotaManager(window_num=11, window_size_seconds=1)
    qm.alter_client_quotas([({"client-id": "reconnector"}, {"producer_byte_rate": QUOTA})])
    proxy = ProxyThread(("127.0.0.1", slow.port), qm=qm, request_log=rows)
    disconnects: list[str] = []
    burners = _burn_cpu(RUN_S + 5)
    try:
        slow.start_slow(SLOW_S)
        p = Producer({"bootstrap.servers": proxy.address, "client.id": "reconnector", "linger.ms": 20,
                      "batch.size": BATCH, "queue.buffering.max.kbytes": 2048, "socket.timeout.ms": 8000,
                      "log_level": 0, "error_cb": lambda e: disconnects.append(str(e))})
        stop = time.monotonic() + RUN_S
        while time.monotonic() < stop:
            try:
                p.produce(topic, VALUE)
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        mine = rows.of("reconnector", "PRODUCE")
        waits = proxy.proxy.producer_waits
    finally:
        for b in burners:
            b.kill()
            b.wait()
        proxy.stop()
        qm.close()
        broker.stop()
        slow.stop()
    assert waits >= 1, (waits, disconnects, len(mine))
    # Replayed at the times the proxy recorded them, no Produce came inside the throttle of
    # the one before it, except within 100 ms of it: at a mute's end the request left on the
    # dropped connection is served beside the new connection's first, as a broker serves it.
    # Without the carry, the new connection's first Produce comes a moment after the reconnect,
    # seconds inside the throttle.
    ref = kquota.QuotaManager(window_num=11, window_size_seconds=1, expiry_interval_seconds=None)
    try:
        ref.alter_client_quotas([({"client-id": "ref"}, {"producer_byte_rate": QUOTA})])
        h = ref.client("", "ref")
        t0, escaped = mine[0][0], []
        for (t, v), (t_next, _) in zip(mine, mine[1:]):
            throttle, _ = h.produce_response(v, 0.0, True, t - t0)
            if t + 100 < t_next < t + throttle - 100:
                escaped.append((t - t0, throttle, t_next - t))
    finally:
        ref.close()
    assert len(mine) >= 6, mine
    assert not escaped, escaped
