"""``ProxyServer``: the proxy with its data plane in Rust (tokio), Python for the rest.

``kquota._kquota.ProxyDataPlane`` owns every socket (listeners, client and broker connections),
frames, ordering, mutes and back-pressure, and runs Produce, Fetch and every API relayed unparsed
natively. The APIs the proxy inspects otherwise (ApiVersions, Metadata, FindCoordinator,
DescribeCluster, SASL, Create/DeleteTopics, CreatePartitions, Describe/AlterClientQuotas) come to
Python through a bridge and run their handlers (:mod:`kquota.proxy.handlers`) on a
:class:`kquota.proxy.bridge.BridgeConnection`.

The bridge's methods are called on native threads: they only schedule work on the proxy's event
loop and return, so the native plane never waits for Python.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

from kquota.connections import CONNECTIONS_GROUP
from kquota.metrics import Metric
from kquota.quota_type import ClientQuotaType
from kquota.proxy import handlers  # noqa: F401  (handlers registers the API handlers)
from kquota.proxy.own_topics import ONLY_FOR_OWN_TOPICS, OwnTopics, own_topic_names, resolve_ids
from kquota.kafka.protocol import apis
from kquota.proxy.bridge import BridgeConnection
from kquota.proxy.dispatch import _DISPATCH, handler_for
from kquota.kafka.protocol.frames import RequestHeader
from kquota.proxy.request import Pending
from kquota.proxy.shadow import ShadowPrediction, predictions, shadow_metrics
from kquota.kafka.protocol.schemas import FLEXIBLE_FIRST, THROTTLE_FIRST
from kquota.proxy.settings import ProxySettings

log = logging.getLogger("kquota.proxy")
#: How often the native request-log rows are moved to the ``RequestLogWriter`` (seconds).
REQUEST_LOG_DRAIN_SECONDS = 0.2

__all__ = ["BridgeConnection", "ProxyServer", "python_keys", "serve", "version_table"]


def version_table(first: dict[int, int]) -> list[int]:
    """``{api key: first version}`` as a list indexed by api key (-1: never)."""
    top = max(max(FLEXIBLE_FIRST), max(THROTTLE_FIRST), max(_DISPATCH))
    return [first.get(key, -1) for key in range(top + 1)]


def python_keys() -> list[int]:
    """The APIs handed to Python: those with a handler (Produce, Fetch and every API relayed
    unparsed stay native)."""
    return sorted(_DISPATCH)


class _Bridge:
    """What the native plane calls (on its own threads, GIL held): each call is queued on the
    proxy's event loop and returns at once."""

    __slots__ = ("_loop", "_server")

    def __init__(self, loop: asyncio.AbstractEventLoop, server: ProxyServer) -> None:
        self._loop = loop
        self._server = server

    def on_request(self, conn_id: int, slot: int, node_id: int, frame: bytes, ns: int,
                   header: tuple[int, int, int, str, int]) -> None:
        self._loop.call_soon_threadsafe(self._server._on_request, conn_id, slot, node_id, frame, ns, header)

    def on_response(self, conn_id: int, slot: int, frame: bytes) -> None:
        self._loop.call_soon_threadsafe(self._server._on_response, conn_id, slot, frame)

    def on_close(self, conn_id: int, reason: Optional[str] = None) -> None:
        self._loop.call_soon_threadsafe(self._server._on_close, conn_id, reason)


class _OpenConnections:
    """The number of client connections open now (the native plane's count)."""

    def __init__(self, server: ProxyServer) -> None:
        self._server = server

    def __len__(self) -> int:
        return int(self._server._stats().get("connections", 0))


