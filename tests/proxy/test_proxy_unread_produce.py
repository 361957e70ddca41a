"""A Produce the broker appended is recorded even when its client reset before the answer.

The attack: a producer sends a large Produce (acks=1) and resets its connection (SO_LINGER 0)
as soon as the request is out, before the broker answers, then produces again on a new
connection. Kafka records a Produce when the broker has appended it, whether or not the
channel is still there to send the answer on; a proxy that dropped the answer with the
connection would never charge those bytes, and the producer would get its quota over again with
every reset. The broker here (a fake: Kafka's broker cannot be told to hold an answer) holds its
first answer until it has seen whether the proxy keeps the broker connection open for it (a proxy
that gave the answer up closes it)."""

from __future__ import annotations

import pytest
import socket
import struct
import threading
from typing import Any

import kquota
from kquota.kafka.protocol.codec import decode_body, encode_body
from kquota.kafka.protocol.frames import parse_request_header, response_body_offset, response_frame
from proxy_fakes import LoopbackServer, read_frame
from proxy_support import ProxyThread
from proxy_wire import Wire
from waiting import wait_until

pytestmark = pytest.mark.timing

QUOTA = 50_000.0  # B/s
# 8 s of quota: under the 10 s window, so one such request alone throttles no one and the
# proxy reads on (it sees the reset at once); two of them are 16 s of quota, a 6 s throttle.
RECORDS = 400_000
PRODUCE_V = 9


def _produce_body(records: int) -> bytes:
    return bytes(encode_body("ProduceRequest", PRODUCE_V, {
        "TransactionalId": None, "Acks": 1, "TimeoutMs": 30_000,
        "TopicData": [{"Name": "t", "PartitionData": [{"Index": 0, "Records": b"r" * records}]}]}))


class HeldAnswerBroker:
    """Answers Produce; the first Produce's answer is held until the proxy has had 2 s to drop
    the broker connection (``abandoned``: it did, the answer is never sent)."""

    def __init__(self) -> None:
        self.first_produce = threading.Event()
        self.abandoned = False
        self.answered = 0
        self._lock = threading.Lock()
        self._server = LoopbackServer(self._serve)
        self.port = self._server.port

    def _serve(self, client: socket.socket) -> None:
        while (frame := read_frame(client)) is not None:
            h = parse_request_header(frame)
            if h.api_key != 0:
                return
            with self._lock:
                first = not self.first_produce.is_set()
                self.first_produce.set()
            if first:
                client.settimeout(2.0)
                try:
                    if client.recv(1) == b"":
                        self.abandoned = True
                        return
                except socket.timeout:
                    pass
                client.settimeout(None)
            body = encode_body("ProduceResponse", h.api_version, {
                "Responses": [{"Name": "t", "PartitionResponses": [{"Index": 0, "ErrorCode": 0, "BaseOffset": 5}]}],
                "ThrottleTimeMs": 0})
            client.sendall(response_frame(h.correlation_id, h.api_key, h.api_version, body))
            with self._lock:
                self.answered += 1

    def stop(self) -> None:
        self._server.stop()


def _answer(w: Wire) -> dict[str, Any]:
    frame = w.read_frame()
    assert struct.unpack_from(">i", frame)[0] == w.corr
    return decode_body("ProduceResponse", PRODUCE_V, frame, response_body_offset(frame, 0, PRODUCE_V))


def test_a_produce_whose_client_reset_is_recorded_and_throttles_the_next():
    broker = HeldAnswerBroker()
    qm = kquota.QuotaManager(window_num=11, window_size_seconds=1)
    qm.alter_client_quotas([({"client-id": "resetter"}, {"producer_byte_rate": QUOTA})])
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        address = proxy.proxy.bootstrap_address
        first = Wire(address, client_id="resetter")
        frame = first.frame(0, PRODUCE_V, _produce_body(RECORDS))
        first.send_raw(frame)
        assert broker.first_produce.wait(10), "the broker never got the Produce"
        # Reset (RST, not FIN): the client is gone before the broker answers.
        first.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        first.close()
        wait_until(lambda: broker.answered >= 1 or broker.abandoned, timeout=15)
        assert not broker.abandoned, "the proxy dropped the broker connection with the Produce unanswered"
        # The sensor holds the appended bytes: the whole request over the 10 s window (at least).
        wait_until(lambda: qm.measured_rate("PRODUCE", "ANONYMOUS", "resetter") > 0, timeout=10)
        rate = qm.measured_rate("PRODUCE", "ANONYMOUS", "resetter")
        assert len(frame) / 12 <= rate <= len(frame) / 10, rate
        # The next producer under the same principal and client id is charged with it: its
        # Produce of the same size is throttled for the two (without the first: for nothing).
        second = Wire(address, client_id="resetter")
        try:
            second.send_raw(second.frame(0, PRODUCE_V, _produce_body(RECORDS)))
            answer = _answer(second)
        finally:
            second.close()
        assert 4_000 < answer["ThrottleTimeMs"] <= 6_500, answer
    finally:
        proxy.stop()
        qm.close()
        broker.stop()
