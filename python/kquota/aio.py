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
from typing import TYPE_CHECKING, Callable, Optional

from kquota import _kquota
from kquota.quota_type import ClientQuotaType, QuotaTypeLike, coerce_quota_type

if TYPE_CHECKING:
    from kquota.manager import QuotaManager

def loop_now_ms(loop: Optional[asyncio.AbstractEventLoop] = None) -> int:
    """The event loop's clock in integer ms (the value to pass as ``now_ms``)."""
    return int((loop or asyncio.get_running_loop()).time() * 1000)


class DelayEntry:
    """One throttled channel in a :class:`DelayQueue`; :meth:`cancel` takes it out early."""

    __slots__ = ("_queue", "_timer", "_callback", "deadline")

    def __init__(self, queue: "DelayQueue", deadline: float, callback: Callable[[], object]) -> None:
        self._queue = queue
        self._callback = callback
        self.deadline = deadline
        self._timer: Optional[asyncio.TimerHandle] = None

    @property
    def pending(self) -> bool:
        """Whether the entry still waits for its deadline."""
        return self._timer is not None

    def _fire(self) -> None:
        if self._timer is None:
            return
        self._timer = None
        self._queue._size -= 1
        self._callback()

    def cancel(self) -> bool:
        """Removes the entry without calling its callback; ``False`` if it already left."""
        if self._timer is None:
            return False
        self._timer.cancel()
        self._timer = None
        self._queue._size -= 1
        return True


class DelayQueue:
    """Kafka's ``ClientQuotaManager`` delay queue of throttled channels, for one quota type.

    ``add(delay_ms, callback)`` schedules ``callback`` (the channel's unmute) after ``delay_ms``
    on the running event loop; ``queue_size`` is the number of channels waiting (Kafka's
    ``queue-size`` metric).
    """

    def __init__(self, quota_type: QuotaTypeLike = ClientQuotaType.PRODUCE) -> None:
        self.quota_type = coerce_quota_type(quota_type)
        self._size = 0

    @property
    def queue_size(self) -> int:
        """Throttled channels still waiting for their deadline."""
        return self._size

    def add(self, delay_ms: int, callback: Callable[[], object]) -> DelayEntry:
        """Calls ``callback`` once ``delay_ms`` ms have passed on the running loop's clock."""
        _check_ms("delay_ms", delay_ms)
        loop = asyncio.get_running_loop()
        entry = DelayEntry(self, loop.time() + delay_ms / 1000.0, callback)
        entry._timer = loop.call_at(entry.deadline, entry._fire)
        self._size += 1
        return entry

    def __repr__(self) -> str:
        return f"DelayQueue({self.quota_type.name}, queue_size={self._size})"


def _check_ms(name: str, value: object) -> None:
    """A throttle or delay in ms, validated like the record calls' results: an int (not a bool)
    from 0 to 2^31 - 1 (Kafka's int32 ``throttle_time_ms``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= 2**31 - 1:
        raise _kquota.QuotaValueError(f"{name} must be from 0 to 2^31 - 1 ms, got {value}")


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

    @property
    def muted(self) -> bool:
        """Whether reads are held back by a throttle."""
        return not self._unmuted.is_set()

    def throttle(self, quota_type: QuotaTypeLike, throttle_ms: int) -> None:
        """Mutes the connection for ``throttle_ms`` (no-op for 0): the transport stops reading
        and reads wait until then. Records the throttle into the type's ``throttle-time`` and
        adds the connection to the type's delay queue (``queue-size``). A second throttle while
        muted extends the mute to the later deadline."""
        _check_ms("throttle_ms", throttle_ms)
        if throttle_ms == 0 or self._closed:
            return
        qt = coerce_quota_type(quota_type)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + throttle_ms / 1000.0
        self.qm._record_throttle_time(qt, float(throttle_ms), loop_now_ms(loop))
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
