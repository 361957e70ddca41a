"""``ProxySettings``: the options and shared state of a ``kquota proxy``, apart from its data
plane (:class:`kquota.proxy.server.ProxyServer` builds on it), and the request log's one
writer for the requests handled in Python."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Optional

from kquota._kquota import BROKER_DEFAULTS
from kquota.proxy.admin import QuotaAdmin

DEFAULT_MAX_FRAME_BYTES = 104_857_600  # socket.request.max.bytes
#: kquota.proxy.max.client.sockets: the proxy's guard against running out of file descriptors
#: (each session holds two, the client's and the broker's). Kafka's max.connections is apart:
#: the kernel's, unlimited by default, and a connection over it waits as at Kafka's acceptor.
DEFAULT_MAX_CLIENT_SOCKETS = 4096
DEFAULT_MAX_INFLIGHT = 64
DEFAULT_PROXY_PROTOCOL_TIMEOUT_MS = 10_000  # kquota.proxy.protocol.timeout.ms
DEFAULT_SASL_MAX_RECEIVE_SIZE = 524_288  # sasl.server.max.receive.size
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000  # connections.max.idle.ms
#: kquota.proxy.inspected.request.max.bytes: the requests handed to Python (ApiVersions, Metadata,
#: SASL, Create/DeleteTopics, CreatePartitions, Describe/AlterClientQuotas, ...) are small, so their
#: size is bounded far below socket.request.max.bytes before Python holds them.
DEFAULT_MAX_INSPECTED_REQUEST_BYTES = 1_048_576
#: kquota.proxy.decoded.request.max.bytes: of those, the requests whose body Python decodes
#: (Create/DeleteTopics, CreatePartitions, Describe/AlterClientQuotas). Their decode makes about
#: one Python object per 3 bytes, and a collection of the garbage collector's oldest generation
#: walks every one of them, holding the GIL: 128 KiB (~130K objects) keeps that walk short.
DEFAULT_MAX_DECODED_REQUEST_BYTES = 131_072


class ProxySettings:
    """The options and shared state of a Kafka protocol proxy enforcing ``qm``'s quotas on the
    clients of one cluster.

    Args:
        qm: the ``kquota.QuotaManager`` holding the quotas (keep it in sync with a store with a
            ``QuotaConfigWatcher``; the proxy only reads it, and alters it when there is no store).
        bootstrap: ``(host, port)`` of one broker of the cluster.
        listen: ``(host, port)`` clients bootstrap from; port 0 picks free ports.
        store: the ``ConfigStore`` AlterClientQuotas writes to and DescribeClientQuotas reads
            (``None``: ``qm`` itself).
        admin_principals: user names allowed to alter (and describe) quotas over the Kafka
            protocol.
        describe_principals: user names allowed to describe quotas over the Kafka protocol
            (others are answered CLUSTER_AUTHORIZATION_FAILED, as Kafka without DESCRIBE_CONFIGS).
        token_owners: a :class:`kquota.proxy.token_owners.TokenOwners` naming the owner of a
            delegation token a client authenticated with (``None``: counted under the token id).
        sasl_listener: the listener is SASL_PLAINTEXT or SASL_SSL: a connection is ANONYMOUS
            until the broker completes its SASL exchange, and its principal is that exchange's;
            on any other listener it is ANONYMOUS (or its certificate's) from the start and SASL
            requests are answered ILLEGAL_SASL_STATE, as Kafka answers them.
        max_frame_bytes: ``socket.request.max.bytes``; a longer request closes its connection.
        max_client_sockets: ``kquota.proxy.max.client.sockets``: client sockets held at once
            (sessions, and sockets still reading their PROXY header or held for an IP throttle);
            one more is closed at once, the proxy's guard against running out of file
            descriptors. Kafka's ``max.connections`` is the connection quotas' (``qm``), where a
            connection over it waits, as at Kafka's acceptor.
        max_inflight: requests per connection awaiting answers before the proxy stops reading.
        request_log: a :class:`kquota.proxy.request_log_writer.RequestLogWriter` (or ``None``).
        default_partitions: the cluster's ``num.partitions`` (KIP-599 charges for CreateTopics
            without a partition count).
        advertised_host: the host written into rewritten addresses (default: the listen host).
        drain_seconds: how long closing waits for the answers still owed.
        proxy_protocol: every listener takes a PROXY protocol header (v1 or v2, as HAProxy and
            cloud load balancers send it) first, takes the client's address from it for the
            connection quotas, and closes connections without a valid one
            (``kquota.proxy.protocol.enable``).
        proxy_protocol_timeout_ms: how long a connection may take to send that header.
        proxy_protocol_trusted_sources: the balancers whose PROXY header is believed, as
            comma-separated CIDR blocks (``kquota.proxy.protocol.trusted.sources``); required with
            ``proxy_protocol``: a connection from any other peer is closed unread and counted.
        sasl_max_receive_size: ``sasl.server.max.receive.size``: on a ``sasl_listener``, until a
            connection has authenticated its frames are bounded by it and only ApiVersions and
            SASL requests are read.
        max_inspected_request_bytes: ``kquota.proxy.inspected.request.max.bytes``: a longer request
            of an API handled in Python closes its connection before Python sees it.
        max_decoded_request_bytes: ``kquota.proxy.decoded.request.max.bytes``: a longer request
            whose body Python decodes (the admin APIs) closes its connection undecoded.
        connections_max_idle_ms: ``connections.max.idle.ms``: a connection with no bytes either
            way for this long is closed (also one still sending its PROXY header or TLS handshake).
    """

    def __init__(
        self,
        qm: Any,
        bootstrap: tuple[str, int],
        listen: tuple[str, int] = ("127.0.0.1", 9192),
        *,
        store: Any = None,
        admin_principals: Iterable[str] = (),
        describe_principals: Iterable[str] = (),
        sasl_listener: bool = False,
        token_owners: Any = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_client_sockets: int = DEFAULT_MAX_CLIENT_SOCKETS,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        request_log: Any = None,
        default_partitions: int = 1,
        advertised_host: Optional[str] = None,
        drain_seconds: float = 5.0,
        proxy_protocol: bool = False,
        proxy_protocol_timeout_ms: int = DEFAULT_PROXY_PROTOCOL_TIMEOUT_MS,
        proxy_protocol_trusted_sources: Optional[str] = None,
        sasl_max_receive_size: int = DEFAULT_SASL_MAX_RECEIVE_SIZE,
        max_inspected_request_bytes: int = DEFAULT_MAX_INSPECTED_REQUEST_BYTES,
        max_decoded_request_bytes: int = DEFAULT_MAX_DECODED_REQUEST_BYTES,
        connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS,
    ) -> None:
        self.qm = qm
        self.bootstrap = bootstrap
        self.listen = listen
        self.advertised_host = advertised_host or listen[0]
        self.admin = QuotaAdmin(qm, store, admin_principals, describe_principals)
        self.sasl_listener = sasl_listener
        self.token_owners = token_owners
        self.max_frame_bytes = max_frame_bytes
        self.max_client_sockets = max_client_sockets
        self.max_inflight = max_inflight
        self.request_log = request_log
        self.default_partitions = default_partitions
        self.drain_seconds = drain_seconds
        self.proxy_protocol = proxy_protocol
        self.proxy_protocol_timeout_ms = proxy_protocol_timeout_ms
        self.proxy_protocol_trusted_sources = proxy_protocol_trusted_sources
        self.sasl_max_receive_size = sasl_max_receive_size
        self.max_inspected_request_bytes = max_inspected_request_bytes
        self.max_decoded_request_bytes = max_decoded_request_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
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

    def log_request(self, conn: Any, client_id: str, quota_type: Any, value: float) -> None:
        """Appends one row to the request log (if any) for a request handled in Python."""
        if self.request_log is not None:
            self.request_log.add(int(time.time() * 1000), conn.user, client_id, quota_type.name, value)
