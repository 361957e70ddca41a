"""Which handler serves a request: the APIs the proxy inspects register theirs (see
:mod:`kquota.proxy.handlers`) and are handed to Python by the native data plane; every other API
is relayed as bytes natively."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Callable, Optional

from kquota.kafka.protocol.frames import RequestHeader

#: A handler: ``(connection, pending request, frame, start ns)``; it forwards or answers.
Handler = Callable[[Any, Any, bytes, int], Awaitable[None]]

_DISPATCH: dict[int, Handler] = {}


def register(api_key: int) -> Callable:
    """Registers the request handler of one API (given whole requests)."""

    def deco(fn: Callable) -> Callable:
        _DISPATCH[api_key] = fn
        return fn

    return deco


def handler_for(header: RequestHeader) -> Optional[Handler]:
    """The handler of the request's API (None: relayed as bytes). The native plane hands Python
    only requests of versions the proxy parses: it refuses any other before (``ApiTables::
    check_version``, the one place of that rule)."""
    return _DISPATCH.get(header.api_key)
