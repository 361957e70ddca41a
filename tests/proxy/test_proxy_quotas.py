"""Quotas enforced by the proxy on real clients (confluent-kafka / librdkafka) against Apache Kafka:
a produce-quota'd and a fetch-quota'd client track their quotas while an unquota'd client in
the same run is not slowed; throttle_time_ms reaches the clients; quota changes apply live."""

from __future__ import annotations

import pytest
import contextlib
import threading
import time
from typing import Iterator

import kquota
from kquota.stores.sqlite import SQLiteConfigStore
from kquota.watcher import QuotaConfigWatcher
from proxy_support import VALUE, Meter, ProxyThread, make_topic, produce_all, produce_loop
from waiting import wait_until

from confluent_kafka import Consumer, Producer, TopicPartition

pytestmark = pytest.mark.timing

WINDOW_NUM = 2  # quota.window.num: a short burst allowance (1 s) keeps the test short and steady


@contextlib.contextmanager
def quota_proxy(broker, quotas: list, window_num: int = WINDOW_NUM) -> Iterator[tuple]:
    """(qm, proxy): a manager with ``quotas`` and a short burst window, and a proxy to ``broker``
    enforcing it; both closed after."""
    qm = kquota.QuotaManager(window_num=window_num, window_size_seconds=1)
    qm.alter_client_quotas(quotas)
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        yield qm, proxy
    finally:
        proxy.stop()
        qm.close()


SMALL_FETCHES = {"fetch.max.bytes": 100_000, "max.partition.fetch.bytes": 100_000, "message.max.bytes": 100_000}


def consume_loop(address: str, topic: str, client_id: str, meter: Meter, stop: threading.Event,
                 config: dict = SMALL_FETCHES) -> None:
    # Fetches of ~100 KB by default: the rate is measured in steps much finer than the quota.
    c = Consumer({"bootstrap.servers": address, "client.id": client_id, "group.id": client_id,
                  "enable.auto.commit": False, "throttle_cb": meter.throttled, **config})
    c.assign([TopicPartition(topic, 0, 0)])
    while not stop.is_set():
        for m in c.consume(1000, 0.2):
            if not m.error():
                meter.add(len(m.value()))
    c.close()


def test_produce_and_fetch_quotas_track_their_rate_and_spare_others(broker):
    produce_quota, fetch_quota = 300_000, 400_000
    with quota_proxy(broker, [
        ({"client-id": "slow-producer"}, {"producer_byte_rate": produce_quota}),
        ({"client-id": "slow-consumer"}, {"consumer_byte_rate": fetch_quota}),
    ]) as (qm, proxy):
        fill = make_topic(proxy.address)
        p = Producer({"bootstrap.servers": broker.address, "linger.ms": 20, "batch.size": 16384})
        for _ in range(7_000):  # 7 MB for the consumer, written straight to the broker
            p.produce(fill, VALUE)
            p.poll(0)
        assert p.flush(30) == 0
        out_topic = make_topic(proxy.address)
        meters = {name: Meter() for name in ("slow-producer", "fast-producer", "slow-consumer")}
        stop = threading.Event()
        threads = [
            threading.Thread(target=produce_loop, args=(proxy.address, out_topic, "slow-producer",
                                                         meters["slow-producer"], stop)),
            threading.Thread(target=produce_loop, args=(proxy.address, out_topic, "fast-producer",
                                                         meters["fast-producer"], stop)),
            threading.Thread(target=consume_loop, args=(proxy.address, fill, "slow-consumer",
                                                         meters["slow-consumer"], stop)),
        ]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(11)  # the measured window: the rates below are over its last 8 s
        stop.set()
        for t in threads:
            t.join(30)
        # After the first window's burst, the long-run rates track the quotas (±20%).
        start, end = t0 + 3, t0 + 11
        slow_p = meters["slow-producer"].rate(start, end)
        slow_c = meters["slow-consumer"].rate(start, end)
        fast_p = meters["fast-producer"].rate(start, end)
        assert 0.8 * produce_quota <= slow_p <= 1.2 * produce_quota, slow_p
        assert 0.8 * fetch_quota <= slow_c <= 1.2 * fetch_quota, slow_c
        assert meters["slow-producer"].throttles and max(meters["slow-producer"].throttles) > 0
        assert meters["slow-consumer"].throttles and max(meters["slow-consumer"].throttles) > 0
        # The unquota'd producer shares the proxy and the broker, and is never throttled.
        assert not meters["fast-producer"].throttles
        assert fast_p > 3 * produce_quota, fast_p


