"""Which handler serves a request: the APIs the proxy inspects register theirs (see
:mod:`kquota.proxy.handlers`) and are handed to Python by the native data plane; every other API
is relayed as bytes natively."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Callable, Optional

from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import CodecError
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
