"""``BridgeConnection``: one client connection of the native data plane, as the request handlers
of :mod:`kquota.proxy.handlers` see it.

The native plane (``kquota._kquota.ProxyDataPlane``) owns the sockets, the ordering and the
mutes; it hands Python only the requests of the APIs the proxy inspects, whole, each with a slot
number. A handler's ``forward`` and ``answer`` become ``ProxyDataPlane.forward`` and ``settle``
on that slot; the native plane sends answers in slot (request) order and mutes after a throttle.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from kquota.proxy import sasl
from kquota.kafka.protocol.codec import CodecError
from kquota.proxy.request import Pending, RequestPaths, ResponseHandler

log = logging.getLogger("kquota.proxy")


class BridgeConnection(RequestPaths):
    """The Python state of one native connection (created at its first inspected request)."""

    def __init__(self, server: Any, plane: Any, conn_id: int, node_id: Optional[int]) -> None:
        self.server = server
        self.conn_id = conn_id
        self.node_id = node_id
        self.peer = f"native connection {conn_id}"
        self._plane = plane
        #: The principal the native plane gave the connection (a TLS client's certificate's),
        #: set by the data plane before the first request is handled.
        self._user = sasl.ANONYMOUS
        #: The SASL exchanges; on a SASL listener the principal is ANONYMOUS until one completes.
        self.auth = sasl.Authentication(bool(getattr(server, "sasl_listener", False)))
        self._handle: Any = None
        self._handle_key: tuple[str, str] = ("", "\x00")
        #: Slot of each request being handled, and the forwarded ones by slot.
        self.slots: dict[Pending, int] = {}
        self.forwarded: dict[int, Pending] = {}
        self.closed = False

    @property
    def user(self) -> str:  # type: ignore[override]  # read-only here: only SASL sets it
        """The principal's name: on a SASL listener the one a completed exchange authenticated
        (ANONYMOUS before), on any other the connection's own (ANONYMOUS or its certificate's)."""
        return self.auth.principal if self.auth.sasl_listener else self._user

    @property
    def may_administer(self) -> bool:
        """Whether the principal may be an admin: not a delegation token whose owner the proxy
        does not know (its name is the token id, which names no principal)."""
        return not self.auth.token_authenticated

    def authenticated(self, outcome: int) -> None:
        """Acts on an answered SASL round: a completed exchange tells the native quota paths the
        principal (the only call of ``set_user``: the plane bounds a SASL listener's connection
        until it); a re-authentication as another principal closes the connection, as Kafka's
        ``SaslServerAuthenticator`` closes it."""
        if self.closed:
            return
        if outcome == sasl.AUTHENTICATED:
            self._plane.set_user(self.conn_id, self.auth.principal)
        elif outcome == sasl.REFUSED:
            log.info("closing connection from %s: re-authentication as another principal than User:%s",
                     self.peer, self.auth.principal)
            self.closed = True
            self._plane.close_connection(self.conn_id, "re-authentication as another principal")

    async def forward(self, p: Pending, frame: bytes, on_response: ResponseHandler) -> None:
        """Sends the request to the broker; ``on_response`` turns its (whole) response into the
        answer."""
        p.on_response = on_response
        slot = self.slots.pop(p)
        self.forwarded[slot] = p
        self._plane.forward(self.conn_id, slot, frame)

    async def answer(self, p: Pending, data: Any, throttle_ms: int) -> None:
        """Queues an answer the proxy made itself (or none, with only a mute)."""
        self.settle(self.slots.pop(p), data, throttle_ms)

    def settle(self, slot: int, data: Any, throttle_ms: int) -> None:
        """Hands the native plane the answer of ``slot`` (a ``(prefix, frame)`` pair is joined)."""
        if type(data) is tuple:
            data = b"".join(data)
        elif data is not None and type(data) is not bytes:
            data = bytes(data)
        self._plane.settle(self.conn_id, slot, data, int(throttle_ms))

    def fail(self, failure: BaseException) -> None:
        """Closes the connection after a handler failed (a malformed frame logged at info, a lost
        peer at debug, anything else as an internal error)."""
        if isinstance(failure, CodecError):
            log.info("closing connection from %s: %s", self.peer, failure)
        elif isinstance(failure, ConnectionError):
            log.debug("closing connection from %s: %s", self.peer, failure)
        else:
            log.error("closing connection from %s after an internal error: %r", self.peer, failure)
        if not self.closed:
            self.closed = True  # logged here: not again when the plane reports the close
            self._plane.close_connection(self.conn_id, f"{type(failure).__name__}: {failure}")