def test_quota_altered_in_the_store_applies_within_seconds(broker, tmp_path):
    store = SQLiteConfigStore(str(tmp_path / "q.db"), poll_interval=0.2)
    qm = kquota.QuotaManager(window_num=WINDOW_NUM, window_size_seconds=1)
    watcher = QuotaConfigWatcher(store, qm).start()
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm, store=store)
    try:
        topic = make_topic(proxy.address)
        meter = Meter()
        stop = threading.Event()
        t = threading.Thread(target=produce_loop, args=(proxy.address, topic, "late", meter, stop))
        t.start()
        assert wait_until(meter.total), "nothing delivered before the alter"
        t0 = time.monotonic()
        time.sleep(1.5)  # the measured window of the unlimited rate
        before = meter.rate(t0, t0 + 1.5)
        assert not meter.throttles
        quota = 100_000
        store.alter([({"client-id": "late"}, {"producer_byte_rate": quota})])
        altered = time.monotonic()
        wait_until(lambda: meter.throttles, 5)
        first_throttle = time.monotonic() - altered
        time.sleep(max(0.0, altered + 8 - time.monotonic()))  # the measured window: altered + 3 to + 8
        stop.set()
        t.join(30)
        assert meter.throttles, "no throttle within 5 s of the alter"
        assert first_throttle < 3.0
        after = meter.rate(altered + 3, altered + 8)
        assert before > 5 * quota
        assert after <= 1.3 * quota, (before, after)
    finally:
        proxy.stop()
        watcher.stop()
        store.close()
        qm.close()


def test_acks0_producer_is_muted_without_responses(broker):
    """acks=0 gets no response to carry a throttle: only the mute slows it (Kafka's rule)."""
    quota = 200_000
    with quota_proxy(broker, [({"client-id": "fire-and-forget"}, {"producer_byte_rate": quota})]) as (
            qm, proxy):
        topic = make_topic(proxy.address)
        p = Producer({"bootstrap.servers": proxy.address, "client.id": "fire-and-forget", "acks": 0,
                      "linger.ms": 5, "batch.size": 16384, "queue.buffering.max.kbytes": 256})
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            try:
                p.produce(topic, VALUE)
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        elapsed = time.monotonic() - t0
        p.purge()  # what is still queued never reaches the broker
        p.flush(1)
        # Count what reached the broker (read directly): every byte its log holds by now.
        probe = Consumer({"bootstrap.servers": broker.address, "group.id": "count-probe"})
        _, end = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        probe.close()
        meter, stop = Meter(), threading.Event()
        t = threading.Thread(target=consume_loop, args=(broker.address, topic, "count", meter, stop))
        t.start()
        read_all = wait_until(lambda: meter.total() >= end * len(VALUE))
        stop.set()
        t.join(30)
        span = time.monotonic() - t0  # requests the client had buffered may still pass meanwhile
        received = meter.total()
        assert read_all, (received, end * len(VALUE))
        # Bounded by the quota over the whole span plus one window's burst.
        assert received <= 1.3 * quota * (span + (WINDOW_NUM - 1)), received
        assert received >= 0.5 * quota * elapsed, received
        assert qm.measured_rate(kquota.ClientQuotaType.PRODUCE, "ANONYMOUS", "fire-and-forget") > 0


def bursts(events: list[tuple[float, int]], gap: float = 0.5) -> list[tuple[float, int]]:
    """(start, bytes) of each run of deliveries with no pause longer than ``gap`` seconds."""
    out: list[tuple[float, int]] = []
    last = None
    for t, n in sorted(events):
        if last is None or t - last > gap:
            out.append((t, n))
        else:
            out[-1] = (out[-1][0], out[-1][1] + n)
        last = t
    return out


def test_responses_larger_than_the_quota_window_track_the_quota(broker):
    """A consumer whose every Fetch response is larger than the quota window (here one 1 MB
    batch against 300 KB: Kafka answers at least one whole batch, KIP-74's first batch) is still
    served, and muted until the quota has allowed each response, so its long-run rate tracks the
    quota. Kafka's throttle alone (topped up to samples - 1 windows) let it through at 1.4x."""
    quota = 300_000
    with quota_proxy(broker, [({"client-id": "big-batches"}, {"consumer_byte_rate": quota})]) as (
            _qm, proxy):
        topic = make_topic(proxy.address)
        p = Producer({"bootstrap.servers": broker.address, "linger.ms": 100, "batch.size": 1_000_000})
        produce_all(p, topic, 8_000)  # ~1 MB batches, written straight to the broker
        assert p.flush(30) == 0
        meter, stop = Meter(), threading.Event()
        # librdkafka's default fetch sizes: each response is one ~1 MB batch.
        t = threading.Thread(target=consume_loop, args=(proxy.address, topic, "big-batches", meter, stop, {}))
        t.start()
        time.sleep(14)  # the measured window: the bursts below are what it delivered in it
        stop.set()
        t.join(30)
        runs = bursts(meter.events)
        assert len(runs) >= 4, runs
        assert all(n > quota * (WINDOW_NUM - 1) for _, n in runs[:-1]), runs  # each over the window
        # Bytes delivered before the last burst, over the time they took.
        rate = sum(n for _, n in runs[:-1]) / (runs[-1][0] - runs[0][0])
        assert 0.8 * quota <= rate <= 1.2 * quota, (rate, runs)
        # Each response carried its mute: the time the quota takes to allow ~1 MB.
        assert meter.throttles and max(meter.throttles) >= 0.8 * 1000 * runs[0][1] / quota, meter.throttles


