"""``ProxyServer``: the listeners (bootstrap + one port per broker) and the connections.

Port-per-broker (as kroxylicious): clients bootstrap from the ``listen`` address; each broker the
cluster names gets a listener on the same host — port ``listen port + 1 + node id`` when the
listen port is fixed, a free port when it is 0 — and every address the cluster returns is
rewritten to it, so all traffic, and all quota enforcement, passes through the proxy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any, Optional

from kquota._kquota import BROKER_DEFAULTS
from kquota.proxy import handlers  # noqa: F401  (registers the API handlers)
from kquota.proxy.admin import QuotaAdmin
from kquota.proxy.connection import ClientConnection

log = logging.getLogger("kquota.proxy")

DEFAULT_MAX_FRAME_BYTES = 104_857_600  # socket.request.max.bytes
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_MAX_INFLIGHT = 64


class ProxySettings:
    """The options and shared state of a proxy, whichever its data plane (see
    :class:`ProxyServer` for the arguments)."""

    def __init__(
        self,
        qm: Any,
        bootstrap: tuple[str, int],
        listen: tuple[str, int] = ("127.0.0.1", 9192),
        *,
        store: Any = None,
        admin_principals: Iterable[str] = (),
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        request_log: Any = None,
        default_partitions: int = 1,
        advertised_host: Optional[str] = None,
        drain_seconds: float = 5.0,
    ) -> None:
        self.qm = qm
        self.bootstrap = bootstrap
        self.listen = listen
        self.advertised_host = advertised_host or listen[0]
        self.admin = QuotaAdmin(qm, store, admin_principals)
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.max_inflight = max_inflight
        self.request_log = request_log
        self.default_partitions = default_partitions
        self.drain_seconds = drain_seconds
        #: A connection throttled within this long is read one request at a time (the quota
        #: window: quota.window.num x quota.window.size.seconds).
        self.quota_window_seconds = float(getattr(qm, "window_num", BROKER_DEFAULTS["window_num"])
                                          * getattr(qm, "window_size_seconds", BROKER_DEFAULTS["window_size_seconds"]))
        #: topic -> partition count, from the Metadata responses relayed (KIP-599 charges).
        self.topic_partitions: dict[str, int] = {}
        self._bootstrap_port = 0

    @property
    def bootstrap_address(self) -> tuple[str, int]:
        """Where clients bootstrap (the bound port when ``listen`` asked for port 0)."""
        return self.advertised_host, self._bootstrap_port


class ProxyServer(ProxySettings):
    """A Kafka protocol proxy enforcing ``qm``'s quotas on the clients of one cluster.

    Args:
        qm: the ``kquota.QuotaManager`` holding the quotas (keep it in sync with a store with a
            ``QuotaConfigWatcher``; the proxy only reads it, and alters it when there is no store).
        bootstrap: ``(host, port)`` of one broker of the cluster.
        listen: ``(host, port)`` clients bootstrap from; port 0 picks free ports.
        store: the ``ConfigStore`` AlterClientQuotas writes to and DescribeClientQuotas reads
            (``None``: ``qm`` itself).
        admin_principals: user names allowed to alter quotas over the Kafka protocol.
        max_frame_bytes: ``socket.request.max.bytes``; a longer request closes its connection.
        max_connections: client connections beyond this are closed at once.
        max_inflight: requests per connection awaiting answers before the proxy stops reading.
        request_log: a :class:`kquota.proxy.reqlog.RequestLog` (or ``None``).
        default_partitions: the cluster's ``num.partitions`` (KIP-599 charges for CreateTopics
            without a partition count).
        advertised_host: the host written into rewritten addresses (default: the listen host).
    """

    def __init__(self, qm: Any, bootstrap: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 9192),
                 **options: Any) -> None:
        super().__init__(qm, bootstrap, listen, **options)
        #: Read-ahead per socket: a stream stops reading its socket beyond twice this. 4 MiB lets
        #: a whole ~6 MB Fetch response or 1 MB Produce batch arrive without pausing the socket
        #: (pausing and resuming a socket per 2 MiB cost ~30% more proxy CPU when streaming).
        self.stream_limit = 4 << 20
        #: node id -> (broker host, broker port) as the cluster last described it.
        self.brokers: dict[int, tuple[str, int]] = {}
        #: node id -> the proxy port standing for it.
        self.broker_ports: dict[int, int] = {}
        self.connections: set[ClientConnection] = set()
        self.refused_connections = 0
        #: Large frames relayed cut-through (see :mod:`kquota.proxy.streaming`).
        self.streamed_requests = 0
        self.streamed_responses = 0
        #: node id (``None`` = bootstrap) -> connections accepted.
        self.accepted: dict[Optional[int], int] = {}
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self._listener_lock = asyncio.Lock()

    # ------------------------------------------------------------------ addresses

    async def start(self) -> ProxyServer:
        """Opens the bootstrap listener."""
        server = await asyncio.start_server(
            lambda r, w: self._accept(r, w, None), self.listen[0], self.listen[1],
            limit=self.stream_limit, reuse_address=True)
        self._servers.append(server)
        self._bootstrap_port = server.sockets[0].getsockname()[1]
        log.info("kquota proxy listening on %s:%d for bootstrap %s:%d",
                 self.listen[0], self._bootstrap_port, *self.bootstrap)
        return self

    async def broker_listener(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """The proxy address for broker ``node_id`` now at ``host:port`` (listener opened once)."""
        self.brokers[node_id] = (host, port)
        existing = self.broker_ports.get(node_id)
        if existing is not None:
            return self.advertised_host, existing
        async with self._listener_lock:
            existing = self.broker_ports.get(node_id)
            if existing is not None:
                return self.advertised_host, existing
            wanted = 0 if self.listen[1] == 0 else self.listen[1] + 1 + node_id
            if wanted > 65535:
                log.warning("broker %d: port %d is out of range; using a free port", node_id, wanted)
                wanted = 0
            try:
                server = await self._open_broker_port(node_id, wanted)
            except OSError as e:
                if wanted == 0:
                    raise
                log.warning("broker %d: cannot listen on port %d (%s); using a free port", node_id, wanted, e)
                server = await self._open_broker_port(node_id, 0)
            bound = server.sockets[0].getsockname()[1]
            self.broker_ports[node_id] = bound
            log.info("broker %d (%s:%d) is proxied on %s:%d", node_id, host, port, self.listen[0], bound)
            return self.advertised_host, bound

    async def _open_broker_port(self, node_id: int, port: int) -> asyncio.Server:
        server = await asyncio.start_server(
            lambda r, w: self._accept(r, w, node_id), self.listen[0], port,
            limit=self.stream_limit, reuse_address=True)
        self._servers.append(server)
        return server

    # ------------------------------------------------------------------ connections

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      node_id: Optional[int]) -> None:
        if len(self.connections) >= self.max_connections:
            self.refused_connections += 1
            log.warning("connection limit (%d) reached: closing %s", self.max_connections,
                        writer.get_extra_info("peername"))
            writer.close()
            return
        self.accepted[node_id] = self.accepted.get(node_id, 0) + 1
        upstream = self.bootstrap if node_id is None else self.brokers[node_id]
        conn = ClientConnection(self, reader, writer, upstream, node_id)
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)

    def log_request(self, conn: ClientConnection, client_id: str, quota_type: Any, value: float) -> None:
        """Appends one row to the request log (if any)."""
        if self.request_log is not None:
            self.request_log.add(int(time.time() * 1000), conn.user, client_id, quota_type.name, value)

    # ------------------------------------------------------------------ shutdown

    async def close(self) -> None:
        """Stops listening, lets owed answers out (up to ``drain_seconds``), closes everything."""
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.stop_reading()
        deadline = time.monotonic() + self.drain_seconds
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            await conn._close()
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 1.0)
            except asyncio.TimeoutError:
                pass
        if self.request_log is not None:
            self.request_log.close()

    async def __aenter__(self) -> ProxyServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
