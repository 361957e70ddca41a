"""Wakes a thread when a file in one directory is written (Linux inotify through ctypes), so the
SQLite watch sleeps while nothing changes instead of waking every ``poll_interval``.

Why inotify sees every writer: a SQLite store runs in WAL mode, which SQLite supports only for
processes on one host (they share the ``-shm`` memory map), and every commit ``write()``s frames
to the ``-wal`` file, an ``IN_MODIFY`` on the directory. Where inotify is missing (not Linux, the
per-user watch limit reached) :func:`directory_events` returns ``None`` and the caller polls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import sys
from typing import Optional

_IN_MODIFY, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x2, 0x80, 0x100, 0x200
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000


class DirectoryEvents:
    """An inotify descriptor on one directory plus a wake-up pipe; ``wait(timeout)`` returns when a
    file there was written, created, moved in or deleted, when :meth:`wake` is called, or after
    ``timeout`` seconds (``None``: no limit)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe()

    def wait(self, timeout: Optional[float]) -> bool:
        """True when a file event arrived (the events are consumed), False otherwise."""
        ready, _, _ = select.select([self._fd, self._wake_r], [], [], timeout)
        if self._wake_r in ready:
            os.read(self._wake_r, 64)
        if self._fd not in ready:
            return False
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass
        return True

    def wake(self) -> None:
        """Makes a pending or the next :meth:`wait` return (any thread)."""
        os.write(self._wake_w, b"x")

    def close(self) -> None:
        for fd in (self._fd, self._wake_r, self._wake_w):
            os.close(fd)


def directory_events(directory: str) -> Optional[DirectoryEvents]:
    """Events of the files in ``directory``, or ``None`` where inotify is unavailable."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    mask = _IN_MODIFY | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
    if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
        os.close(fd)
        return None
    return DirectoryEvents(fd)
