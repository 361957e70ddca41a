"""Kafka's delay queue of throttled channels, one per quota type (metric ``queue-size``).

A :class:`DelayQueue` counts the channels muted by a throttle and calls each one's unmute at its
deadline on the running event loop; :class:`kquota.aio.ThrottledConnection` adds itself to the
queue of the type that throttled it. The queues belong to a ``QuotaManager``
(``qm.delay_queue(quota_type)``), which reports their sizes with its metrics.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Optional

from kquota.exceptions import QuotaValueError
from kquota.quota_type import ClientQuotaType, QuotaTypeLike, coerce_quota_type

#: Kafka's ``throttle_time_ms`` is an int32.
MAX_THROTTLE_MS = 2**31 - 1


def check_ms(name: str, value: object) -> None:
    """A throttle or delay in ms, validated like the record calls' results: an int (not a bool)
    from 0 to 2^31 - 1 (Kafka's int32 ``throttle_time_ms``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_THROTTLE_MS:
        raise QuotaValueError(f"{name} must be from 0 to 2^31 - 1 ms, got {value}")


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
        check_ms("delay_ms", delay_ms)
        loop = asyncio.get_running_loop()
        entry = DelayEntry(self, loop.time() + delay_ms / 1000.0, callback)
        entry._timer = loop.call_at(entry.deadline, entry._fire)
        self._size += 1
        return entry

    def __repr__(self) -> str:
        return f"DelayQueue({self.quota_type.name}, queue_size={self._size})"
