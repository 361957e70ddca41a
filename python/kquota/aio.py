"""Throttled channels for asyncio brokers and proxies (KIP-219).

Since KIP-219 a Kafka broker answers a request that violates a quota *at once*, with
``throttle_time_ms`` in the response, and then mutes the channel: it reads nothing more from that
connection until the throttle has passed. Meanwhile the client's writes back up in the socket
buffers, so a client that ignores the throttle is held to its quota anyway. Each muted channel
sits in its quota type's delay queue (metric ``queue-size``); Kafka's reaper unmutes it when its
time is up.

* :class:`DelayQueue` — per quota type, counts throttled channels (``queue_size``) and calls
  each one's end-of-throttle callback at its deadline (on the event loop; entries are
  cancellable, and an entry leaves the queue at its deadline whatever happens to its owner).
* :class:`ThrottledConnection` — wraps an asyncio ``(StreamReader, StreamWriter)`` pair with a
  ``qm.client(user, client_id)`` handle: ``record()`` records a request and returns its
  throttle; ``throttle(quota_type, ms)`` mutes the connection (the transport stops reading and
  the ``read*`` methods wait) until the delay has passed.

Times come from the event loop's clock (``loop.time()``, which is ``time.monotonic()``, the
kernel's own clock), so a loop with a virtual clock drives the whole kit, e.g. in tests.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Optional

from kquota.delay_queue import DelayEntry, DelayQueue, check_ms
from kquota.quota_type import ClientQuotaType, QuotaTypeLike, coerce_quota_type

if TYPE_CHECKING:
    # Annotations only (never imported at run time): the manager does not import this module.
    from kquota.manager import QuotaManager

# DelayQueue and DelayEntry live in kquota.delay_queue; they are re-exported here, where the
# asyncio kit has always offered them.
__all__ = ["ClientQuotaType", "DelayEntry", "DelayQueue", "ThrottledConnection", "loop_now_ms"]


def loop_now_ms(loop: Optional[asyncio.AbstractEventLoop] = None) -> int:
    """The event loop's clock in integer ms (the value to pass as ``now_ms``)."""
    return int((loop or asyncio.get_running_loop()).time() * 1000)


class ThrottledConnection:
    """One client connection of an asyncio broker or proxy, with its quota handle.

    >>> async def serve(reader, writer):                                   # doctest: +SKIP
    ...     async with ThrottledConnection(qm, reader, writer, user, client_id) as conn:
    ...         while (request := await conn.readexactly(n)):
    ...             ms = conn.record(ClientQuotaType.PRODUCE, len(request))
    ...             writer.write(response_with(throttle_time_ms=ms))    # answer at once
    ...             conn.throttle(ClientQuotaType.PRODUCE, ms)           # then mute

    While muted the transport does not read (``pause_reading``), so the peer's writes back up,
    and the ``read*`` methods wait for the unmute before returning anything already buffered.
    Closing (or leaving the ``async with``) takes the connection out of its delay queues.
    """

    def __init__(
        self,
        qm: "QuotaManager",
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        user: str,
        client_id: str,
    ) -> None:
        self.qm = qm
        self.handle = qm.client(user, client_id)
        self.reader = reader
        self.writer = writer
        self._unmuted = asyncio.Event()
        self._unmuted.set()
        self._entry: Optional[DelayEntry] = None
        self._mute_until = 0.0
        self._closed = False

    # ---------------------------------------------------------------- quota

    def now_ms(self) -> int:
        """The event loop's clock in ms."""
        return loop_now_ms()

    def record(self, quota_type: QuotaTypeLike, value: float) -> int:
        """Records ``value`` for this connection now and returns the throttle in ms."""
        return self.handle.record_and_get_throttle_time_ms(quota_type, value, self.now_ms())

    def respond(self, byte_quota_type: QuotaTypeLike, byte_throttle_ms: int, request_throttle_ms: int) -> int:
        """Kafka's response step for a Produce or Fetch response whose byte-rate and request-time
        throttles you recorded: returns the ``throttle_time_ms`` to write into the response (the
        larger) and mutes the connection under the quota that produced it (the byte-rate quota
        only when strictly larger), recording this entity's ``throttle-time``. Call it once the
        response is written."""
        ms, enforce = self.handle.throttle_response(byte_quota_type, byte_throttle_ms, request_throttle_ms,
                                                    self.now_ms())
        if enforce is not None:
            self._mute(enforce, ms)
        return int(ms)

    @property
    def muted(self) -> bool:
        """Whether reads are held back by a throttle."""
        return not self._unmuted.is_set()

    def throttle(self, quota_type: QuotaTypeLike, throttle_ms: int) -> None:
        """Mutes the connection for ``throttle_ms`` (no-op for 0): the transport stops reading
        and reads wait until then. Records the throttle into this entity's and the type's
        ``throttle-time`` and adds the connection to the type's delay queue (``queue-size``). A second throttle while
        muted extends the mute to the later deadline."""
        check_ms("throttle_ms", throttle_ms)
        if throttle_ms == 0 or self._closed:
            return
        qt = coerce_quota_type(quota_type)
        self.handle.record_throttle_time(qt, throttle_ms, self.now_ms())
        self._mute(qt, throttle_ms)

    def _mute(self, qt: ClientQuotaType, throttle_ms: int) -> None:
        if throttle_ms == 0 or self._closed:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + throttle_ms / 1000.0
        if self._entry is not None and self._entry.pending:
            if deadline <= self._entry.deadline:
                return
            self._entry.cancel()
        self._entry = self.qm.delay_queue(qt).add(throttle_ms, self._unmute)
        self._mute_until = deadline
        self._unmuted.clear()
        transport = self.writer.transport
        if not transport.is_closing():
            transport.pause_reading()

    def _unmute(self) -> None:
        self._entry = None
        self._unmuted.set()
        transport = self.writer.transport
        if not transport.is_closing():
            transport.resume_reading()

    async def wait_unmuted(self) -> None:
        """Returns once no throttle holds the connection."""
        await self._unmuted.wait()

    # ---------------------------------------------------------------- reads

    async def read(self, n: int = -1) -> bytes:
        """``StreamReader.read`` once unmuted."""
        await self._unmuted.wait()
        return await self.reader.read(n)

    async def readexactly(self, n: int) -> bytes:
        """``StreamReader.readexactly`` once unmuted."""
        await self._unmuted.wait()
        return await self.reader.readexactly(n)

    async def readline(self) -> bytes:
        """``StreamReader.readline`` once unmuted."""
        await self._unmuted.wait()
        return await self.reader.readline()

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Leaves the delay queue and closes the writer; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self._entry is not None:
            self._entry.cancel()
            self._entry = None
        self._unmuted.set()
        self.writer.close()

    async def __aenter__(self) -> "ThrottledConnection":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
