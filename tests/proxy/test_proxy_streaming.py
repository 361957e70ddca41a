"""Cut-through streaming of large frames by the data plane, against Apache Kafka with real clients:
large Produce batches of every compression type and large Fetch responses relayed intact, a
throttled large fetch still answered empty and muted (with the session Kafka's throttled answer
keeps), NodeEndpoints rewritten in a streamed Fetch response, and malformed streamed requests
closing only their connection."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time

import kquota
import pytest
from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import decode_body, encode_body
from proxy_support import ProxyThread, consume_assigned, make_topic
from proxy_wire import Wire, fetch_until_throttled, fetch_v12

from confluent_kafka import Producer
from waiting import wait_until_async

pytestmark = pytest.mark.timing

PROXY_HOST = "127.0.0.1"


def _fetch_body(hosts: list[str], records: bytes) -> dict:
    body = {"ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 7,
            "Responses": [{"TopicId": bytes(range(16)), "Partitions": [{
                "PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 1, "LastStableOffset": 1,
                "LogStartOffset": 0, "AbortedTransactions": None, "PreferredReadReplica": -1,
                "Records": records}]}],
            "NodeEndpoints": [{"NodeId": i, "Host": h, "Port": 9092 + i, "Rack": None} for i, h in enumerate(hosts)]}
    return body


# ---------------------------------------------------------------------------- with Kafka


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_large_batches_streamed_intact_each_compression(proxy, codec):
    """~1 MB batches of incompressible values: requests streamed to the broker, the large
    Fetch responses (librdkafka: v16, tail held for NodeEndpoints) streamed back, all intact."""
    topic = make_topic(proxy.address)
    requests, responses = proxy.proxy.streamed_requests, proxy.proxy.streamed_responses
    p = Producer({"bootstrap.servers": proxy.address, "compression.type": codec, "linger.ms": 200,
                  "batch.size": 1_000_000, "batch.num.messages": 100_000})
    sent = [(b"k%d" % i, os.urandom(1000 + i % 500)) for i in range(3000)]
    for key, value in sent:
        p.produce(topic, key=key, value=value)
    assert p.flush(30) == 0
    assert proxy.proxy.streamed_requests > requests
    assert [(k, v) for k, v, _ in consume_assigned(proxy.address, topic, len(sent), timeout=30.0)] == sent
    assert proxy.proxy.streamed_responses > responses


def test_aiokafka_consumes_streamed_fetches(proxy, broker):
    aiokafka = pytest.importorskip("aiokafka")
    topic = make_topic(broker.address)
    p = Producer({"bootstrap.servers": broker.address, "linger.ms": 50, "compression.type": "lz4"})
    sent = [os.urandom(1000) for _ in range(2000)]
    for v in sent:
        p.produce(topic, value=v)
    assert p.flush(20) == 0
    responses = proxy.proxy.streamed_responses

    async def run() -> list:
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=proxy.address, enable_auto_commit=False)
        await c.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got: list = []

            async def read() -> bool:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got.extend(m.value for m in msgs)
                return len(got) >= len(sent)

            await wait_until_async(read, 30)
            return got
        finally:
            await c.stop()

    assert asyncio.run(run()) == sent
    assert proxy.proxy.streamed_responses > responses


def _slow_fetches(broker, quota: int):
    """(topic of ~150 KB, manager with a fetch quota on client-id "slow", proxy in front)."""
    topic = make_topic(broker.address)
    p = Producer({"bootstrap.servers": broker.address, "linger.ms": 20})
    for _ in range(150):
        p.produce(topic, value=os.urandom(1000))
    assert p.flush(20) == 0
    qm = kquota.QuotaManager()  # 11 windows of 1 s: the quota window holds 10 s of the quota
    qm.alter_client_quotas([({"client-id": "slow"}, {"consumer_byte_rate": quota})])
    return topic, qm, ProxyThread(("127.0.0.1", broker.port), qm=qm)


def test_throttled_large_fetch_answered_empty_and_muted(broker):
    """A streamed (large) Fetch response over the quota, yet at most a tenth of the quota
    window's bytes, is answered as Kafka does: empty, with the throttle, its bytes unrecorded;
    the connection is muted, and stays in step with the broker (the rest of the response was
    discarded)."""
    topic, qm, px = _slow_fetches(broker, 160_000)  # window 1.6 MB; ~151 KB answers
    try:
        fast = Wire(px.proxy.bootstrap_address, client_id="fast")
        resp, _ = fetch_v12(fast, topic)
        records = bytes(resp["Responses"][0]["Partitions"][0]["Records"])
        assert len(records) > 140_000 and resp["ThrottleTimeMs"] == 0
        assert px.proxy.streamed_responses == 1

        slow = Wire(px.proxy.bootstrap_address, client_id="slow")
        # Ten fit the window (1.51 MB over 10 s: 151 KB/s); the eleventh would make it 166 KB/s.
        delivered, resp = fetch_until_throttled(slow, topic, 15)
        assert len(delivered) == 10 and all(r["Responses"] for r in delivered)
        assert px.proxy.streamed_responses == 12
        assert resp["Responses"] == [] and resp["ThrottleTimeMs"] > 0
        assert qm.measured_rate(kquota.ClientQuotaType.FETCH, "ANONYMOUS", "slow") < 160_000  # unrecorded
        t0 = time.monotonic()
        md = slow.call(apis.METADATA, 4, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False})
        assert time.monotonic() - t0 >= 0.8 * resp["ThrottleTimeMs"] / 1000  # muted meanwhile
        assert md["Brokers"]
        fast.close()
        slow.close()
    finally:
        px.stop()
        qm.close()


def test_throttled_fetch_over_a_tenth_of_the_window_delivered_and_muted(broker):
    """Over the quota and over a tenth of the quota window (kquota.fetch_answer): delivered
    whole with the throttle, kept recorded, and muted for at least the time the quota takes to
    allow it; Kafka's empty answer would leave most of the window unused."""
    topic, qm, px = _slow_fetches(broker, 50_000)  # window 500 KB; ~151 KB answers
    try:
        slow = Wire(px.proxy.bootstrap_address, client_id="slow")
        # Three fit the window (453 KB over 10 s); the fourth would make it 60 KB/s.
        delivered, resp = fetch_until_throttled(slow, topic, 6)
        assert len(delivered) == 3
        records = bytes(resp["Responses"][0]["Partitions"][0]["Records"])
        assert records == bytes(delivered[0]["Responses"][0]["Partitions"][0]["Records"])
        assert resp["ThrottleTimeMs"] >= 1000 * len(records) / 50_000  # size / quota
        assert qm.measured_rate(kquota.ClientQuotaType.FETCH, "ANONYMOUS", "slow") > 50_000  # kept
        t0 = time.monotonic()
        md = slow.call(apis.METADATA, 4, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False})
        assert time.monotonic() - t0 >= 0.8 * resp["ThrottleTimeMs"] / 1000  # muted meanwhile
        assert md["Brokers"]
        slow.close()
    finally:
        px.stop()
        qm.close()


