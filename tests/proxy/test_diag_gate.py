"""A producer that reconnects while throttled does not escape its throttle (issue 27).

Kafka mutes a throttled channel; librdkafka pipelines Produce requests, and when they wait
behind mutes longer than its ``socket.timeout.ms`` it drops the connection and sends them again
on a new one, which a broker reads at once. In the proxy a throttle holds the producer, not the
connection (``kquota-proxy``'s ``producer_gate``): all its connections are muted, and for a
quota window after it one Produce is in flight at a time across them. Real components: tansu,
confluent-kafka."""

from __future__ import annotations

import time

import kquota
from proxy_accuracy import RequestRows
from proxy_support import VALUE, ProxyThread, make_topic

QUOTA = 40_000  # B/s
BATCH = 160_000  # one request is 4 s of quota: a few pipelined ones wait past socket.timeout.ms


def test_diag_producer_reconnecting_while_throttled_waits_its_throttle_out(broker):
    from confluent_kafka import Producer

    topic = make_topic(broker.address)
    rows = RequestRows()
    qm = kquota.QuotaManager(window_num=11, window_size_seconds=1)
    qm.alter_client_quotas([({"client-id": "reconnector"}, {"producer_byte_rate": QUOTA})])
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm, request_log=rows)
    disconnects: list[str] = []
    import threading
    stop_load = threading.Event()
    def gil_burn():
        while not stop_load.is_set():
            sum(range(20000))
    for _ in range(3):
        threading.Thread(target=gil_burn, daemon=True).start()
    try:
        p = Producer({"bootstrap.servers": proxy.address, "client.id": "reconnector", "linger.ms": 20,
                      "batch.size": BATCH, "queue.buffering.max.kbytes": 2048, "socket.timeout.ms": 8000,
                      "log_level": 0, "error_cb": lambda e: disconnects.append(str(e))})
        stop = time.monotonic() + 30
        while time.monotonic() < stop:
            try:
                p.produce(topic, VALUE)
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        mine = rows.of("reconnector", "PRODUCE")
        waits = proxy.proxy.producer_waits
    finally:
        stop_load.set()
        proxy.stop()
        qm.close()
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
    print("ROWS", [(t - t0, v) for t, v in mine]); print("ESC", escaped, "waits", waits)
    assert not escaped, escaped
