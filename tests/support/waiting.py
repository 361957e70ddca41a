"""Waiting in tests: for a condition, for a listener, and for a free port. One home for them, so
that every test waits the same way (a condition polled, never a fixed sleep standing in for one).
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")

#: Ports outside Linux's ephemeral range (32768-60999 by default): a listener the tests start on a
#: chosen port there cannot collide with the source port of some other test's client connection.
_CHOSEN = range(20000, 32000)


def wait_until(condition: Callable[[], object], timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Polls ``condition`` until it is true or ``timeout`` seconds pass; returns its last value
    as a bool (a hang guard: assert on it, with the measured value in the message)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


async def wait_until_async(condition: Callable[[], Awaitable[object]], timeout: float = 30.0, interval: float = 0.0) -> bool:
    """:func:`wait_until` for a coroutine ``condition`` (an asyncio client that reads until it has
    what it waits for): awaited until it is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await condition():
            return True
        await asyncio.sleep(interval)
    return bool(await condition())


def wait_call(call: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
              retry_on: tuple[type[BaseException], ...] = (OSError,), alive: Callable[[], bool] = lambda: True) -> T:
    """Calls ``call`` until it stops raising one of ``retry_on`` and returns its value (a server
    that is starting, a store that answers again). After ``timeout`` seconds, or once ``alive()``
    is false (the process that should answer has exited), the last error is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except retry_on:
            if time.monotonic() >= deadline or not alive():
                raise
        time.sleep(interval)


def step_until(steppers, done: Callable[[], object], timeout: float, interval: float) -> bool:
    """For things that move only when the test drives them (fleet coordinators whose ``step()``
    the test calls): steps each of ``steppers`` every ``interval`` seconds until ``done()`` is
    true or ``timeout`` seconds pass; returns ``done()``'s last value as a bool."""
    def stepped() -> object:
        if done():
            return True
        for s in steppers:
            s.step()
        return False

    return wait_until(stepped, timeout, interval) or bool(done())


def run_for(seconds: float, step: Callable[[], object]) -> None:
    """A measurement window, not a wait: calls ``step`` again and again for ``seconds`` seconds
    (drive load, or observe, for a fixed time the assertion is about)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        step()


def wait_port(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
    """Returns once something accepts on ``host:port``; TimeoutError after ``timeout`` s."""
    def accepts() -> bool:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            return False

    if not wait_until(accepts, timeout, 0.02):
        raise TimeoutError(f"nothing listens on {host}:{port}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(span: int = 1, stable: bool = False) -> int:
    """A loopback port with ``span - 1`` free ports after it (a proxy that gives each broker the
    listen port + 1 + node id needs them). ``stable``: the port is bound again later (a server
    restarted on it), so it is chosen outside the ephemeral range, where no client connection
    takes it meanwhile. Otherwise (``span == 1``) any port the kernel hands out."""
    if span == 1 and not stable:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(1000):
        first = random.randrange(_CHOSEN.start, _CHOSEN.stop - span)
        if all(_bindable(p) for p in range(first, first + span)):
            return first
    raise RuntimeError(f"no {span} consecutive free loopback ports in {_CHOSEN}")
