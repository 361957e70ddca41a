"""Connection quotas (KIP-612): the part of :class:`~kquota.QuotaManager` that decides what
happens when a connection is accepted, as Kafka's ``ConnectionQuotas`` (SocketServer.scala).

A server calls, for each accepted connection::

    delay = qm.record_connection_accept(listener)   # broker-wide / listener rate
    # hold the connection ``delay`` ms (Kafka blocks its acceptor), and while
    # ``qm.connection_slot_available(listener)`` is False (``max.connections``)
    throttle = qm.record_connection(ip, listener=listener)   # ip rate, max.connections.per.ip
    # 0: serve it, then qm.release_connection(ip, listener) when it closes
    # > 0: close it after ``throttle`` ms (it was not counted)
    # TooManyConnectionsError: close it now (it was not counted)

``ip`` quotas (``connection_creation_rate`` of ``ips/<ip>`` and ``ips/<default>``) are set with
:meth:`~kquota.QuotaManager.alter_client_quotas`; the broker properties
(``max.connection.creation.rate``, ``max.connections``, ``max.connections.per.ip``,
``max.connections.per.ip.overrides`` and their ``listener.name.<l>.`` forms) with
:meth:`configure_connections`. The semantics and where kquota differs from Kafka are in
``docs/connection-quotas.md``.
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping, Optional

from kquota._kquota import ConnectionQuotas
from kquota.exceptions import QuotaValueError
from kquota.metrics import Metric

#: Kafka's metric group of the connection-rate metrics.
SOCKET_SERVER_GROUP = "socket-server-metrics"
#: kquota's own connection metrics (counts and totals Kafka does not expose).
CONNECTIONS_GROUP = "KQuotaConnections"


def _prop_text(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Integral)):
        raise QuotaValueError(f"Invalid value {value!r} for configuration {key}: must be an int or its text")
    text = str(value)
    for part in (key, text):
        try:
            part.encode("utf-8")
        except UnicodeEncodeError:
            raise QuotaValueError(f"Invalid configuration {key!r}: it holds a lone surrogate") from None
    return text


class ConnectionQuotasMixin:
    """The connection-quota methods of :class:`~kquota.QuotaManager` (whose ``__init__`` calls
    :meth:`_bind_connections` first)."""

    __slots__ = ()

    def _bind_connections(self) -> None:
        self._conn  # noqa: B018 - binds the per-connection entry points (see _conn)

    @property
    def _conn(self) -> ConnectionQuotas:
        d = self.__dict__  # type: ignore[attr-defined]
        c = d.get("_conn_view")
        if c is None:
            # The native kernel's view of its connection quotas (QuotaKernel._connections);
            # the per-connection entry points are kept bound beside it, so each call below is
            # one Python frame and one native call.
            c = d["_conn_view"] = self._connections()  # type: ignore[attr-defined]
            d["_conn_accept"], d["_conn_admit"], d["_conn_release"] = c.record_accept, c.admit, c.release
        return c

    def record_connection_accept(self, listener: str = "", now_ms: Optional[int] = None) -> int:
        """Records a new connection on ``listener`` into the broker-wide
        (``max.connection.creation.rate``) and listener rates and returns how long (ms) to hold
        it before going on: Kafka's acceptor blocks that long. Call it before
        :meth:`record_connection` for the same connection, which takes it back if the address
        is throttled."""
        return self._conn_accept(listener, now_ms)  # type: ignore[attr-defined, no-any-return]

    def connection_slot_available(self, listener: str = "") -> bool:
        """Whether ``listener`` and the whole server are under their ``max.connections`` (Kafka's
        acceptor waits until they are)."""
        return self._conn.slot_available(listener)

    def record_connection(self, ip: str, now_ms: Optional[int] = None, listener: str = "") -> int:
        """Records a connection from ``ip`` (an IPv4 or IPv6 literal) and returns its throttle.

        ``0``: accepted and counted; call :meth:`release_connection` when it closes. ``> 0``: the
        address is over its ``connection_creation_rate`` (Kafka's bounded throttle, at most one
        quota sample window): close the connection after that many ms; it is not counted and
        is taken back from the rate sensors. Raises
        :class:`~kquota.exceptions.TooManyConnectionsError` when the address already holds
        ``max.connections.per.ip`` (or its override) connections; nothing is counted then.
        """
        return self._conn_admit(ip, listener, now_ms)  # type: ignore[attr-defined, no-any-return]

    def release_connection(self, ip: str, listener: str = "") -> bool:
        """Counts down a connection :meth:`record_connection` counted (Kafka's ``dec``); False
        if ``ip`` held none."""
        return self._conn_release(ip, listener)  # type: ignore[attr-defined, no-any-return]

    def connection_count(self, ip: Optional[str] = None) -> int:
        """Connections counted now for ``ip``, or for every address."""
        return self._conn.total() if ip is None else self._conn.count(ip)

    def connection_rate_for_ip(self, ip: str) -> int:
        """The ``connection_creation_rate`` in force for ``ip`` (Kafka's ``connectionRateForIp``;
        2147483647 means none)."""
        return self._conn.connection_rate_for_ip(ip)

    def configure_connections(self, props: Mapping[str, Any]) -> None:
        """Sets the broker properties that limit connections, from a broker config mapping
        (other keys are ignored): ``max.connection.creation.rate``, ``max.connections``,
        ``max.connections.per.ip``, ``max.connections.per.ip.overrides`` (``ip:count,...``) and
        ``listener.name.<listener>.max.connections`` /
        ``listener.name.<listener>.max.connection.creation.rate``. Each is an int >= 0 as in
        Kafka; the properties not given are unlimited. Nothing changes if one is bad
        (``QuotaValueError``)."""
        if not isinstance(props, Mapping):
            raise QuotaValueError(f"props must be a mapping of broker properties, got {type(props).__name__}")
        pairs = [(str(k), _prop_text(str(k), v)) for k, v in props.items()]
        self._conn.set_limits(pairs)

    def connection_limits(self) -> dict[str, Any]:
        """The broker properties in force (unlimited ones left out)."""
        return self._conn.limits()

    def connection_metrics(self, now_ms: Optional[int] = None) -> list[Metric]:
        """Kafka's connection metrics (group ``socket-server-metrics``: ``connection-accept-rate``
        per ``ip`` with a quota and per ``listener``, ``broker-connection-accept-rate``,
        ``connection-accept-throttle-time`` and ``ip-connection-accept-throttle-time`` per
        listener) and kquota's own (group ``KQuotaConnections``: ``connections`` and
        ``connections-throttled-total`` per ``ip``, the ``connections-accepted-total``,
        ``-throttled-total``, ``-refused-total`` totals, address sensors and their overflow).
        Per-address rows are capped at ``max_sensors``; the rest share the ``ip="<overflow>"``
        row."""
        totals, ips, listeners = self._conn.snapshot(now_ms)
        out: list[Metric] = []
        for ip, rate, _quota, throttled, connections in ips:
            tags = {"ip": ip if ip is not None else "<overflow>"}
            if rate is not None:
                out.append(Metric(SOCKET_SERVER_GROUP, "connection-accept-rate", tags, rate))
                out.append(Metric(CONNECTIONS_GROUP, "connections-throttled-total", tags, float(throttled)))
            out.append(Metric(CONNECTIONS_GROUP, "connections", tags, float(connections)))
        for name, rate, _max_rate, connections, _max_conn, throttle, ip_throttle in listeners:
            if not name:
                continue
            tags = {"listener": name}
            out.append(Metric(SOCKET_SERVER_GROUP, "connection-accept-rate", tags, rate))
            # An Avg without samples is NaN, as Kafka's JMX shows it.
            out.append(Metric(SOCKET_SERVER_GROUP, "connection-accept-throttle-time", tags, throttle))
            out.append(Metric(SOCKET_SERVER_GROUP, "ip-connection-accept-throttle-time", tags, ip_throttle))
            out.append(Metric(CONNECTIONS_GROUP, "listener-connections", tags, float(connections)))
        out.append(Metric(SOCKET_SERVER_GROUP, "broker-connection-accept-rate", {}, totals["broker_rate"]))
        for key, name in (
            ("connections", "connection-count"),
            ("accepted", "connections-accepted-total"),
            ("throttled", "connections-throttled-total"),
            ("refused", "connections-refused-total"),
            ("ip_sensors", "ip-sensor-count"),
            ("overflowed", "ip-sensor-overflow-total"),
            ("expired", "ip-sensors-expired-total"),
        ):
            out.append(Metric(CONNECTIONS_GROUP, name, {}, float(totals[key])))
        return out
