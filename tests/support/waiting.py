"""Waiting in tests: for a condition, for a listener, and for a free port. One home for them, so
that every test waits the same way (a condition polled, never a fixed sleep standing in for one).
"""

from __future__ import annotations

import random
import socket
import time
from typing import Callable

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


def free_port(span: int = 1) -> int:
    """A loopback port with ``span - 1`` free ports after it (a proxy that gives each broker the
    listen port + 1 + node id needs them). ``span == 1``: any port the kernel hands out."""
    if span == 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(1000):
        first = random.randrange(_CHOSEN.start, _CHOSEN.stop - span)
        if all(_bindable(p) for p in range(first, first + span)):
            return first
    raise RuntimeError(f"no {span} consecutive free loopback ports in {_CHOSEN}")
