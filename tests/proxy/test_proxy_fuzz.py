"""Mutation fuzzing of the proxy from real clients' frames.

The corpus is what librdkafka (producer, consumer, admin), kafka-python and aiokafka really send
to tansu, captured by a recording relay, plus the requests no installed client sends (SASL,
client quotas, strict KIP-599 mutations) built with the proxy's codec. Each case mutates one
frame (bit flips, interesting integers, truncation, insertion, another version or API key, a
wrong size prefix) and sends it on a fresh connection, sometimes behind valid requests. The
broker side is fuzzed too: a relay in front of tansu garbles a share of its answers.

The proxy must close only the connections that sent (or were answered) garbage: it stays up,
keeps answering, and logs nothing as an internal error.

On tansu, not Apache Kafka: the recording and garbling relays need a broker that advertises the
relay's port (the session's Kafka broker advertises its own, so clients would go around them), and
the mutated requests reach the broker as ANONYMOUS, a super user of that shared broker, where a
mutation could as well delete its ACLs or SCRAM users or other tests' topics. The first runs of this fuzzer found
six such bugs (see ``test_proxy_protocol``, ``test_proxy_endpoints``, ``test_proxy_streaming``
and ``test_proxy_codec``). The seeds are fixed, so a run is repeatable up to timing;
``KQUOTA_FUZZ_SEED`` and ``KQUOTA_FUZZ_CASES`` (a multiplier) explore further.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import struct
import threading
import uuid

import pytest
from kquota.kafka.protocol.codec import encode_body
from proxy_fakes import LoopbackServer, read_frame
from proxy_support import ProxyThread, Tansu, make_topic
from waiting import free_port, wait_until

pytestmark = pytest.mark.process

_I32 = struct.Struct(">i")
INTERESTING16 = (0, 1, -1, 0x7FFF, -0x8000, 0x100)
INTERESTING32 = (0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x10000, 0x7FFFFFF0, 64 << 20)
API_KEYS = (0, 1, 3, 8, 9, 10, 17, 18, 19, 20, 36, 37, 48, 49, 60)
SEED = int(os.environ.get("KQUOTA_FUZZ_SEED", "0"))
SCALE = max(1, int(os.environ.get("KQUOTA_FUZZ_CASES", "1")))


def _read_frame(sock: socket.socket) -> bytes:
    frame = read_frame(sock)
    if frame is None:
        raise EOFError("closed")
    return frame


def _shutdown(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Relay:
    """A loopback relay in front of tansu (which advertises the relay's port): ``on_request``
    sees each request frame; ``garble(frame)`` may replace each answer."""

    def __init__(self, on_request=None, garble=None) -> None:
        self.port = free_port()
        self.broker = Tansu(advertised_port=self.port)
        self.on_request = on_request
        self.garble = garble
        self._server = LoopbackServer(self._serve, self.port)

    def _serve(self, client: socket.socket) -> None:
        try:
            up = socket.create_connection(("127.0.0.1", self.broker.port))
        except OSError:
            client.close()
            return
        threading.Thread(target=self._answers, args=(up, client), daemon=True).start()
        try:
            while True:
                frame = _read_frame(client)
                if self.on_request:
                    self.on_request(frame)
                up.sendall(_I32.pack(len(frame)) + frame)
        except (OSError, EOFError, struct.error):
            pass
        _shutdown(up, client)

    def _answers(self, up: socket.socket, client: socket.socket) -> None:
        try:
            while True:
                frame = _read_frame(up)
                out = self.garble(frame) if self.garble else _I32.pack(len(frame)) + frame
                client.sendall(out)
        except (OSError, EOFError, struct.error):
            pass
        _shutdown(up, client)

    def stop(self) -> None:
        self._server.stop()
        self.broker.stop()


def _synthetic() -> list[bytes]:
    """Requests no installed client sends, as the proxy's codec writes them."""
    def frame(api: int, version: int, body: bytes, flexible: bool) -> bytes:
        return struct.pack(">hhih", api, version, 7, 2) + b"fz" + (b"\x00" if flexible else b"") + bytes(body)

    return [
        frame(17, 1, encode_body("SaslHandshakeRequest", 1, {"Mechanism": "PLAIN"}), False),
        frame(36, 2, encode_body("SaslAuthenticateRequest", 2, {"AuthBytes": b"\x00alice\x00pw"}), True),
        frame(48, 1, encode_body("DescribeClientQuotasRequest", 1, {
            "Components": [{"EntityType": "user", "MatchType": 0, "Match": "alice"}], "Strict": False}), True),
        frame(49, 1, encode_body("AlterClientQuotasRequest", 1, {"Entries": [
            {"Entity": [{"EntityType": "user", "EntityName": "alice"}],
             "Ops": [{"Key": "producer_byte_rate", "Value": 1e6, "Remove": False}]}], "ValidateOnly": False}), True),
        frame(37, 3, encode_body("CreatePartitionsRequest", 3, {
            "Topics": [{"Name": "t", "Count": 3, "Assignments": None}], "TimeoutMs": 1000, "ValidateOnly": False}),
            True),
        frame(19, 7, encode_body("CreateTopicsRequest", 7, {
            "Topics": [{"Name": "zz", "NumPartitions": 1, "ReplicationFactor": 1, "Assignments": [], "Configs": []}],
            "timeoutMs": 1000, "validateOnly": False}), True),
        frame(20, 6, encode_body("DeleteTopicsRequest", 6, {
            "Topics": [{"Name": "zz", "TopicId": b"\x00" * 16}], "TimeoutMs": 1000}), True),
        frame(60, 0, b"\x00\x00", True),  # DescribeCluster v0
        frame(10, 4, b"\x00\x03\x03g1\x03g2\x00", True),  # FindCoordinator v4, two groups
    ]


@pytest.fixture(scope="module")
def corpus() -> list[bytes]:
    """Real clients' request frames (recorded in front of tansu) and the synthetic ones."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    frames: list[bytes] = []
    relay = _Relay(on_request=frames.append)
    address = f"127.0.0.1:{relay.port}"
    try:
        topic = make_topic(address, partitions=2)
        for compression in ("none", "zstd"):
            p = Producer({"bootstrap.servers": address, "compression.type": compression, "linger.ms": 5})
            for i in range(200):
                p.produce(topic, key=b"%d" % i, value=b"v" * 100, headers=[("h", b"x")])
            p.flush(10)
        p = Producer({"bootstrap.servers": address, "linger.ms": 20})
        for _ in range(3):
            p.produce(topic, b"B" * 100_000, partition=0)  # a request streamed through the proxy
        p.flush(10)
        c = Consumer({"bootstrap.servers": address, "group.id": "fuzz", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        got = []
        wait_until(lambda: got.extend(c.consume(500, 0.5)) or len(got) >= 300, 10, 0)
        c.close()
        admin = AdminClient({"bootstrap.servers": address})
        name = "fz-" + uuid.uuid4().hex[:8]
        for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
            f.result(10)
        for f in admin.delete_topics([name]).values():
            f.result(10)
        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=address)
        for _ in range(20):
            kp.send(topic, b"kp")
        kp.flush()
        kp.close()
        import aiokafka

        async def aio() -> None:
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=address, compression_type="lz4")
            await producer.start()
            try:
                await producer.send_and_wait(topic, b"aio")
            finally:
                await producer.stop()

        asyncio.run(aio())
    finally:
        relay.stop()
    apis_seen = {struct.unpack_from(">h", f)[0] for f in frames}
    assert {0, 1, 3, 18, 19, 20} <= apis_seen, apis_seen  # the clients' requests were captured
    return frames + _synthetic()


class _Mutator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, data: bytes) -> bytes:
        rng = self.rng
        b = bytearray(data)
        for _ in range(rng.choice((1, 1, 1, 2, 3, 5))):
            if not b:
                b = bytearray(rng.randbytes(8))
            p = rng.randrange(len(b))
            kind = rng.randrange(10)
            if kind == 0:
                b[p] ^= 1 << rng.randrange(8)
            elif kind == 1:
                b[p] = rng.randrange(256)
            elif kind == 2 and p + 2 <= len(b):
                b[p:p + 2] = struct.pack(">h", rng.choice(INTERESTING16))
            elif kind == 3 and p + 4 <= len(b):
                b[p:p + 4] = struct.pack(">i", rng.choice(INTERESTING32))
            elif kind == 4:
                del b[p:]
            elif kind == 5:
                b[p:p] = rng.randbytes(rng.randrange(1, 16))
            elif kind == 6:
                b[p:p] = b"\xff\xff\xff\xff\x0f"  # an over-long varint
            elif kind == 7 and len(b) >= 4:
                b[2:4] = struct.pack(">h", rng.randrange(-2, 20))  # another version
            elif kind == 8 and len(b) >= 2:
                b[0:2] = struct.pack(">h", rng.choice(API_KEYS + (rng.randrange(-1, 90),)))
            elif kind == 9:
                del b[p:p + rng.randrange(1, 64)]
        return bytes(b)


def _metadata_answered(port: int) -> bool:
    frame = struct.pack(">hhih", 3, 1, 1, 2) + b"hc" + struct.pack(">i", -1)  # Metadata v1, all topics
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(_I32.pack(len(frame)) + frame)
            return struct.unpack_from(">i", _read_frame(s))[0] == 1
    except (OSError, EOFError, struct.error):
        return False


def _send_case(port: int, frames: list[bytes], last: bytes, rng: random.Random) -> None:
    """``frames`` then ``last`` on a new connection (size prefix usually right), the answers read
    for a moment, then closed."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return
    try:
        for f in frames:
            s.sendall(_I32.pack(len(f)) + f)
        k = rng.random()
        if k < 0.9:
            size = len(last)
        elif k < 0.95:
            size = len(last) + rng.randrange(1, 1000)  # the rest never comes
        else:
            size = rng.choice((-1, 0, 1, 0x7FFFFFFF, 200 << 20))
        s.sendall(_I32.pack(size) + last)
        s.settimeout(rng.choice((0.01, 0.05, 0.2)))
        while s.recv(1 << 16):
            pass
    except OSError:
        pass
    finally:
        s.close()


def _internal_errors(caplog, capfd) -> list[str]:
    """What the proxy logged as errors, and any Rust panic (written to stderr)."""
    panics = [line for line in capfd.readouterr().err.splitlines() if "panicked" in line]
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] + panics