# ---------------------------------------------------------------------------- NodeEndpoints in flight


class _OneFetchBroker:
    """Answers every request on its port with a crafted Fetch v16 response (same correlation id):
    no Kafka broker at hand sends NodeEndpoints, so this drives the proxy's held-tail path."""

    def __init__(self, body: dict) -> None:
        self.body = body
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from kquota.kafka.protocol.frames import response_frame

        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                corr = int.from_bytes((await reader.readexactly(size))[4:8], "big")
                frame = response_frame(corr, apis.FETCH, 16, encode_body("FetchResponse", 16, self.body))
                for i in range(0, len(frame), 50_000):  # in pieces, as a network would
                    writer.write(frame[i:i + 50_000])
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.mark.parametrize("host", ["broker-5.cluster.internal", "b"])
def test_streamed_fetch_node_endpoints_rewritten_in_flight(host):
    """A 300 KB Fetch v16 response naming a broker: streamed to the client with its length kept,
    records intact, NodeEndpoints naming the proxy's port for that broker (or, when the proxy's
    address is the longer one, absent) — never the broker's."""
    records = os.urandom(300_000)
    body = _fetch_body([host], records=records)
    body["NodeEndpoints"][0]["NodeId"] = 5
    fake = _OneFetchBroker(body)
    loop = asyncio.new_event_loop()
    port = loop.run_until_complete(fake.start())
    import threading

    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    px = ProxyThread(("127.0.0.1", port))
    try:
        w = Wire(px.proxy.bootstrap_address, client_id="c")
        request = {"MaxWaitMs": 100, "MinBytes": 1, "MaxBytes": 50_000_000, "IsolationLevel": 0,
                   "SessionId": 0, "SessionEpoch": -1, "ForgottenTopicsData": [], "RackId": "",
                   "Topics": [{"TopicId": bytes(range(16)), "Partitions": [{
                       "Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0, "LastFetchedEpoch": -1,
                       "LogStartOffset": -1, "PartitionMaxBytes": 10_000_000}]}]}
        w.send_raw(w.frame(apis.FETCH, 16, bytes(encode_body("FetchRequest", 16, request))))
        frame = w.read_frame()
        expected = len(encode_body("FetchResponse", 16, body)) + 5  # correlation id + header tags
        assert len(frame) == expected
        assert px.proxy.streamed_responses == 1
        decoded = decode_body("FetchResponse", 16, frame, 5)
        assert bytes(decoded["Responses"][0]["Partitions"][0]["Records"]) == records
        # The top-level tagged fields start where they would without NodeEndpoints (the length
        # is kept, the fields before them are the broker's).
        untagged = {k: v for k, v in body.items() if k != "NodeEndpoints"}
        section = frame[5 + len(encode_body("FetchResponse", 16, untagged)) - 1:]
        assert section[:1] != b"\x00"  # a non-empty tagged section: NodeEndpoints or the padding
        assert host.encode() not in section
        if len(host) >= len(PROXY_HOST):
            assert [(n["NodeId"], n["Host"], n["Port"]) for n in decoded["NodeEndpoints"]] == [
                (5, PROXY_HOST, px.proxy.broker_ports[5])]
        else:
            assert "NodeEndpoints" not in decoded
        w.close()
    finally:
        px.stop()
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)


