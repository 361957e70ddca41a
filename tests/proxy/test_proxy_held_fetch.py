"""Fetch responses held for a consumer topic quota, against Apache Kafka: each is held until its
topics are counted (the throttle is its first field), a large one with its records waiting in
the relay's pipe as far as the pipe holds them and read past that; then delivered whole, or
dropped for Kafka's empty throttled answer, the connection in step either way. Only a large
response makes the connection's pipe."""

from __future__ import annotations

import fcntl
import os

import kquota
import pytest
from kquota.kafka.protocol import apis
from proxy_support import ProxyThread, consume_assigned, make_topic
from proxy_wire import Wire, fetch_until_throttled, fetch_v12, fetched_records

from confluent_kafka import Producer

pytestmark = pytest.mark.timing


def _produce(broker, count: int, **config) -> tuple[str, list[bytes]]:
    """A new topic holding ``count`` random values of 1000 bytes, and the values."""
    topic = make_topic(broker.address)
    p = Producer({"bootstrap.servers": broker.address, **config})
    values = [os.urandom(1000) for _ in range(count)]
    for value in values:
        p.produce(topic, value=value)
    assert p.flush(20) == 0
    return topic, values


def _in_step(w: Wire) -> None:
    assert w.call(apis.METADATA, 4, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False})["Brokers"]


def test_large_fetches_held_for_a_topic_quota_arrive_whole_and_in_step(broker):
    """A consumer topic quota: each large Fetch response is held until its topics are walked
    (the throttle is its first field), its records waiting in the relay's pipe, uncopied; then
    delivered whole. One over the quota, under a tenth of its window, is answered empty as Kafka
    answers (what was held is dropped), and the connection stays in step: a Metadata answer, then
    the next delivered Fetch equal to the broker's own answer."""
    topic, _ = _produce(broker, 150, **{"linger.ms": 20})
    direct = Wire(("127.0.0.1", broker.port))
    want = fetched_records(fetch_v12(direct, topic)[0])
    direct.close()
    assert len(want) > 140_000
    qm = kquota.QuotaManager()  # a window of 10 s: 1.6 MB, ten ~151 KB answers
    qm.alter_client_quotas([({"topic": topic}, {"consumer_byte_rate": 160_000})])
    px = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        w = Wire(px.proxy.bootstrap_address, client_id="held")
        delivered, resp = fetch_until_throttled(w, topic, 15)
        assert len(delivered) == 10 and all(fetched_records(r) == want for r in delivered)
        assert px.proxy.streamed_responses == 10  # held in the pipe, not read whole
        assert resp["Responses"] == [] and resp["ThrottleTimeMs"] > 0
        _in_step(w)
        for _ in range(30):
            resp, _ = fetch_v12(w, topic)
            if resp["Responses"]:
                break
        assert fetched_records(resp) == want
        w.close()
    finally:
        px.stop()
        qm.close()


def test_fetches_held_for_a_topic_quota_larger_than_their_pipe_arrive_whole(broker):
    """Fetch responses of ~2.6 MB held for a consumer topic quota that throttles nothing. Kafka
    sends a response's records with sendfile after its header: the socket's segments fill the
    relay's pipe (a number of page buffers, not bytes) with well under its size in it. The
    held response then goes on past the pipe, read from the socket (every byte has arrived: no
    new readiness would wake a wait for it); each arrives whole and in order, from records at
    several file offsets, the connection in step, and a consumer reads every record in time."""
    topic, sent = _produce(broker, 2600, **{"linger.ms": 20})
    direct = Wire(("127.0.0.1", broker.port))
    offsets = (0, 7, 123, 500)
    want = {offset: fetched_records(fetch_v12(direct, topic, offset)[0]) for offset in offsets}
    direct.close()
    assert len(want[0]) > 2_500_000
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"topic": None}, {"consumer_byte_rate": 1e9})])
    px = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        w = Wire(px.proxy.bootstrap_address)
        for offset in offsets:
            resp, _ = fetch_v12(w, topic, offset)
            assert resp["ThrottleTimeMs"] == 0 and fetched_records(resp) == want[offset]
        assert px.proxy.streamed_responses == len(offsets)  # held in the pipe, not read whole
        _in_step(w)
        w.close()
        got = consume_assigned(px.address, topic, len(sent), timeout=30.0,
                               config={"max.partition.fetch.bytes": 10_000_000})
        assert [v for _, v, _ in got] == sent
    finally:
        px.stop()
        qm.close()


def _relay_pipes() -> set[int]:
    """The pipes of this process as large as the proxy's relay makes them (1 MiB), by inode."""
    pipes = set()
    for fd in os.listdir("/proc/self/fd"):
        path = f"/proc/self/fd/{fd}"
        try:
            if not os.readlink(path).startswith("pipe:"):
                continue
            own = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue  # closed meanwhile
        try:
            if fcntl.fcntl(own, fcntl.F_GETPIPE_SZ) == 1 << 20:
                pipes.add(os.fstat(own).st_ino)
        finally:
            os.close(own)
    return pipes


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux: the relay's pipe")
def test_small_fetches_under_a_topic_quota_make_no_pipe(broker):
    """A consumer topic quota holds only a large Fetch response's records in the relay's pipe:
    connections fetching small responses (read whole) make none."""
    topic, _ = _produce(broker, 20)
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"topic": None}, {"consumer_byte_rate": 1e9})])
    px = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        before = _relay_pipes()
        conns = [Wire(px.proxy.bootstrap_address) for _ in range(4)]
        for w in conns:
            assert 20_000 < len(fetched_records(fetch_v12(w, topic)[0])) < 64 << 10
        assert _relay_pipes() - before == set()
        for w in conns:
            w.close()
    finally:
        px.stop()
        qm.close()
