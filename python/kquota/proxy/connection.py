"""One client connection: its own broker connection, requests relayed in order, quotas applied.

Three tasks per connection: the request reader (client -> broker), the response reader
(broker -> client, matching responses to requests in order, as Kafka answers in order on a
connection) and the writer (answers leave in request order, whether the broker or the proxy
produced them). A throttled answer mutes the connection afterwards (KIP-219): the reader takes
no further request until the throttle has passed. At most ``max_inflight`` requests wait for
answers, and the streams' own flow control stops reading from a side whose peer is not
reading: memory per connection stays bounded both ways.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable
from typing import Any, Callable, Optional

from kquota.quota_type import ClientQuotaType
from kquota.proxy import apis, sasl
from kquota.proxy.codec import CodecError
from kquota.proxy.frames import (
    RequestHeader,
    parse_request_header,
    read_frame,
    response_body_offset,
    response_correlation_id,
)
from kquota.proxy.throttle import patch_throttle

log = logging.getLogger("kquota.proxy")
_I32 = struct.Struct(">i")
#: Frames shorter than this are joined to their size prefix (one send); longer ones are not copied.
_JOIN_BELOW = 65536
#: acks=0 correlation ids remembered per connection (in case the broker answers them anyway).
_MAX_UNANSWERED = 4096

#: (bytes to send or None, throttle in ms to mute for after sending).
Answer = tuple[Any, int]
ResponseHandler = Callable[["Pending", bytes], Awaitable[Answer]]


class Pending:
    """A request awaiting its answer; ``ns`` is the proxy time spent on it so far."""

    __slots__ = ("future", "header", "ns", "on_response", "state")

    def __init__(self, header: RequestHeader, future: asyncio.Future[Answer], ns: int) -> None:
        self.header = header
        self.future = future
        self.on_response: Optional[ResponseHandler] = None
        self.ns = ns
        self.state: Any = None


class ClientConnection:
    """Relays one client connection to one broker (the listener's) with quotas applied."""

    def __init__(self, server: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 upstream: tuple[str, int], node_id: Optional[int]) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.upstream = upstream
        self.node_id = node_id
        self.peer = writer.get_extra_info("peername")
        self.user = sasl.ANONYMOUS
        #: The SASL mechanism of the handshake and the username its token named (pending until
        #: the broker accepts it).
        self.sasl_mechanism: Optional[str] = None
        self.sasl_user: Optional[str] = None
        self._handle: Any = None
        self._handle_key: tuple[str, str] = ("", "\x00")
        self._order: asyncio.Queue = asyncio.Queue(maxsize=server.max_inflight)
        self._forwarded: deque[Pending] = deque()
        #: Correlation ids of requests sent expecting no answer (acks=0), oldest first.
        self._unanswered: set[int] = set()
        self._unanswered_order: deque[int] = deque()
        self._muted_until = 0.0
        #: Until when requests are read one at a time (a throttle was answered recently).
        self._serial_until = 0.0
        self._up_reader: Optional[asyncio.StreamReader] = None
        self._up_writer: Optional[asyncio.StreamWriter] = None
        self._reader_task: Optional[asyncio.Task] = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Serves the connection until either side closes or a frame is malformed."""
        try:
            self._up_reader, self._up_writer = await asyncio.open_connection(
                *self.upstream, limit=self.server.stream_limit)
        except OSError as e:
            log.warning("cannot reach broker %s:%s for client %s: %s", *self.upstream, self.peer, e)
            await self._close()
            return
        loop = asyncio.get_running_loop()
        self._reader_task = loop.create_task(self._read_requests())
        tasks = {self._reader_task, loop.create_task(self._read_responses()), loop.create_task(self._write_answers())}
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            # The request reader ending cleanly (client closed, or the proxy stopping) still lets
            # the answers already owed reach the client.
            if self._reader_task in done and self._reader_task.exception() is None and not self._closed:
                drained = loop.create_task(self._order.join())
                await asyncio.wait((tasks - {self._reader_task}) | {drained}, timeout=self.server.drain_seconds,
                                   return_when=asyncio.FIRST_COMPLETED)
                drained.cancel()
            for t in tasks:
                failure = t.exception() if t.done() and not t.cancelled() else None
                if isinstance(failure, CodecError):
                    log.info("closing connection from %s: %s", self.peer, failure)
                elif isinstance(failure, ConnectionError):
                    log.debug("closing connection from %s: %s", self.peer, failure)
                elif failure is not None:
                    log.error("closing connection from %s after an internal error: %r", self.peer, failure)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._close()

    def stop_reading(self) -> None:
        """Takes no new request; answers owed are still sent (graceful shutdown)."""
        if self._reader_task is not None:
            self._reader_task.cancel()

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for p in self._forwarded:
            if not p.future.done():
                p.future.cancel()
        for w in (self.writer, self._up_writer):
            if w is not None:
                w.close()
        for w in (self.writer, self._up_writer):
            if w is not None:
                try:
                    await w.wait_closed()
                except (OSError, asyncio.CancelledError):
                    pass

    # ------------------------------------------------------------------ identity

    def handle(self, client_id: str) -> Any:
        """The quota handle of (user, client-id), cached for the connection."""
        key = (self.user, client_id)
        if key != self._handle_key:
            self._handle = self.server.qm.client(self.user, client_id)
            self._handle_key = key
        return self._handle

    # ------------------------------------------------------------------ the three loops

    async def _read_requests(self) -> None:
        try:
            while True:
                delay = self._muted_until - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                frame = await read_frame(self.reader, self.server.max_frame_bytes)
                if frame is None:
                    return
                # A throttled answer may have gone out while this frame was being read: the mute
                # covers it too (Kafka reads nothing from a muted channel).
                delay = self._muted_until - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                t0 = time.perf_counter_ns()
                header = parse_request_header(frame)
                await self._dispatch(header, frame, t0)
                if time.monotonic() < self._serial_until:
                    # Kafka reads a connection's next request only once the previous answer has
                    # been sent (SocketServer mutes the channel meanwhile); pipelined requests
                    # would slip past a throttle. So a connection throttled within the last
                    # quota window is read that way; one that is not keeps the pipelining.
                    await self._order.join()
        except asyncio.CancelledError:
            return

    async def _read_responses(self) -> None:
        assert self._up_reader is not None
        while True:
            frame = await read_frame(self._up_reader, 1 << 31)
            if frame is None:
                raise ConnectionError(f"broker {self.upstream[0]}:{self.upstream[1]} closed the connection")
            t0 = time.perf_counter_ns()
            corr = response_correlation_id(frame)
            if corr in self._unanswered and (not self._forwarded or corr != self._forwarded[0].header.correlation_id):
                # Some brokers (tansu) answer acks=0 produce requests, which Kafka never does:
                # the client expects nothing, so the answer is dropped.
                self._unanswered.discard(corr)
                continue
            if not self._forwarded:
                raise CodecError("the broker sent a response nobody asked for")
            p = self._forwarded.popleft()
            if corr != p.header.correlation_id:
                raise CodecError(f"broker answered correlation id {corr}, expected {p.header.correlation_id}")
            p.ns += time.perf_counter_ns() - t0
            assert p.on_response is not None
            answer = await p.on_response(p, frame)
            if not p.future.done():
                p.future.set_result(answer)

    async def _write_answers(self) -> None:
        while True:
            fut = await self._order.get()
            data, throttle_ms = await fut
            if data is not None:
                if isinstance(data, tuple):
                    if len(data[1]) < _JOIN_BELOW:
                        self.writer.write(data[0] + data[1])
                    else:
                        self.writer.write(data[0])
                        self.writer.write(data[1])
                else:
                    self.writer.write(data)
                await self.writer.drain()
            if throttle_ms > 0:
                self._muted_until = max(self._muted_until, time.monotonic() + throttle_ms / 1000.0)
                self._serial_until = self._muted_until + self.server.quota_window_seconds
            self._order.task_done()

    # ------------------------------------------------------------------ requests

    async def _enqueue(self, p: Pending) -> None:
        await self._order.put(p.future)

    async def forward(self, p: Pending, frame: bytes, on_response: ResponseHandler) -> None:
        """Sends a request to the broker; ``on_response`` turns its response into the answer."""
        p.on_response = on_response
        await self._enqueue(p)
        self._forwarded.append(p)
        self._send_upstream(frame)
        assert self._up_writer is not None
        await self._up_writer.drain()

    async def forward_no_response(self, p: Pending, frame: bytes, throttle_ms: int) -> None:
        """Sends a request the broker will not answer (acks=0); the mute still applies in order."""
        p.future.set_result((None, throttle_ms))
        await self._enqueue(p)
        self._unanswered.add(p.header.correlation_id)
        self._unanswered_order.append(p.header.correlation_id)
        if len(self._unanswered_order) > _MAX_UNANSWERED:
            self._unanswered.discard(self._unanswered_order.popleft())
        self._send_upstream(frame)
        assert self._up_writer is not None
        await self._up_writer.drain()

    def _send_upstream(self, frame: bytes) -> None:
        assert self._up_writer is not None
        if len(frame) < _JOIN_BELOW:
            self._up_writer.write(_I32.pack(len(frame)) + frame)  # one send for small frames
        else:
            self._up_writer.write(_I32.pack(len(frame)))  # no copy of large ones
            self._up_writer.write(frame)

    async def answer(self, p: Pending, data: Optional[bytes], throttle_ms: int) -> None:
        """Queues an answer the proxy made itself (or none, with only a mute)."""
        p.future.set_result((data, throttle_ms))
        await self._enqueue(p)

    async def _dispatch(self, header: RequestHeader, frame: bytes, t0: int) -> None:
        p = Pending(header, asyncio.get_running_loop().create_future(), 0)
        handler = _DISPATCH.get(header.api_key)
        if handler is not None:
            await handler(self, p, frame, t0)
        else:
            p.ns = time.perf_counter_ns() - t0
            await self.forward(p, frame, self.plain_response)

    # ------------------------------------------------------------------ common response paths

    def request_throttle(self, p: Pending) -> int:
        """Records the proxy time of a request (KIP-124 on proxy time) and returns its throttle."""
        h = p.header
        if h.api_key in apis.REQUEST_QUOTA_EXEMPT:
            self.server.qm.record_exempt_request_time(p.ns)
            return 0
        throttle = int(self.handle(h.client_id).record_request_time(p.ns))
        self.server.log_request(self, h.client_id, ClientQuotaType.REQUEST, p.ns)
        return throttle

    async def plain_response(self, p: Pending, frame: bytes) -> Answer:
        """Any response the proxy relays unparsed: only the request quota's throttle is added."""
        throttle = self.request_throttle(p)
        if throttle > 0:
            h = p.header
            offset = response_body_offset(frame, h.api_key, h.api_version)
            return patch_throttle(frame, h.api_key, h.api_version, offset, throttle), throttle
        return (_I32.pack(len(frame)), frame), 0

    async def resolve(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """The proxy address standing for a broker (its listener opens on first use)."""
        return await self.server.broker_listener(node_id, host, port)


_DISPATCH: dict[int, Callable[[ClientConnection, Pending, bytes, int], Awaitable[None]]] = {}


def register(api_key: int) -> Callable:
    """Registers the request handler of one API (see :mod:`kquota.proxy.handlers`)."""

    def deco(fn: Callable) -> Callable:
        _DISPATCH[api_key] = fn
        return fn

    return deco
