"""The request contract between the proxy's data plane and the request handlers of
:mod:`kquota.proxy.handlers`: a request awaiting its answer (:class:`Pending`), what a handler
makes of a response (an :data:`Answer`, through a :data:`ResponseHandler`), and what handlers
use of a connection besides ordering (:class:`RequestPaths`). The native plane's
:class:`kquota.proxy.bridge.BridgeConnection` implements it; no socket lives here."""

from __future__ import annotations

import struct
import time
from collections.abc import Awaitable
from typing import Any, Callable, Optional

from kquota.quota_type import ClientQuotaType
from kquota.kafka.protocol.codec import CodecError, decode_body
from kquota.kafka.protocol.frames import RequestHeader, response_body_offset, with_prefix

_I32 = struct.Struct(">i")
#: (bytes to send or None, throttle in ms to mute for after sending).
Answer = tuple[Any, int]
ResponseHandler = Callable[["Pending", bytes], Awaitable[Answer]]


class Pending:
    """A request awaiting its answer; ``ns`` is the proxy time spent on it so far,
    ``on_response`` set once it is forwarded."""

    __slots__ = ("header", "ns", "on_response")

    def __init__(self, header: RequestHeader, ns: int) -> None:
        self.header = header
        self.on_response: Optional[ResponseHandler] = None
        self.ns = ns


class RequestPaths:
    """What the request handlers use of a connection besides ordering: the quota handle of
    (user, client-id), the request quota's response step on proxy time, the unparsed response
    path and broker addresses. A connection sets ``server``, ``user``, ``_plane`` (the native
    plane), ``_handle`` and ``_handle_key``."""

    server: Any
    user: str
    _plane: Any
    _handle: Any
    _handle_key: tuple[str, str]

    def handle(self, client_id: str) -> Any:
        """The quota handle of (user, client-id), cached for the connection."""
        key = (self.user, client_id)
        if key != self._handle_key:
            self._handle = self.server.qm.client(self.user, client_id)
            self._handle_key = key
        return self._handle

    def learn_topic_ids(self, pairs: list[tuple[bytes, str]]) -> None:
        """Teaches the native plane ``(topic id, name)`` pairs of a Metadata response (bounded
        there; the Fetch topic quotas name topics by id from Fetch v13)."""
        self._plane.learn_topic_ids(pairs)

    def request_throttle(self, p: Pending) -> int:
        """The request quota's response step on the proxy time of a request (KIP-124 on proxy
        time: recorded, throttle enforced and recorded as the native relayed path does; no API is
        exempt through the proxy, see ``apis.REQUEST_QUOTA_EXEMPT``); returns the throttle."""
        h = p.header
        throttle, _ = self.handle(h.client_id).request_response(p.ns)
        self.server.log_request(self, h.client_id, ClientQuotaType.REQUEST, p.ns)
        return int(throttle)

    def mutation_throttle(self, p: Pending, mutation_throttle_ms: int) -> int:
        """The response step of a KIP-599 request (CreateTopics, DeleteTopics, CreatePartitions):
        its proxy time recorded, combined with the controller-mutation throttle its mutations
        gave, the enforced one recorded (the kernel's rule, as Kafka's
        ``sendResponseMaybeThrottleWithControllerQuota``); returns the throttle."""
        h = p.header
        throttle, _ = self.handle(h.client_id).mutation_response(mutation_throttle_ms, p.ns)
        self.server.log_request(self, h.client_id, ClientQuotaType.REQUEST, p.ns)
        return int(throttle)

    def throttled(self, p: Pending, data: bytes, throttle_ms: int) -> bytes:
        """The answer ``data`` (a whole response frame, size prefix included) with its
        ``ThrottleTimeMs`` raised to ``throttle_ms`` if lower: the native plane's rule for every
        response (``ProxyDataPlane.raise_throttle``). A response version not beginning with the
        field is unchanged (the mute after it still applies)."""
        if throttle_ms <= 0:
            return data
        h = p.header
        try:
            return self._plane.raise_throttle(data, h.api_key, h.api_version, throttle_ms)
        except ValueError as e:
            raise CodecError(f"api key {h.api_key} v{h.api_version} response: {e}") from None

    async def plain_response(self, p: Pending, frame: bytes) -> Answer:
        """Any response the proxy relays unparsed: only the request quota's throttle is added."""
        throttle = self.request_throttle(p)
        if throttle > 0:
            return self.throttled(p, with_prefix(frame), throttle), throttle
        return (_I32.pack(len(frame)), frame), 0

    async def resolve(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """The proxy address standing for a broker (its listener opens on first use); a port no
        TCP address has is a malformed answer (``CodecError``), as on the native paths."""
        if not 0 <= port <= 0xFFFF:
            raise CodecError(f"broker {node_id}: port {port} out of range")
        return await self.server.broker_listener(node_id, host, port)


def elapsed(p: Pending, t0: int) -> None:
    """Charges the handler time since ``t0`` (``perf_counter_ns``) to the request."""
    p.ns += time.perf_counter_ns() - t0


async def forward_decoded(conn: Any, p: Pending, frame: bytes, t0: int, schema: str,
                          finish: Callable[[dict], Answer]) -> None:
    """Forwards ``frame``; the broker's whole answer is decoded as ``schema`` (its time charged
    to the request) and ``finish(body)`` makes the client's answer."""
    h = p.header

    async def on_response(p: Pending, frame: bytes) -> Answer:
        t1 = time.perf_counter_ns()
        body = decode_body(schema, h.api_version, frame, response_body_offset(frame, h.api_key, h.api_version))
        elapsed(p, t1)
        return finish(body)

    elapsed(p, t0)
    await conn.forward(p, frame, on_response)