def test_mutated_requests_close_only_their_connection(corpus, caplog, capfd):
    """On tansu, a broker of the test's own: mutated requests pass the proxy as a super user's."""
    def fresh() -> tuple[Tansu, ProxyThread]:
        broker = Tansu()
        return broker, ProxyThread(("127.0.0.1", broker.port), admin_principals=["ANONYMOUS"])

    mutate = _Mutator(seed=15 + SEED)
    rng = mutate.rng
    broker, proxy = fresh()
    try:
        for i in range(400 * SCALE):
            frames = [rng.choice(corpus) for _ in range(rng.choice((0, 0, 1, 3)))]
            _send_case(proxy.proxy.bootstrap_address[1], frames, mutate(rng.choice(corpus)), rng)
            if i % 100 == 99 and not _metadata_answered(proxy.proxy.bootstrap_address[1]):
                # The proxy relays what it does not inspect, and some mutated requests stall
                # tansu itself (it stops answering anyone): only then may the proxy be silent.
                assert not _metadata_answered(broker.port), f"the proxy stopped answering after case {i}"
                proxy.stop()
                broker.stop()
                broker, proxy = fresh()
        assert _metadata_answered(proxy.proxy.bootstrap_address[1]) or not _metadata_answered(broker.port)
    finally:
        proxy.stop()
        broker.stop()
    assert not _internal_errors(caplog, capfd)