@pytest.mark.parametrize("epoch,session", [(-1, 0), (0, 77), (5, 77)])
def test_throttled_empty_fetch_answer_keeps_the_brokers_session(epoch, session):
    """Kafka's throttled Fetch answer (``FetchContext.getThrottledResponse``) is empty: a
    sessionless fetch (epoch -1) gets no session id; an incremental one keeps its session, and a
    full one (epoch 0) the session the broker has just created for it (the proxy cannot stop the
    broker from creating it), so the client goes on incrementally instead of opening a session
    per throttled fetch. The broker here answers every Fetch with session 77 and a few records."""
    body = _fetch_body([], records=b"r" * 10)
    del body["NodeEndpoints"]
    body["SessionId"] = 77
    fake = _OneFetchBroker(body)  # 82-byte answers: a tenth of the quota window at most
    loop = asyncio.new_event_loop()
    port = loop.run_until_complete(fake.start())
    import threading

    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    qm = kquota.QuotaManager()  # 11 windows of 1 s: a 2,000-byte quota window at 200 B/s
    qm.alter_client_quotas([({"client-id": "s"}, {"consumer_byte_rate": 200})])
    px = ProxyThread(("127.0.0.1", port), qm=qm)
    try:
        w = Wire(px.proxy.bootstrap_address, client_id="s")
        request = {"MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": 1000, "IsolationLevel": 0, "SessionId": 77,
                   "SessionEpoch": epoch, "Topics": [], "ForgottenTopicsData": [], "RackId": ""}
        delivered = 0
        for _ in range(60):  # over the quota after some 25 answers
            resp = w.call(apis.FETCH, 16, "Fetch", request)
            if resp["ThrottleTimeMs"] > 0:
                break
            assert resp["Responses"] and resp["SessionId"] == 77  # the broker's answer, as it is
            delivered += 1
        assert delivered >= 10
        # Kafka's empty answer (not the broker's, delivered with the throttle).
        assert resp["ThrottleTimeMs"] > 0 and resp["Responses"] == [] and resp["ErrorCode"] == 0
        assert resp["SessionId"] == session
        w.close()
    finally:
        px.stop()
        qm.close()
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)


# ---------------------------------------------------------------------------- malformed streamed frames


def _produce_head(topic: str, total: int, transactional_id: bytes = b"") -> bytes:
    """The beginning of a Produce v9 frame announcing ``total`` bytes (records cut short)."""
    head = struct.pack(">hhih", 0, 9, 1, 1) + b"c" + b"\x00"
    body = bytes([len(transactional_id) + 1]) + transactional_id + struct.pack(">hi", 1, 30000)
    body += b"\x02" + bytes([len(topic) + 1]) + topic.encode() + b"\x02" + struct.pack(">i", 0)
    return struct.pack(">i", total) + head + body + b"\x00" * 1000