class ProxyServer(ProxySettings):
    """A Kafka protocol proxy enforcing ``qm``'s quotas, its data plane native.

    The arguments of :class:`kquota.proxy.settings.ProxySettings` (see there), plus ``threads``:
    the native plane's worker threads; ``listener_tls``: the ``ssl.*`` broker properties of a
    TLS listener (SSL / SASL_SSL clients, ``kquota.proxy.tls_settings.listener_tls``), the
    client's principal its certificate's mapped subject; ``upstream_tls``: the ``ssl.*`` client
    properties of the proxy's TLS connections to the brokers (``upstream_security``). ``None``:
    that side is plaintext. ``max_tls_handshakes``: client handshakes under way at most (they
    take no ``max_client_sockets`` place; default the larger of 1024 and ``max_client_sockets``).
    ``shadow``: a second ``QuotaManager`` (``--shadow-store``'s) evaluated on the same traffic
    and never enforced (:mod:`kquota.proxy.shadow`; :meth:`shadow_predictions`); ``shadow_store``:
    the store it follows, whose topics a ``kafka://`` one closes to clients as ``store``'s (a
    client writing them would write the configuration a promotion enforces).

    Port-per-broker (as kroxylicious): clients bootstrap from the ``listen`` address; each broker
    the cluster names gets a listener on the same host (port ``listen port + 1 + node id`` when
    the listen port is fixed, a free port when it is 0) and every address the cluster returns is
    rewritten to it, so all traffic, and all quota enforcement, passes through the proxy.
    """

    def __init__(self, qm: Any, bootstrap: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 9192),
                 *, threads: int = 1, listener_tls: Optional[dict[str, str]] = None,
                 upstream_tls: Optional[dict[str, str]] = None, max_tls_handshakes: Optional[int] = None,
                 shadow: Any = None, shadow_store: Any = None, **options: Any) -> None:
        super().__init__(qm, bootstrap, listen, **options)
        if shadow is not None and shadow is qm:
            raise ValueError("the shadow QuotaManager must not be the enforced one")
        self.shadow = shadow
        self.threads = threads
        self.listener_tls = listener_tls
        self.upstream_tls = upstream_tls
        self.max_tls_handshakes = max_tls_handshakes
        self.connections = _OpenConnections(self)
        #: The proxy's own topics (a kafka:// store's), closed to clients.
        self.own_topics = OwnTopics(own_topic_names(options.get("store")) | own_topic_names(shadow_store))
        self._store = options.get("store")
        self._shadow_store = shadow_store
        self._plane: Any = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._bridged: dict[int, BridgeConnection] = {}
        self._tasks: set[asyncio.Task] = set()
        self._drainer: Optional[asyncio.Task] = None
        self._last_stats: dict = {}
        self._last_shadow: list = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> ProxyServer:
        """Starts the native plane and opens the bootstrap listener (``OSError`` if it cannot)."""
        self._loop = asyncio.get_running_loop()
        self._plane = self.data_plane(_Bridge(self._loop, self))
        await self._protect_own_topics(self._plane)
        self._bootstrap_port = self._plane.start()
        self.qm.add_metrics_source(self.accept_metrics)
        if self.shadow is not None:
            self.qm.add_metrics_source(self._shadow_metrics)
        if self.listener_tls is not None or self.upstream_tls is not None:
            self.qm.add_metrics_source(self._tls_metrics)
        if self.request_log is not None:
            self._drainer = self._loop.create_task(self._drain_request_log())
        log.info("kquota proxy listening on %s:%d for bootstrap %s:%d (native data plane)",
                 self.listen[0], self._bootstrap_port, *self.bootstrap)
        return self

    def data_plane(self, bridge: Any) -> Any:
        """A ``kquota._kquota.ProxyDataPlane`` of these settings, not started, calling ``bridge``
        (what :meth:`start` starts; its protocol tables are the codec's, the versions it parses its own)."""
        from kquota._kquota import ProxyDataPlane

        return ProxyDataPlane(
            self.qm, bridge,
            bootstrap=(self.bootstrap[0], int(self.bootstrap[1])),
            listen_host=self.listen[0], listen_port=int(self.listen[1]),
            advertised_host=self.advertised_host,
            flexible_from=version_table(FLEXIBLE_FIRST), throttle_first=version_table(THROTTLE_FIRST),
            python_keys=[k for k in python_keys() if self.own_topics.names or k not in ONLY_FOR_OWN_TOPICS],
            exempt_keys=sorted(apis.REQUEST_QUOTA_EXEMPT),
            max_frame_bytes=self.max_frame_bytes, max_client_sockets=self.max_client_sockets,
            max_inflight=self.max_inflight, quota_window_ms=int(self.quota_window_seconds * 1000),
            request_log=self.request_log is not None, threads=self.threads, drain_seconds=self.drain_seconds,
            proxy_protocol=self.proxy_protocol, proxy_protocol_timeout_ms=self.proxy_protocol_timeout_ms,
            listener_tls=self.listener_tls, upstream_tls=self.upstream_tls,
            max_tls_handshakes=self.max_tls_handshakes,
            proxy_protocol_trusted_sources=self.proxy_protocol_trusted_sources, sasl_listener=self.sasl_listener,
            sasl_max_receive_size=self.sasl_max_receive_size,
            max_inspected_request_bytes=self.max_inspected_request_bytes,
            connections_max_idle_ms=self.connections_max_idle_ms, shadow=self.shadow)

    async def _protect_own_topics(self, plane: Any) -> None:
        """Closes the own topics on the native paths before any client connects: their names,
        the ids the store's cluster gives now, and every id learned later."""
        own = self.own_topics
        if not own.names:
            return
        names = sorted(own.names)
        ids: list[bytes] = []
        for store in (self._store, self._shadow_store):
            if own_topic_names(store):
                ids += await asyncio.get_running_loop().run_in_executor(
                    None, resolve_ids, store, sorted(own_topic_names(store)))
        plane.protect_topics(names, ids)
        own.ids.update(ids)
        own.on_id = lambda topic_id: plane.protect_topics(names, [topic_id])
        log.info("own topics closed to clients: %s (%d ids known)", ", ".join(names), len(ids))

    async def close(self) -> None:
        """Stops listening, lets owed answers out (up to ``drain_seconds``), closes everything."""
        if self._plane is None:
            return
        if self._drainer is not None:
            self._drainer.cancel()
        plane = self._plane
        self.qm.remove_metrics_source(self.accept_metrics)
        self.qm.remove_metrics_source(self._shadow_metrics)
        plane.stop_reading()
        # Answers owed to Python slots are settled by this loop meanwhile.
        deadline = time.monotonic() + self.drain_seconds
        while plane.stats()["connections"] and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._take_request_log()  # before close: the plane's rows go with its runtime
        self._last_stats = plane.stats()
        self._last_shadow = plane.shadow_totals()
        if self.listener_tls is not None or self.upstream_tls is not None:
            self.qm.remove_metrics_source(self._tls_metrics)
        await asyncio.get_running_loop().run_in_executor(None, plane.close, max(0.0, deadline - time.monotonic()))
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for conn in self._bridged.values():
            conn.closed = True
        self._bridged.clear()
        self._plane = None
        if self.request_log is not None:
            self.request_log.close()

    async def __aenter__(self) -> ProxyServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ native counters

    def _stats(self) -> dict:
        return self._plane.stats() if self._plane is not None else self._last_stats

    def accept_metrics(self) -> list[Metric]:
        """The accept loop's own totals (group ``KQuotaConnections``), beside the kernel's
        accepted/throttled/refused: connections closed for a bad or missing PROXY protocol
        header, or from a peer outside ``kquota.proxy.protocol.trusted.sources``, accepts held by
        the broker-wide or listener creation rate, client sockets closed by the descriptor guard
        (``kquota.proxy.max.client.sockets``), connections closed for ``connections.max.idle.ms``, and before authentication on a
        SASL listener."""
        stats = self._stats()
        return [Metric(CONNECTIONS_GROUP, name, {}, float(stats.get(key, 0))) for name, key in (
            ("proxy-protocol-refused-total", "proxy_header_refused"),
            ("proxy-protocol-untrusted-total", "proxy_protocol_untrusted"),
            ("idle-closed-total", "idle_closed"),
            ("pre-authentication-refused-total", "preauth_refused"),
            ("accepts-delayed-total", "accept_delayed"),
            ("client-sockets-refused-total", "refused_client_sockets"))]

    @property
    def streamed_requests(self) -> int:
        """Large Produce requests relayed cut-through."""
        return int(self._stats().get("streamed_requests", 0))

    @property
    def streamed_responses(self) -> int:
        """Large Fetch responses relayed cut-through."""
        return int(self._stats().get("streamed_responses", 0))

    @property
    def producer_waits(self) -> int:
        """Produce requests that waited for a throttle their producer was given on another of
        its connections (a producer's throttle holds all its connections: one that reconnects
        while throttled does not escape it)."""
        return int(self._stats().get("producer_waits", 0))

    @property
    def refused_client_sockets(self) -> int:
        """Client sockets closed at once by the descriptor guard (``max_client_sockets``)."""
        return int(self._stats().get("refused_client_sockets", 0))

    @property
    def tls_failures(self) -> dict[str, dict[str, int]]:
        """TLS handshake failures by side (``client``, ``broker``) and cause, plus
        ``refused_handshakes`` (client handshakes refused at the bound) under ``client``."""
        stats = self._stats()
        client = dict(stats.get("client_tls_failures", {}))
        client["refused_handshakes"] = int(stats.get("refused_tls_handshakes", 0))
        return {"client": client, "broker": dict(stats.get("broker_tls_failures", {}))}

    def _tls_metrics(self) -> list:
        """TLS handshake failures for the metrics port (group ``ProxyTls``, one counter per side and
        cause: ``client-expired-certificate-total``, ``broker-name-mismatch-total``, ...)."""
        from kquota.metrics import Metric

        return [Metric("ProxyTls", f"{side}-{cause.replace('_', '-')}-total", {}, float(n))
                for side, causes in self.tls_failures.items() for cause, n in causes.items()]

    @property
    def broker_ports(self) -> dict[int, int]:
        """node id -> the proxy port standing for it."""
        return dict(self._stats().get("broker_ports", {}))

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        """node id -> (broker host, broker port) as the cluster last described it."""
        return dict(self._stats().get("brokers", {}))

    @property
    def accepted(self) -> dict[Optional[int], int]:
        """node id (``None`` = bootstrap) -> connections accepted."""
        return {(None if k == -1 else k): v for k, v in self._stats().get("accepted", {}).items()}

    async def broker_listener(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """The proxy address for broker ``node_id`` now at ``host:port`` (listener opened once)."""
        return self.advertised_host, self._plane.broker_port(node_id, host, port)

    # ------------------------------------------------------------------ shadow quotas

    def shadow_predictions(self) -> list[ShadowPrediction]:
        """The shadow configuration's totals since the proxy started, per entity and quota type:
        would-be throttle time (ms) and would-be delayed bytes (:mod:`kquota.proxy.shadow`);
        empty without a shadow. Safe to call from any thread; after :meth:`close`, the last."""
        plane = self._plane
        return predictions(plane.shadow_totals() if plane is not None else self._last_shadow)

    def _shadow_metrics(self) -> list[Metric]:
        return shadow_metrics(self.shadow_predictions())

    # ------------------------------------------------------------------ request log

    def _take_request_log(self) -> None:
        if self.request_log is None or self._plane is None:
            return
        for ts_ms, user, client_id, quota_type, value, throttle, shadow_ms, shadow_bytes, topic in \
                self._plane.take_request_log():
            self.request_log.add(ts_ms, user, client_id, ClientQuotaType(quota_type).name, value, throttle,
                                 shadow_ms, shadow_bytes, topic)

    async def _drain_request_log(self) -> None:
        while True:
            await asyncio.sleep(REQUEST_LOG_DRAIN_SECONDS)
            self._take_request_log()

    # ------------------------------------------------------------------ the bridge (on the loop)

    def _spawn(self, conn: BridgeConnection, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(conn, t))

    def _done(self, conn: BridgeConnection, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            conn.fail(task.exception())  # type: ignore[arg-type]

    def _on_request(self, conn_id: int, slot: int, node_id: int, frame: bytes, ns: int,
                    header: tuple[int, int, int, str, int]) -> None:
        conn = self._bridged.get(conn_id)
        if conn is None:
            if self._plane is None:
                return
            conn = self._bridged[conn_id] = BridgeConnection(self, self._plane, conn_id,
                                                             None if node_id < 0 else node_id)
            # A TLS client's principal (its certificate's) is known before any request.
            conn._user = self._plane.user(conn_id) or conn._user
        self._spawn(conn, self._handle(conn, slot, frame, ns, RequestHeader(*header)))

    async def _handle(self, conn: BridgeConnection, slot: int, frame: bytes, ns: int, header: RequestHeader) -> None:
        # ``header`` is the one the native plane parsed (api key, version, correlation id,
        # client id, body offset): the frame is not parsed again here.
        t0 = time.perf_counter_ns()
        p = Pending(header, ns)
        conn.slots[p] = slot
        handler = handler_for(header)
        if handler is None:  # never: python_keys are handled APIs
            raise RuntimeError(f"no handler for api key {header.api_key}")
        await handler(conn, p, frame, t0)  # type: ignore[arg-type]
        if p in conn.slots:
            raise RuntimeError(f"the api key {header.api_key} handler neither forwarded nor answered")

    def _on_response(self, conn_id: int, slot: int, frame: bytes) -> None:
        conn = self._bridged.get(conn_id)
        if conn is None:
            return
        p = conn.forwarded.pop(slot, None)
        if p is None or p.on_response is None:
            conn.fail(RuntimeError(f"a response for slot {slot}, which was not forwarded"))
            return
        self._spawn(conn, self._respond(conn, slot, p, frame))

    async def _respond(self, conn: BridgeConnection, slot: int, p: Pending, frame: bytes) -> None:
        assert p.on_response is not None
        data, throttle = await p.on_response(p, frame)
        conn.settle(slot, data, throttle)

    def _on_close(self, conn_id: int, reason: Optional[str]) -> None:
        conn = self._bridged.pop(conn_id, None)
        if reason and (conn is None or not conn.closed):
            log.info("closing native connection %d: %s", conn_id, reason)  # the plane's own reason
        if conn is not None:
            conn.closed = True


async def serve(qm: Any, bootstrap: tuple[str, int], listen: tuple[str, int],
                stop: Optional[asyncio.Event] = None, **options: Any) -> None:
    """Runs a :class:`ProxyServer` until ``stop`` is set (forever if ``None``): the asyncio
    entry point."""
    proxy = ProxyServer(qm, bootstrap, listen, **options)
    await proxy.start()
    try:
        await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        await proxy.close()
