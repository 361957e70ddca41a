"""The two data planes of ``kquota proxy`` and the entry point that picks one.

``native`` (the default): :class:`kquota.proxy.native.NativeProxyServer`, sockets and the hot
APIs in Rust (tokio); ``asyncio``: :class:`kquota.proxy.server.ProxyServer`, all in Python.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from kquota.proxy.native import NativeProxyServer
from kquota.proxy.server import ProxyServer

#: ``--data-plane`` choices, the default first.
DATA_PLANES = ("native", "asyncio")


def make_proxy(qm: Any, bootstrap: tuple[str, int], listen: tuple[str, int], data_plane: str = "native",
               **options: Any) -> Any:
    """A proxy server on ``data_plane`` (``"native"`` or ``"asyncio"``); ``ValueError`` otherwise."""
    if data_plane == "native":
        return NativeProxyServer(qm, bootstrap, listen, **options)
    if data_plane == "asyncio":
        return ProxyServer(qm, bootstrap, listen, **options)
    raise ValueError(f"data_plane must be one of {', '.join(DATA_PLANES)}, got {data_plane!r}")


async def serve(qm: Any, bootstrap: tuple[str, int], listen: tuple[str, int],
                stop: Optional[asyncio.Event] = None, data_plane: str = "native", **options: Any) -> None:
    """Runs a proxy on ``data_plane`` (``"native"`` or ``"asyncio"``) until ``stop`` is set
    (forever if ``None``): the asyncio entry point."""
    proxy = make_proxy(qm, bootstrap, listen, data_plane, **options)
    await proxy.start()
    try:
        await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        await proxy.close()
