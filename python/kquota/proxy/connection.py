"""One client connection: its own broker connection, requests relayed in order, quotas applied.

Two tasks per connection: the request reader (client -> broker) and the response reader
(broker -> client, matching responses to requests in order, as Kafka answers in order on a
connection). Answers leave in request order, whether the broker or the proxy produced them:
each request holds a slot in ``_slots`` and answers are written from the head as soon as they
are ready. Writes are coalesced: everything ready in one event-loop step leaves in one send per
direction (pipelined requests and their answers batch up under load at no cost in latency).

A throttled answer mutes the connection afterwards (KIP-219): the reader takes no further
request until the throttle has passed. At most ``max_inflight`` requests wait for answers, and
each side's reader waits (``drain``) while its peer is not reading: memory per connection stays
bounded both ways.

Large Produce requests and Fetch responses are streamed (cut-through): see
:mod:`kquota.proxy.streaming`.
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
from kquota.proxy import apis, sasl, streaming
from kquota.proxy.codec import CodecError
from kquota.proxy.dispatch import handler_for, is_streamed
from kquota.proxy.frames import (
    RequestHeader,
    parse_request_header,
    frame_size,
    read_exactly,
    response_body_offset,
    response_correlation_id,
)
from kquota.proxy.streaming import StreamPlan
from kquota.proxy.throttle import patch_throttle

log = logging.getLogger("kquota.proxy")
_I32 = struct.Struct(">i")
#: acks=0 correlation ids remembered per connection (in case the broker answers them anyway).
_MAX_UNANSWERED = 4096
#: (bytes to send or None, throttle in ms to mute for after sending).
Answer = tuple[Any, int]
ResponseHandler = Callable[["Pending", bytes], Awaitable[Answer]]
StreamHandler = Callable[["Pending", bytes, int], Optional[StreamPlan]]


class Pending:
    """A request awaiting its answer; ``ns`` is the proxy time spent on it so far, ``size`` the
    request's length (header + body), ``on_stream`` set if a large response may be streamed."""

    __slots__ = ("answer", "done", "header", "ns", "on_response", "on_stream", "size", "state", "throttle")

    def __init__(self, header: RequestHeader, size: int, ns: int) -> None:
        self.header = header
        self.size = size
        self.on_response: Optional[ResponseHandler] = None
        self.on_stream: Optional[StreamHandler] = None
        self.ns = ns
        self.state: Any = None
        self.answer: Any = None
        self.throttle = 0
        self.done = False


class RequestPaths:
    """What the request handlers use of a connection besides ordering: the quota handle of
    (user, client-id), the request quota on proxy time, the unparsed response path and broker
    addresses. Shared by the asyncio ``ClientConnection`` and the native plane's
    ``kquota.proxy.native.BridgeConnection`` (each sets ``server``, ``user``, ``_handle`` and
    ``_handle_key``)."""

    server: Any
    user: str
    _handle: Any
    _handle_key: tuple[str, str]

    def handle(self, client_id: str) -> Any:
        """The quota handle of (user, client-id), cached for the connection."""
        key = (self.user, client_id)
        if key != self._handle_key:
            self._handle = self.server.qm.client(self.user, client_id)
            self._handle_key = key
        return self._handle

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
        """The proxy address standing for a broker (its listener opens on first use); a port no
        TCP address has is a malformed answer (``CodecError``), as on the native paths."""
        if not 0 <= port <= 0xFFFF:
            raise CodecError(f"broker {node_id}: port {port} out of range")
        return await self.server.broker_listener(node_id, host, port)


