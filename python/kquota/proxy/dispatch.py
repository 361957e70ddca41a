"""Which handler serves a request: the APIs the proxy inspects register theirs (see
:mod:`kquota.proxy.handlers`), every other API is relayed as bytes; both data planes look
requests up here, so both refuse the same versions."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Callable, Optional

from kquota.proxy import apis
from kquota.proxy.codec import CodecError
from kquota.proxy.frames import RequestHeader

#: A handler: ``(connection, pending request, frame, start ns)``; it forwards or answers.
Handler = Callable[[Any, Any, bytes, int], Awaitable[None]]

_DISPATCH: dict[int, Handler] = {}

#: APIs whose handlers take the head of a large request (and forward it, the rest streamed).
_STREAMED: set[int] = set()


def register(api_key: int, streamed: bool = False) -> Callable:
    """Registers the request handler of one API; a ``streamed`` handler may be given only the
    head of a large request (``conn.read_rest`` gives the whole one), and must forward it."""

    def deco(fn: Callable) -> Callable:
        _DISPATCH[api_key] = fn
        if streamed:
            _STREAMED.add(api_key)
        return fn

    return deco


def is_streamed(api_key: int) -> bool:
    """Whether the API's handler takes the head of a large request."""
    return api_key in _STREAMED


def handler_for(header: RequestHeader) -> Optional[Handler]:
    """The handler of the request's API (None: relayed as bytes).

    Raises ``CodecError`` (the connection is closed) for a version outside the range the proxy
    parses (``apis.PARSED_VERSIONS``, what ApiVersions offers): Kafka's ``SocketServer`` closes a
    connection that sends a version its broker does not support. ApiVersions itself is the
    exception, answered ``UNSUPPORTED_VERSION`` by its handler (KIP-511)."""
    handler = _DISPATCH.get(header.api_key)
    if handler is not None and header.api_key != apis.API_VERSIONS:
        lo, hi = apis.PARSED_VERSIONS[header.api_key]
        if not lo <= header.api_version <= hi:
            raise CodecError(f"api key {header.api_key} v{header.api_version}: not a version the proxy "
                             f"offers ({lo}-{hi})")
    return handler