@pytest.mark.parametrize("case", ["closed mid-frame", "header past the head", "garbage head"])
def test_malformed_streamed_request_closes_only_its_connection(proxy, broker, case):
    topic = make_topic(broker.address)
    good = Wire(proxy.proxy.bootstrap_address)
    assert good.call(apis.METADATA, 1, "Metadata", {"Topics": None})["Brokers"]
    bad = Wire(proxy.proxy.bootstrap_address)
    if case == "closed mid-frame":
        bad.send_raw(_produce_head(topic, 500_000))  # streamed: head forwarded, then the client goes
        bad.sock.shutdown(socket.SHUT_WR)
    elif case == "header past the head":
        # A client id longer than the head read first: the whole frame is read, then rejected
        # as the truncated Produce it is.
        client_id = b"x" * 20_000
        frame = struct.pack(">hhih", 0, 9, 1, len(client_id)) + client_id + b"\x00\x01"
        bad.send_raw(struct.pack(">i", len(frame) + 70_000) + frame + b"\xff" * 70_000)
    else:
        bad.send_raw(struct.pack(">i", 100_000) + b"\xff" * 100_000)
    assert bad.closed_by_peer()
    assert good.call(apis.METADATA, 1, "Metadata", {"Topics": None})["Brokers"]
    again = Wire(proxy.proxy.bootstrap_address)
    assert again.call(apis.METADATA, 1, "Metadata", {"Topics": None})["Brokers"]
    for w in (good, bad, again):
        w.close()


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _walked_produce(case: str) -> tuple[bytes, bool]:
    """A streamed Produce v9 frame (over 64 KiB) for ``case``, and whether the client goes away
    before its end (the frame then announces more than is sent)."""
    head = struct.pack(">hhih", 0, 9, 1, 1) + b"c" + b"\x00"
    body = b"\x00" + struct.pack(">hi", 1, 30000)  # null TransactionalId, acks=1, TimeoutMs
    total, cut = 200_000, False
    if case == "more topics than bytes":
        body += _uvarint(10**9 + 1)
    elif case == "a topic name longer than the frame":
        body += b"\x02" + _uvarint(2**31)
    else:
        body += b"\x02" + _uvarint(len(b"walked") + 1) + b"walked" + b"\x02" + struct.pack(">i", 0)
        if case == "records longer than the frame":
            body += _uvarint(10_000_000 + 1)
        else:  # "closed inside the records": a true length, the bytes never sent
            body += _uvarint(total - len(head) - len(body) - 5 + 1)
            cut = True
    frame = head + body
    frame += b"\x00" * ((100_000 if cut else total) - len(frame))
    return struct.pack(">i", total) + frame, cut


@pytest.mark.parametrize("case", ["records longer than the frame", "closed inside the records",
                                  "a topic name longer than the frame", "more topics than bytes"])
def test_a_streamed_produce_walked_for_topic_quotas_that_lies_closes_only_its_connection(broker, case):
    """An attack on the walk that reads a large Produce's topics while it streams to the broker
    (on while a produce topic quota exists): lengths the frame never sends. The walk never reads
    past its frame (which would take the client's next request for records): the connection is
    closed, others are served, nothing is recorded to a topic."""
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"topic": None}, {"producer_byte_rate": 1e9})])
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        good = Wire(proxy.proxy.bootstrap_address)
        assert good.call(apis.METADATA, 1, "Metadata", {"Topics": None})["Brokers"]
        bad = Wire(proxy.proxy.bootstrap_address)
        frame, cut = _walked_produce(case)
        if not cut:  # a request behind it that the walk must not take for records
            frame += struct.pack(">i", 12) + struct.pack(">hhih", 18, 0, 99, 0) + b"\x00" * 2
        try:
            bad.send_raw(frame)
            if cut:
                bad.sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed by the proxy before all was sent: the lie was seen early
        # At once: a request the broker never got whole is answered by no one, so the end of the
        # session waits for no answer to it (not the 5 s drain time).
        assert bad.closed_by_peer(timeout=2.5)
        assert good.call(apis.METADATA, 1, "Metadata", {"Topics": None})["Brokers"]
        assert qm._topics().sensor_stats(kquota.ClientQuotaType.PRODUCE) == (0, 0)  # (live, overflowed)
        for w in (good, bad):
            w.close()
    finally:
        proxy.stop()
        qm.close()
