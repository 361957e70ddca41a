"""A raw Kafka connection for requests no installed client sends (AlterClientQuotas, strict
CreateTopics) or sends unlike a test needs (a sessionless Fetch from a chosen offset): frames
built with kquota's own codec, the proxy's transcribed schemas."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import decode_body, encode_body, is_flexible
from kquota.kafka.protocol.frames import response_body_offset


def read_exact(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock`` (``ConnectionError`` if the proxy closes first)."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the proxy")
        buf += chunk
    return buf


class Wire:
    """One blocking connection speaking Kafka frames."""

    def __init__(self, address: tuple[str, int], client_id: str = "wire") -> None:
        self.sock = socket.create_connection(address, timeout=10)
        self.client_id = client_id.encode()
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, api_key: int, version: int, body: bytes) -> bytes:
        self.corr += 1
        head = struct.pack(">hhih", api_key, version, self.corr, len(self.client_id)) + self.client_id
        if is_flexible(api_key, version):
            head += b"\x00"
        return struct.pack(">i", len(head) + len(body)) + head + body

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self.exact(4))[0]
        return self.exact(size)

    def exact(self, n: int) -> bytes:
        return read_exact(self.sock, n)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def exchange(self, api_key: int, version: int, body: bytes) -> bytes:
        """Sends the request body ``body`` and reads the answer's frame (its correlation id checked)."""
        self.send_raw(self.frame(api_key, version, body))
        frame = self.read_frame()
        assert struct.unpack_from(">i", frame)[0] == self.corr
        return frame

    def call(self, api_key: int, version: int, name: str, body: dict[str, Any]) -> dict:
        """Sends ``body`` as request ``name`` and decodes the answer."""
        frame = self.exchange(api_key, version, bytes(encode_body(name + "Request", version, body)))
        return decode_body(name + "Response", version, frame, response_body_offset(frame, api_key, version))


def produce_v8(batches: dict[str, bytes]) -> bytes:
    """A Produce v8 request body (acks=1, 5 s timeout) naming each topic of ``batches`` with one
    partition (0) holding that topic's record batch (``b""``: no records)."""
    body = struct.pack(">hhi", -1, 1, 5000) + struct.pack(">i", len(batches))
    for name, batch in batches.items():
        raw = name.encode()
        body += struct.pack(">h", len(raw)) + raw + struct.pack(">i", 1) + struct.pack(">ii", 0, len(batch)) + batch
    return body


def fetch_v12(w: Wire, topic: str, offset: int = 0) -> tuple[dict, float]:
    """A sessionless Fetch v12 of ``topic``'s partition 0 from ``offset`` (up to 10 MB; 50 MB in
    all): the decoded answer, and the seconds it took."""
    t0 = time.monotonic()
    resp = w.call(apis.FETCH, 12, "Fetch", {
        "ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 50_000_000, "IsolationLevel": 0,
        "SessionId": 0, "SessionEpoch": -1, "ForgottenTopicsData": [], "RackId": "",
        "Topics": [{"Topic": topic, "Partitions": [{
            "Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": offset, "LastFetchedEpoch": -1,
            "LogStartOffset": -1, "PartitionMaxBytes": 10_000_000}]}]})
    return resp, time.monotonic() - t0


def fetched_records(resp: dict) -> bytes:
    """The records of a Fetch answer's first partition."""
    return bytes(resp["Responses"][0]["Partitions"][0]["Records"])


def fetch_until_throttled(w: Wire, topic: str, limit: int) -> tuple[list[dict], dict]:
    """The answers (:func:`fetch_v12`) before the first throttled one, and that one."""
    delivered = []
    for _ in range(limit):
        resp, _ = fetch_v12(w, topic)
        if resp["ThrottleTimeMs"] > 0:
            return delivered, resp
        delivered.append(resp)
    raise AssertionError(f"no throttle in {limit} fetches")
