"""``max.connections`` at the proxy as at Kafka's acceptor (``SocketServer``'s
``ConnectionQuotas.waitForConnectionSlot``), against Apache Kafka's broker: over the broker-wide
``max.connections`` or its listener's ``listener.name.<l>.max.connections`` a new connection
waits for a slot, it is not refused; the listener is named by the ``--listen`` protocol (``SSL``
for a TLS listener), as a broker names ``SSL://host:port``. Apart from it, the proxy's own guard
against running out of descriptors, ``kquota.proxy.max.client.sockets``, closes a socket over it
at once."""

from __future__ import annotations

import socket
import threading
from typing import Callable, Optional

import kquota
import pytest
from waiting import wait_until
from proxy_connect import api_versions, closed_by_proxy, connect
from proxy_support import ProxyThread
from test_proxy_kafka_tls import port_of
from test_proxy_tls import listener_props

pytestmark = [pytest.mark.process, pytest.mark.timing]


class Waiting:
    """A connection opened by ``open_socket`` on its own thread and sent ApiVersions; ``served``
    once answered (``done`` set then, or when the proxy closes it instead)."""

    def __init__(self, open_socket: Callable[[], socket.socket]) -> None:
        self.sock: Optional[socket.socket] = None
        self.served = False
        self.done = threading.Event()

        def run() -> None:
            try:
                self.sock = open_socket()
                self.sock.settimeout(15)
                self.served = api_versions(self.sock)
            except OSError:
                pass
            self.done.set()

        threading.Thread(target=run, daemon=True).start()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


def _plaintext(kafka_broker) -> tuple[str, int]:
    return "127.0.0.1", port_of(kafka_broker.listeners["PLAINTEXT"])


def _two_served_the_third_waits_until_one_closes(attempts: list[Waiting]) -> None:
    wait_until(lambda: sum(w.done.is_set() for w in attempts) >= 2, 10)  # the first two
    served = [w for w in attempts if w.done.is_set()]
    assert len(served) == 2 and all(w.served for w in served), [(w.done.is_set(), w.served) for w in attempts]
    third = next(w for w in attempts if w not in served)
    # Kafka's acceptor waits for a slot: the third is neither served nor closed.
    assert not third.done.wait(1.0), "a connection over max.connections was served or closed"
    served[0].close()
    assert third.done.wait(10) and third.served, "the waiting connection was not served once a slot freed"


def test_broker_wide_max_connections_holds_a_burst_until_a_connection_closes(kafka_broker):
    """Three connections at once against ``max.connections=2``: two are served, the third waits
    (Kafka's acceptor blocks; ``max.connections`` in the proxy's ``--config`` used to be its own
    cap, which closed it at once) and is served when one of the two closes. A burst cannot pass the limit between
    the slot wait and the count (the slot is held from the accept)."""
    qm = kquota.QuotaManager()
    qm.configure_connections({"max.connections": "2"})
    proxy = ProxyThread(_plaintext(kafka_broker), qm)
    attempts: list[Waiting] = []
    try:
        port = proxy.proxy.bootstrap_address[1]
        attempts = [Waiting(lambda: connect(port, timeout=15)) for _ in range(3)]
        _two_served_the_third_waits_until_one_closes(attempts)
        assert proxy.proxy.refused_client_sockets == 0
        assert qm.connection_limits()["max.connections"] == 2
    finally:
        for w in attempts:
            w.close()
        proxy.stop()
        qm.close()


def test_an_ssl_listener_is_limited_by_its_own_listener_name(kafka_broker, pki):
    """On a TLS listener the kernel's listener is ``SSL``: ``listener.name.ssl.max.connections``
    holds its connections and ``listener.name.plaintext.max.connections`` does not (before, every
    listener was ``PLAINTEXT``); the listener's metrics carry ``listener="SSL"``."""
    from tls_support import tls_wire

    qm = kquota.QuotaManager()
    qm.configure_connections({"listener.name.plaintext.max.connections": "1",
                              "listener.name.ssl.max.connections": "2"})
    proxy = ProxyThread(_plaintext(kafka_broker), qm, listener_tls=listener_props(pki))
    attempts: list[Waiting] = []
    try:
        address = proxy.proxy.bootstrap_address
        attempts = [Waiting(lambda: tls_wire(address, pki).sock) for _ in range(3)]
        _two_served_the_third_waits_until_one_closes(attempts)
        listeners = {m.tags.get("listener") for m in qm.connection_metrics() if "listener" in m.tags}
        assert listeners == {"SSL"}, listeners
    finally:
        for w in attempts:
            w.close()
        proxy.stop()
        qm.close()


def test_the_descriptor_guard_closes_at_once_and_is_not_max_connections(kafka_broker):
    """``kquota.proxy.max.client.sockets`` (here 2) with Kafka's ``max.connections`` unlimited:
    the third socket is closed at once and counted, nothing waits; the kernel's count is
    untouched by it."""
    qm = kquota.QuotaManager()
    proxy = ProxyThread(_plaintext(kafka_broker), qm, max_client_sockets=2)
    held: list[socket.socket] = []
    try:
        port = proxy.proxy.bootstrap_address[1]
        held = [connect(port) for _ in range(2)]
        assert all(api_versions(s) for s in held)
        over = connect(port)
        closed = closed_by_proxy(over)
        over.close()
        assert closed is not None and closed < 1.0, closed
        assert proxy.proxy.refused_client_sockets == 1
        assert sum(m.value for m in qm.connection_metrics()
                   if m.name == "connections-refused-total" and not m.tags) == 0
        assert api_versions(held[0])  # the others are untouched
    finally:
        for s in held:
            s.close()
        proxy.stop()
        qm.close()
