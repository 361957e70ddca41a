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
from kquota.proxy.protocol.codec import CodecError
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
        self._user = sasl.ANONYMOUS
        #: The SASL mechanism of the handshake and the username its token named (pending until
        #: the broker accepts it).
        self.sasl_mechanism: Optional[str] = None
        self.sasl_user: Optional[str] = None
        self._handle: Any = None
        self._handle_key: tuple[str, str] = ("", "\x00")
        #: Slot of each request being handled, and the forwarded ones by slot.
        self.slots: dict[Pending, int] = {}
        self.forwarded: dict[int, Pending] = {}
        self.closed = False

    @property  # type: ignore[override]
    def user(self) -> str:
        """The principal's name; setting it (after SASL) also tells the native quota paths."""
        return self._user

    @user.setter
    def user(self, name: str) -> None:
        self._user = name
        if not self.closed:
            self._plane.set_user(self.conn_id, name)

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