def test_responses_a_large_share_of_the_quota_window_track_the_quota(broker):
    """Responses within the quota window but over a tenth of it: Kafka's empty answer pays the
    consumer in whole responses, and the window's remainder goes unused until a response's
    sample expires. The proxy delivers an over-quota response that large and mutes, so the
    consumer tracks its quota. Kafka answers these 150 KB fetches of 50 KB batches with three
    whole batches (147 KB), half a 300 KB window."""
    quota, window_num = 100_000, 4
    window = quota * (window_num - 1)
    with quota_proxy(broker, [({"client-id": "big-share"}, {"consumer_byte_rate": quota})],
                     window_num=window_num) as (_qm, proxy):
        topic = make_topic(proxy.address)
        p = Producer({"bootstrap.servers": broker.address, "linger.ms": 50, "batch.size": 50_000})
        for _ in range(4_000):
            p.produce(topic, VALUE)
            p.poll(0)
        assert p.flush(30) == 0
        meter, stop = Meter(), threading.Event()
        fetches = {"fetch.max.bytes": 150_000, "max.partition.fetch.bytes": 150_000, "message.max.bytes": 150_000}
        t = threading.Thread(target=consume_loop, args=(proxy.address, topic, "big-share", meter, stop, fetches))
        t.start()
        time.sleep(20)  # the measured window: the bursts below are what it delivered in it
        stop.set()
        t.join(30)
        runs = bursts(meter.events, gap=0.3)
        assert len(runs) >= 5, runs
        assert window / 10 < min(n for _, n in runs) < window, runs  # within the window, over a tenth
        # Bytes delivered before the last burst, over the time they took.
        rate = sum(n for _, n in runs[:-1]) / (runs[-1][0] - runs[0][0])
        assert 0.8 * quota <= rate <= 1.2 * quota, (rate, runs)


def test_client_ignoring_throttle_time_is_held_to_its_quota_by_the_mute(broker):
    """kafka-python told it talks to a 1.0 broker ignores throttle_time_ms (client-side
    throttling is for 2.0+ brokers, KIP-219): only the proxy's mute slows it, and its long-run
    produce rate tracks the quota."""
    import kafka

    quota = 200_000
    with quota_proxy(broker, [({"client-id": "old-client"}, {"producer_byte_rate": quota})]) as (
            qm, proxy):
        topic = make_topic(proxy.address)
        p = kafka.KafkaProducer(bootstrap_servers=proxy.address, client_id="old-client", api_version=(1, 0),
                                linger_ms=5, batch_size=16384)
        meter, pending = Meter(), []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:
            f = p.send(topic, VALUE)
            f.add_callback(lambda _md: meter.add(len(VALUE)))
            pending.append(f)
            if len(pending) > 200:  # kafka-python buffers without bound otherwise
                pending.pop(0).get(timeout=30)
        p.close(timeout=30)
        rate = meter.rate(t0 + 2, t0 + 10)  # after the first window's burst
        assert 0.8 * quota <= rate <= 1.2 * quota, rate
        assert qm.measured_rate(kquota.ClientQuotaType.PRODUCE, "ANONYMOUS", "old-client") > 0


def test_pipelined_produce_requests_do_not_overtake_a_throttle(broker):
    """Kafka reads a connection's next request only after answering the previous one, so a
    request sent behind one that will be throttled waits out that throttle. librdkafka pipelines
    its Produce requests: sent at once, they must not all pass before the first answer's throttle
    (Debian's kcat, librdkafka 2.0, once wrote 4 MB past a 200 KB/s quota in 63 ms this way)."""
    quota, size, count = 200_000, 250_000, 6
    with quota_proxy(broker, [({"client-id": "pipeliner"}, {"producer_byte_rate": quota})]) as (
            qm, proxy):
        topic = make_topic(proxy.address)
        p = Producer({"bootstrap.servers": proxy.address, "client.id": "pipeliner", "linger.ms": 0,
                      "batch.num.messages": 1, "max.in.flight": 100, "enable.idempotence": False})
        p.list_topics(topic, timeout=10)  # connected to the leader before the burst
        acked: list[float] = []
        t0 = time.monotonic()
        for _ in range(count):
            p.produce(topic, b"p" * size, on_delivery=lambda err, _m: acked.append(time.monotonic()) if not err else None)
        assert p.flush(60) == 0 and len(acked) == count
        # Past the window's allowance, the quota paces what follows: the answers span at least
        # half the time the quota takes for it (pipelined past the throttle: ~0.1 s).
        allowance = quota * (WINDOW_NUM - 1)
        floor = 0.5 * (count * size - allowance) / quota
        assert acked[-1] - t0 >= floor, (acked[-1] - t0, floor)
        assert qm.measured_rate(kquota.ClientQuotaType.PRODUCE, "ANONYMOUS", "pipeliner") > 0