class ClientConnection(RequestPaths):
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
        self._loop = asyncio.get_running_loop()
        #: Every request not yet answered to the client, in request order.
        self._slots: deque[Pending] = deque()
        #: The requests sent to the broker awaiting its response, in order.
        self._forwarded: deque[Pending] = deque()
        #: (future, slot count) of coroutines waiting for ``len(_slots) <= count``.
        self._slot_waiters: list[tuple[asyncio.Future, int]] = []
        #: Bytes for the client / the broker, written together at the end of the loop step.
        self._out: list = []
        self._up_out: list = []
        self._flush_scheduled = False
        #: Bytes of the current request still unread (a streamed Produce).
        self._rest = 0
        #: Correlation ids of requests sent expecting no answer (acks=0), oldest first.
        self._unanswered: set[int] = set()
        self._unanswered_order: deque[int] = deque()
        self._muted_until = 0.0
        #: Until when requests are read one at a time (a throttle was answered recently).
        self._serial_until = 0.0
        #: The next request is read only once every answer is out (see ``hold_next_request``).
        self._hold_next = False
        self._up_reader: Optional[asyncio.StreamReader] = None
        self._up_writer: Optional[asyncio.StreamWriter] = None
        self._reader_task: Optional[asyncio.Task] = None
        self._in_request = False
        self._stopping = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Serves the connection until either side closes or a frame is malformed."""
        try:
            self._up_reader, self._up_writer = await asyncio.open_connection(
                *self.upstream, limit=self.server.stream_limit)
        except (OSError, ValueError) as e:  # ValueError: a host no resolver takes (NUL, long label)
            log.warning("cannot reach broker %s:%s for client %s: %s", *self.upstream, self.peer, e)
            await self._close()
            return
        loop = self._loop
        self._reader_task = loop.create_task(self._read_requests())
        tasks = {self._reader_task, loop.create_task(self._read_responses())}
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            # The request reader ending cleanly (client closed, or the proxy stopping) still lets
            # the answers already owed reach the client.
            if self._reader_task in done and self._reader_task.exception() is None and not self._closed:
                drained = loop.create_task(self._wait_slots(0))
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
        """Takes no new request; answers owed are still sent (graceful shutdown). A request being
        streamed to the broker is finished first (half a frame would wedge the broker side)."""
        self._stopping = True
        if self._reader_task is not None and not self._in_request:
            self._reader_task.cancel()

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._flush()
        for fut, _ in self._slot_waiters:
            if not fut.done():
                fut.cancel()
        for w in (self.writer, self._up_writer):
            if w is not None:
                w.close()
        for w in (self.writer, self._up_writer):
            if w is not None:
                try:
                    await w.wait_closed()
                except (OSError, asyncio.CancelledError):
                    pass

    # ------------------------------------------------------------------ ordering and writing

    async def _wait_slots(self, count: int) -> None:
        """Returns once at most ``count`` requests are unanswered."""
        while len(self._slots) > count:
            fut = self._loop.create_future()
            self._slot_waiters.append((fut, count))
            await fut

    def _settle(self, p: Pending, data: Any, throttle: int) -> None:
        """Records ``p``'s answer and sends every answer now ready at the head, in order."""
        p.answer = data
        p.throttle = throttle
        p.done = True
        slots = self._slots
        if not slots or slots[0] is not p:
            return
        out = self._out
        while slots and slots[0].done:
            q = slots.popleft()
            data = q.answer
            if data is not None:
                if type(data) is tuple:
                    out.extend(data)
                else:
                    out.append(data)
            if q.throttle > 0:
                self._muted_until = max(self._muted_until, time.monotonic() + q.throttle / 1000.0)
                self._serial_until = self._muted_until + self.server.quota_window_seconds
        if out:
            self._schedule_flush()
        if self._slot_waiters:
            waiting = []
            for fut, count in self._slot_waiters:
                if len(slots) <= count:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    waiting.append((fut, count))
            self._slot_waiters = waiting

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Writes what is queued for each side: one send per side per loop step."""
        self._flush_scheduled = False
        for out, w in ((self._out, self.writer), (self._up_out, self._up_writer)):
            if out and w is not None:
                if not w.is_closing():
                    if len(out) == 1:
                        w.write(out[0])
                    else:
                        w.writelines(out)
                out.clear()

    # ------------------------------------------------------------------ the two loops

    async def _read_requests(self) -> None:
        reader = self.reader
        assert self._up_writer is not None
        up = self._up_writer
        up_transport = up.transport
        max_bytes = self.server.max_frame_bytes
        try:
            while not self._stopping:
                if up_transport.get_write_buffer_size():
                    await up.drain()  # the broker is not keeping up: stop reading the client
                delay = self._muted_until - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                if len(self._slots) >= self.server.max_inflight:
                    await self._wait_slots(self.server.max_inflight - 1)
                try:
                    prefix = await reader.readexactly(4)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        raise CodecError("connection closed inside a size prefix") from None
                    return
                size = frame_size(prefix, max_bytes)
                frame = await read_exactly(reader, min(size, streaming.HEAD) if size >= streaming.STREAM_MIN else size)
                self._rest = size - len(frame)
                # A throttled answer may have gone out while this frame was being read: the mute
                # covers it too (Kafka reads nothing from a muted channel).
                delay = self._muted_until - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                t0 = time.perf_counter_ns()
                try:
                    header = parse_request_header(frame)
                except CodecError:
                    if not self._rest:
                        raise
                    frame = await self.read_rest(frame)  # a header longer than the head
                    header = parse_request_header(frame)
                if self._rest and not is_streamed(header.api_key):
                    frame = await self.read_rest(frame)
                p = Pending(header, size, 0)
                handler = handler_for(header)
                if handler is not None:
                    await handler(self, p, frame, t0)
                else:
                    p.ns = time.perf_counter_ns() - t0
                    await self.forward(p, frame, self.plain_response)
                if self._rest:
                    raise RuntimeError("a streamed request was not forwarded whole")
                if self._hold_next or (self._serial_until and time.monotonic() < self._serial_until):
                    # Kafka reads a connection's next request only once the previous answer has
                    # been sent (SocketServer mutes the channel meanwhile); pipelined requests
                    # would slip past a throttle. So a connection is read that way while its
                    # unanswered requests would throttle its client, and for a quota window
                    # after a throttle; otherwise it keeps the pipelining.
                    self._hold_next = False
                    await self._wait_slots(0)
        except asyncio.CancelledError:
            return

    async def read_rest(self, head: bytes) -> bytes:
        """The whole current request, given its head (for a handler that cannot stream it)."""
        if not self._rest:
            return head
        rest = await read_exactly(self.reader, self._rest)
        self._rest = 0
        return head + rest

    async def _read_responses(self) -> None:
        assert self._up_reader is not None
        up = self._up_reader
        w = self.writer
        transport = w.transport
        while True:
            if transport.get_write_buffer_size():
                await w.drain()  # the client is not reading: stop reading the broker
            try:
                prefix = await up.readexactly(4)
            except asyncio.IncompleteReadError:
                raise ConnectionError(f"broker {self.upstream[0]}:{self.upstream[1]} closed the connection") from None
            size = frame_size(prefix, 1 << 31)
            nxt = self._forwarded[0] if self._forwarded else None
            streamed = size >= streaming.STREAM_MIN and nxt is not None and nxt.on_stream is not None
            frame = await read_exactly(up, min(size, streaming.HEAD) if streamed else size)
            t0 = time.perf_counter_ns()
            corr = response_correlation_id(frame)
            if corr in self._unanswered and (nxt is None or corr != nxt.header.correlation_id):
                # Some brokers (tansu) answer acks=0 produce requests, which Kafka never does:
                # the client expects nothing, so the answer is dropped.
                self._unanswered.discard(corr)
                await streaming.skip(up, size - len(frame))
                continue
            if nxt is None:
                raise CodecError("the broker sent a response nobody asked for")
            p = self._forwarded.popleft()
            if corr != p.header.correlation_id:
                raise CodecError(f"broker answered correlation id {corr}, expected {p.header.correlation_id}")
            p.ns += time.perf_counter_ns() - t0
            if len(frame) < size:
                assert p.on_stream is not None
                plan = p.on_stream(p, frame, size)
                if plan is not None:
                    await self._stream_response(p, frame, size, plan)
                    continue
                frame += await read_exactly(up, size - len(frame))  # head too short to decide
            assert p.on_response is not None
            data, throttle = await p.on_response(p, frame)
            self._settle(p, data, throttle)

    async def _stream_response(self, p: Pending, head: bytes, size: int, plan: StreamPlan) -> None:
        """Sends a large response as it arrives (or its replacement, dropping the rest)."""
        data, throttle, replace, tail = plan
        rest = size - len(head)
        assert self._up_reader is not None
        up, w = self._up_reader, self.writer
        self.server.streamed_responses += 1
        if replace:
            await streaming.skip(up, rest)
            self._settle(p, data, throttle)
            return
        if not self._slots or self._slots[0] is not p:
            # Every earlier request has been answered by now (local answers at once, the
            # broker's in order, by this loop), so the response is at the head.
            raise RuntimeError("a streamed response is not the next answer")
        self._flush()
        if tail is None:
            await streaming.pump(up, w, rest, first=[data])
        else:
            tail.feed(head)
            hold = min(rest, streaming.TAIL_HOLD)
            await streaming.pump(up, w, rest - hold, tail.feed, first=[data])
            streaming.send(w, await tail.finish(await read_exactly(up, hold), size - hold))
        self._settle(p, None, throttle)

    # ------------------------------------------------------------------ requests

    async def forward(self, p: Pending, frame: bytes, on_response: ResponseHandler,
                      on_stream: Optional[StreamHandler] = None) -> None:
        """Sends a request to the broker; ``on_response`` turns its response into the answer
        (``on_stream`` decides on the head of a response large enough to stream)."""
        p.on_response = on_response
        p.on_stream = on_stream
        self._slots.append(p)
        self._forwarded.append(p)
        await self._send_upstream(frame)

    def unanswered_produce_bytes(self) -> int:
        """Bytes of Produce requests sent to the broker and not yet answered (not yet recorded)."""
        return sum(p.size for p in self._forwarded if p.header.api_key == apis.PRODUCE)

    def hold_next_request(self) -> None:
        """Reads the next request only once every answer owed has gone out."""
        self._hold_next = True

    async def forward_no_response(self, p: Pending, frame: bytes, throttle_ms: int) -> None:
        """Sends a request the broker will not answer (acks=0); the mute still applies in order."""
        self._slots.append(p)
        self._settle(p, None, throttle_ms)
        self._unanswered.add(p.header.correlation_id)
        self._unanswered_order.append(p.header.correlation_id)
        if len(self._unanswered_order) > _MAX_UNANSWERED:
            self._unanswered.discard(self._unanswered_order.popleft())
        await self._send_upstream(frame)

    async def _send_upstream(self, frame: bytes) -> None:
        """Queues the request (its rest pumped from the client if it is being streamed)."""
        rest = self._rest
        if not rest:
            self._up_out.append(_I32.pack(len(frame)))
            self._up_out.append(frame)
            self._schedule_flush()
            return
        self._flush()
        assert self._up_writer is not None
        self.server.streamed_requests += 1
        self._in_request = True
        try:
            await streaming.pump(self.reader, self._up_writer, rest, first=[_I32.pack(len(frame) + rest), frame])
        finally:
            self._rest = 0
            self._in_request = False

    async def answer(self, p: Pending, data: Optional[bytes], throttle_ms: int) -> None:
        """Queues an answer the proxy made itself (or none, with only a mute)."""
        self._slots.append(p)
        self._settle(p, data, throttle_ms)