def test_garbled_broker_answers_close_only_their_connection(corpus, caplog, capfd):
    """On tansu, which advertises the garbling relay's port, so every answer passes the relay."""
    rng_broker = _Mutator(seed=599 + SEED)

    def garble(frame: bytes) -> bytes:
        if rng_broker.rng.random() >= 0.3:
            return _I32.pack(len(frame)) + frame
        out = rng_broker(frame)
        if rng_broker.rng.random() < 0.5:
            out = frame[:4] + out[4:]  # the right correlation id, a garbled body
        return _I32.pack(len(out)) + out

    relay = _Relay(garble=garble)
    proxy = ProxyThread(("127.0.0.1", relay.port), admin_principals=["ANONYMOUS"])
    rng = random.Random(13 + SEED)
    try:
        ports = [proxy.proxy.bootstrap_address[1]]
        for _ in range(300 * SCALE):
            frames = [rng.choice(corpus) for _ in range(rng.choice((0, 1, 3)))]
            _send_case(rng.choice(ports), frames, rng.choice(corpus), rng)
            if len(ports) == 1 and proxy.proxy.broker_ports:
                ports += list(proxy.proxy.broker_ports.values())
        assert relay.broker.proc.poll() is None
        relay.garble = None
        assert _metadata_answered(ports[0])
    finally:
        proxy.stop()
        relay.stop()
    assert not _internal_errors(caplog, capfd)
