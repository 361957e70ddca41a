"""Debian's ``chromium`` in headless mode for the status page's tests: the DOM after the page's
scripts ran for some virtual time, and screenshots."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from typing import Optional

import pytest


def chromium() -> str:
    """The chromium binary (the test is skipped without it, failed under CI)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


def _run(url: str, *flags: str, timeout: float = 90.0) -> str:
    with tempfile.TemporaryDirectory(prefix="kq-chromium-") as profile:
        done = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", *flags, url],
            capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"chromium failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")
    return done.stdout.decode()


def dump_dom(url: str, virtual_ms: Optional[int] = None) -> str:
    """The page's DOM once loaded and, with ``virtual_ms``, after that much virtual time (timers
    fire; network fetches complete before virtual time moves on). Headless chromium dumps nothing
    with scripts disabled, so there is no switch for it."""
    flags = [] if virtual_ms is None else [f"--virtual-time-budget={virtual_ms}"]
    return _run(url, *flags, "--dump-dom")


def screenshot(url: str, path: str, width: int = 1200, height: int = 900, virtual_ms: int = 1000) -> None:
    """A PNG of the page at ``width`` x ``height`` into ``path``."""
    _run(url, f"--screenshot={path}", f"--window-size={width},{height}", "--hide-scrollbars",
         f"--virtual-time-budget={virtual_ms}")
