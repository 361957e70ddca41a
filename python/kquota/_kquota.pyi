"""Type stubs for the native module ``kquota._kquota`` (hand-written)."""

from typing import Any, Final, Literal, Optional, final

from typing_extensions import disjoint_base

__version__: Final[str]
#: ``"release"`` or ``"dev"``: the Cargo profile the extension was built with.
__build_profile__: Final[str]
__all__ = [
    "QuotaKernel",
    "ClientHandle",
    "MetricsSnapshot",
    "PrometheusStream",
    "_quota_types",
    "_quota_type_value",
    "_register_quota_type",
    "_register_tag_decoder",
    "_noop",
    "KQuotaError",
    "QuotaConfigError",
    "QuotaValueError",
    "ThrottlingQuotaExceededError",
    "TooManyConnectionsError",
    "ConnectionQuotas",
    "TopicQuotas",
    "canonical_ip",
    "validate_connection_rate",
    "CONNECTION_CREATION_RATE",
    "__version__",
    "__build_profile__",
    "CONFIG_KEYS",
    "ENTITY_ABSENT",
    "ENTITY_DEFAULT",
    "ENTITY_NAMED",
    "BROKER_DEFAULTS",
    "MAX_NAME_BYTES",
    "INTERNAL_TAG_PREFIX",
    "ENCODED_TAGS_PREFIX",
    "desanitize",
    "prometheus_name",
    "QuotaConfig",
    "sanitize",
    "validate_quota_changes",
    "combine_throttles",
    "fetch_answer",
    "is_legal_topic_name",
    "MAX_TOPIC_NAME_LENGTH",
    "ProxyDataPlane",
    "parsed_versions",
    "check_listener_tls",
    "check_upstream_tls",
    "client_tls_pem",
    "certificate_subject",
    "SslPrincipalMapper",
]

from kquota.quota_type import ClientQuotaType, QuotaTypeLike

def _quota_types() -> list[tuple[str, int, str, str]]:
    """``(name, value, config key, metric group)`` of every quota type, in value order."""

def _quota_type_value(quota_type: QuotaTypeLike) -> int:
    """The value of a member or of a member's name (``QuotaValueError`` for unknown names)."""

def _register_quota_type(cls: type) -> None:
    """Hands ``kquota.quota_type.ClientQuotaType`` to the extension (called once, at its import)."""

def _register_tag_decoder(decode: Any) -> None:
    """Hands ``kquota.callback.decode_tags`` to the extension (called once, at its import)."""

class KQuotaError(Exception): ...
class QuotaConfigError(KQuotaError, ValueError): ...
class QuotaValueError(KQuotaError, ValueError): ...

class ThrottlingQuotaExceededError(KQuotaError):
    throttle_time_ms: int

class TooManyConnectionsError(KQuotaError):
    ip: str
    max_connections: int

@final
class ClientHandle:
    """Per-connection handle; create once per connection with ``QuotaManager.client``."""

    @property
    def user(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    def record_and_get_throttle_time_ms(self, quota_type: QuotaTypeLike, value: float, now_ms: Optional[int] = None) -> int: ...
    def record_no_throttle(self, quota_type: QuotaTypeLike, value: float, now_ms: Optional[int] = None) -> None: ...
    def unrecord(self, quota_type: QuotaTypeLike, value: float, now_ms: Optional[int] = None) -> None: ...
    def quota_metric_tags(self, quota_type: QuotaTypeLike) -> dict[str, str]: ...
    def quota_limit(self, quota_type: QuotaTypeLike) -> Optional[float]: ...
    def max_value_in_quota_window(self, quota_type: QuotaTypeLike) -> float: ...
    def time_at_quota_ms(self, quota_type: QuotaTypeLike, value: float) -> int: ...
    def peek_throttle_time_ms(self, quota_type: QuotaTypeLike, value: float, now_ms: Optional[int] = None) -> int: ...
    def measured_rate(self, quota_type: QuotaTypeLike, now_ms: Optional[int] = None) -> float: ...
    def record_request_time(self, thread_time_nanos: float, now_ms: Optional[int] = None) -> int: ...
    def record_network_thread_time(self, nanos: float, now_ms: Optional[int] = None) -> None: ...
    def record_controller_mutations(
        self, mutations: float, now_ms: Optional[int] = None, strict: bool = False
    ) -> int: ...
    def controller_mutation_tokens(self, now_ms: Optional[int] = None) -> Optional[float]: ...
    def throttle_response(
        self, byte_quota_type: QuotaTypeLike, byte_throttle_ms: int, request_throttle_ms: int, now_ms: Optional[int] = None
    ) -> tuple[int, Optional[ClientQuotaType]]: ...
    def record_throttle_time(self, quota_type: QuotaTypeLike, throttle_ms: int, now_ms: Optional[int] = None) -> None: ...
    def produce_response(
        self,
        size: float,
        request_nanos: float,
        answered: bool = True,
        now_ms: Optional[int] = None,
        topics: Optional[list[tuple[str, float]]] = None,
    ) -> tuple[int, Optional[ClientQuotaType]]: ...
    def fetch_request_cap(self, topics: Optional[list[str]] = None) -> float: ...
    def fetch_response(
        self,
        size: float,
        cap: float,
        request_nanos: float,
        now_ms: Optional[int] = None,
        topics: Optional[list[tuple[str, float]]] = None,
    ) -> tuple[Literal["deliver", "empty", "deliver_muted"], int, Optional[ClientQuotaType]]: ...
    def request_response(self, nanos: float, now_ms: Optional[int] = None) -> tuple[int, Optional[ClientQuotaType]]: ...
    def mutation_response(
        self, mutation_throttle_ms: int, request_nanos: float, now_ms: Optional[int] = None
    ) -> tuple[int, Optional[ClientQuotaType]]: ...

@disjoint_base
class QuotaKernel:
    """The native kernel; use the subclass ``kquota.QuotaManager``."""

    # Defaults: Kafka's broker defaults (``BROKER_DEFAULTS``).
    def __new__(
        cls,
        window_num: int = ...,
        window_size_seconds: int = ...,
        num_io_threads: int = ...,
        num_network_threads: int = ...,
        producer_default: Optional[float] = None,
        consumer_default: Optional[float] = None,
        metrics_num_samples: int = ...,
        metrics_sample_window_ms: int = ...,
        controller_window_num: int = ...,
        controller_window_size_seconds: int = ...,
        sensor_expiry_seconds: float = ...,
        max_sensors: Optional[int] = None,
        expiry_interval_seconds: Optional[float] = ...,
        max_name_bytes: Optional[int] = None,
        max_client_ids_per_principal: Optional[int] = None,
        fetch_answer: Optional[Literal["deliver-large", "kafka"]] = None,
        **python_only: Any,
    ) -> QuotaKernel: ...
    def _close(self) -> None: ...
    def _name_bytes(self) -> tuple[int, int, int]: ...
    def _client_ids(self, quota_type: QuotaTypeLike) -> tuple[int, int, int]: ...
    @property
    def fetch_answer(self) -> Literal["deliver-large", "kafka"]: ...
    @property
    def metrics_num_samples(self) -> int: ...
    @property
    def metrics_sample_window_ms(self) -> int: ...
    @property
    def controller_window_num(self) -> int: ...
    @property
    def controller_window_size_seconds(self) -> int: ...
    @property
    def window_num(self) -> int: ...
    @property
    def window_size_seconds(self) -> int: ...
    @property
    def num_io_threads(self) -> int: ...
    @property
    def num_network_threads(self) -> int: ...
    @property
    def producer_default(self) -> Optional[float]: ...
    @property
    def consumer_default(self) -> Optional[float]: ...
    def _alter(self, changes: list[tuple[int, str, int, str, str, Optional[float]]], validate_only: bool = False) -> None: ...
    def _describe(self) -> list[tuple[int, str, int, str, dict[str, float]]]: ...
    def record_and_get_throttle_time_ms(
        self, quota_type: QuotaTypeLike, user: str, client_id: str, value: float, now_ms: Optional[int] = None
    ) -> int: ...
    def record_no_throttle(
        self, quota_type: QuotaTypeLike, user: str, client_id: str, value: float, now_ms: Optional[int] = None
    ) -> None: ...
    def unrecord(
        self, quota_type: QuotaTypeLike, user: str, client_id: str, value: float, now_ms: Optional[int] = None
    ) -> None: ...
    def quota_metric_tags(self, quota_type: QuotaTypeLike, user: str, client_id: str) -> dict[str, str]: ...
    def quota_limit(self, quota_type: QuotaTypeLike, user: str, client_id: str) -> Optional[float]: ...
    def max_value_in_quota_window(self, quota_type: QuotaTypeLike, user: str, client_id: str) -> float: ...
    def measured_rate(
        self, quota_type: QuotaTypeLike, user: str, client_id: str, now_ms: Optional[int] = None
    ) -> float: ...
    def record_request_time(
        self, user: str, client_id: str, thread_time_nanos: float, now_ms: Optional[int] = None
    ) -> int: ...
    def record_network_thread_time(
        self, user: str, client_id: str, nanos: float, now_ms: Optional[int] = None
    ) -> None: ...
    def record_exempt_request_time(self, nanos: float, now_ms: Optional[int] = None) -> None: ...
    def exempt_request_rate(self, now_ms: Optional[int] = None) -> float: ...
    def record_controller_mutations(
        self,
        user: str,
        client_id: str,
        mutations: float,
        now_ms: Optional[int] = None,
        strict: bool = False,
    ) -> int: ...
    def controller_mutation_tokens(
        self, user: str, client_id: str, now_ms: Optional[int] = None
    ) -> Optional[float]: ...
    def client(self, user: str, client_id: str) -> ClientHandle: ...
    def _set_callback_adapter(self, adapter: Optional[object]) -> None: ...
    def _invalidate(self, quota_types: Optional[list[QuotaTypeLike]] = None, tags: bool = True) -> None: ...
    def _set_shares(self, quota_type: QuotaTypeLike, default: float, shares: dict[tuple[str, str], float]) -> None: ...
    def _shares(self, quota_type: QuotaTypeLike) -> tuple[float, dict[tuple[str, str], float]]: ...
    def sensor_count(self, quota_type: QuotaTypeLike) -> int: ...
    def _name_cache_info(self) -> dict[str, int]: ...
    def _metrics_snapshot(self, now_ms: Optional[int] = None) -> MetricsSnapshot: ...
    def _prometheus_stream(
        self,
        now_ms: Optional[int],
        extra: list[tuple[str, str, list[tuple[str, str]], float]],
        help: dict[str, str],
    ) -> PrometheusStream: ...
    def _utilization(
        self, now_ms: Optional[int], max_entities: int
    ) -> tuple[
        int,
        list[tuple[int, str, str, float, Optional[float], Optional[str], float, bool]],
        list[tuple[int, int, float, float, float]],
    ]: ...
    def _sensor_stats(self, quota_type: QuotaTypeLike) -> tuple[int, int, int]: ...
    def _estimated_now_ms(self) -> int: ...
    def _expire_sensors(self, now_ms: Optional[int] = None) -> tuple[int, int]: ...
    def _connections(self) -> ConnectionQuotas: ...
    def _topics(self) -> TopicQuotas: ...
    def _stop_expiry(self) -> None: ...
    def _expiry_running(self) -> bool: ...
    def _replay(
        self,
        ts_ms: Any,
        types: Any,
        entity_ids: Any,
        values: Any,
        entities: list[tuple[str, str]],
        out: Any,
        closed: bool = False,
        sent_ms: Optional[Any] = None,
    ) -> None:
        """Batch replay with the GIL released (numpy arrays: ts_ms int64, types int8, entity_ids
        int32, values float64, out int32, sent_ms int64); see ``kquota.pipeline.replay``."""

def _noop(quota_type: QuotaTypeLike, value: float, now_ms: Optional[int] = None) -> int: ...

@final
class MetricsSnapshot:
    """A native copy of every quota metric (built with the GIL released)."""

    @property
    def now_ms(self) -> int: ...
    @property
    def sensor_rows(self) -> int: ...
    def __len__(self) -> int: ...
    def rows(self, start: int, stop: int) -> list[tuple[str, str, Optional[str], Optional[str], float]]: ...
    def topic_rows(self) -> list[tuple[str, str, str, float]]: ...

@final
class PrometheusStream:
    """``bytes`` chunks (about 64 KiB each) of one scrape's Prometheus text exposition."""

    def __iter__(self) -> "PrometheusStream": ...
    def __next__(self) -> bytes: ...

# ---- Kafka's rules, exposed once (rules.rs) ----

#: Dynamic config keys of client quotas, in ``ClientQuotaType`` order.
CONFIG_KEYS: Final[tuple[str, str, str, str]]
#: Entity-side codes of a change tuple: absent, ``<default>``, named.
ENTITY_ABSENT: Final[int]
ENTITY_DEFAULT: Final[int]
ENTITY_NAMED: Final[int]
#: Kafka's broker defaults of the kernel's settings (``quota.window.num`` -> ``window_num``: 11,
#: ...): ints for broker configs, float seconds for ``sensor_expiry_seconds`` and
#: ``expiry_interval_seconds``. The one definition (quota-core ``types.rs``).
BROKER_DEFAULTS: Final[dict[str, Any]]
#: Kafka's wire limit for a principal name or client-id (an int16 string), bytes.
MAX_NAME_BYTES: Final[int]
#: User-tag prefix of the kernel's internal sensors (``"\x01"``).
INTERNAL_TAG_PREFIX: Final[str]
#: User-tag prefix of a callback's tag map kept as JSON (``"\x02"``).
ENCODED_TAGS_PREFIX: Final[str]

def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize`` (a lone surrogate becomes ``?`` first, as in Java)."""

def desanitize(node_name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (Java's ``URLDecoder.decode``); ``ValueError`` on a
    broken ``%`` escape."""

def prometheus_name(group: str, name: str) -> str:
    """``kafka_server_<group>_<name>``: a metric's Prometheus family (no ``_total``)."""

def validate_quota_changes(
    changes: list[tuple[int, str, int, str, str, Optional[float]]],
    capacity_percent: Optional[float] = None,
) -> None:
    """Validates change tuples as an alter does, without a kernel (no thread)."""

def fetch_answer(
    size: float, window_bytes: float, throttle_ms: int, rule: Literal["deliver-large", "kafka"] = "deliver-large"
) -> Literal["deliver", "empty", "deliver_muted"]:
    """The proxy's answer to a recorded Fetch response: ``"deliver"``, ``"empty"`` (Kafka's
    throttled answer, its size taken back) or ``"deliver_muted"`` (delivered, kept recorded,
    muted for at least ``size / quota``); ``window_bytes`` is ``math.inf`` without a quota."""

def is_legal_topic_name(name: str) -> bool:
    """Whether Kafka accepts ``name`` as a topic name (``Topic.validate``); the kernel's rule."""

MAX_TOPIC_NAME_LENGTH: int

def combine_throttles(
    byte_quota_type: QuotaTypeLike, byte_throttle_ms: int, request_throttle_ms: int
) -> tuple[int, Optional[ClientQuotaType]]:
    """``KafkaApis``' combination of a response's byte-rate and request-time throttles:
    ``(throttle_time_ms, enforced type or None)``; records nothing."""

# ---- connection quotas, KIP-612 (connections.rs) ----

#: The config key of ``ip`` entities.
CONNECTION_CREATION_RATE: Final[str]

def canonical_ip(name: str) -> str:
    """The canonical text of an IPv4 or IPv6 literal (``QuotaConfigError`` otherwise)."""

def validate_connection_rate(entity: str, value: float) -> None:
    """Checks a ``connection_creation_rate`` value as Kafka's controller does."""

@final
class TopicQuotas:
    """A kernel's topic quotas (``topic`` entities); see ``QuotaManager.alter_client_quotas``."""

    def set(self, topic: Optional[str], key: str, value: Optional[float]) -> None: ...
    def describe(self) -> list[tuple[Optional[str], str, float]]: ...
    def sensor_stats(self, quota_type: QuotaTypeLike) -> tuple[int, int]: ...
    def set_shares(self, quota_type: QuotaTypeLike, default: float, shares: dict[str, float]) -> None: ...
    def shares(self, quota_type: QuotaTypeLike) -> tuple[float, dict[str, float]]: ...

@final
class ConnectionQuotas:
    """A kernel's connection quotas (Kafka's ``ConnectionQuotas``); see ``QuotaManager``."""

    def record_accept(self, listener: Optional[str] = None, now_ms: Optional[int] = None) -> int: ...
    def slot_available(self, listener: Optional[str] = None) -> bool: ...
    def admit(self, ip: str, listener: Optional[str] = None, now_ms: Optional[int] = None) -> int: ...
    def release(self, ip: str, listener: Optional[str] = None) -> bool: ...
    def count(self, ip: str) -> int: ...
    def total(self) -> int: ...
    def set_limits(self, props: list[tuple[str, str]]) -> None: ...
    def limits(self) -> dict[str, Any]: ...
    def set_ip_rate(self, ip: Optional[str], value: Optional[float]) -> None: ...
    def ip_rates(self) -> list[tuple[Optional[str], float]]: ...
    def connection_rate_for_ip(self, ip: str) -> int: ...
    def expire(self, now_ms: Optional[int] = None) -> int: ...
    def snapshot(
        self, now_ms: Optional[int] = None
    ) -> tuple[
        dict[str, Any],
        list[tuple[Optional[str], Optional[float], Optional[int], int, int]],
        list[tuple[str, float, int, int, int, float, float]],
    ]: ...

@final
class QuotaConfig:
    """Quotas per (type, entity) with Kafka's 8-level precedence (always walked), for plugins."""

    def __new__(cls) -> QuotaConfig: ...
    def set(
        self,
        quota_type: QuotaTypeLike,
        user_kind: int,
        user: str,
        client_kind: int,
        client: str,
        value: Optional[float],
    ) -> None: ...
    def metric_tags(self, quota_type: QuotaTypeLike, user: str, client_id: str) -> tuple[str, str]: ...
    def limit(self, quota_type: QuotaTypeLike, user_tag: str, client_tag: str) -> Optional[float]: ...

def parsed_versions() -> dict[int, tuple[int, int]]:
    """The versions the proxy parses, api key -> (min, max) (the data plane's table, which
    refuses a request of any other version); a new dict at each call."""

@final
class ProxyDataPlane:
    """The proxy's native (tokio) data plane: sockets, frames, ordering, mutes, Produce, Fetch
    and every API relayed unparsed; other inspected APIs go to ``bridge`` (see
    ``kquota.proxy.server``)."""

    def __new__(
        cls,
        kernel: QuotaKernel,
        bridge: object,
        *,
        bootstrap: tuple[str, int],
        listen_host: str,
        listen_port: int,
        advertised_host: str,
        flexible_from: list[int],
        throttle_first: list[int],
        python_keys: list[int],
        exempt_keys: list[int],
        max_frame_bytes: int,
        max_client_sockets: int,
        max_inflight: int,
        quota_window_ms: int,
        request_log: bool,
        threads: int = 1,
        drain_seconds: float = 5.0,
        proxy_protocol: bool = False,
        proxy_protocol_timeout_ms: int = 10000,
        listener_tls: Optional[dict[str, str]] = None,
        upstream_tls: Optional[dict[str, str]] = None,
        max_tls_handshakes: Optional[int] = None,
        proxy_protocol_trusted_sources: Optional[str] = None,
        sasl_listener: bool = False,
        sasl_max_receive_size: int = 524288,
        max_inspected_request_bytes: int = 1048576,
        connections_max_idle_ms: int = 600000,
        shadow: Optional[QuotaKernel] = None,
    ) -> ProxyDataPlane: ...
    def start(self) -> int:
        """Binds the bootstrap listener and starts the runtime; the bound port (``OSError``)."""
    def broker_port(self, node_id: int, host: str, port: int) -> int:
        """The proxy port standing for broker ``node_id`` now at ``host:port`` (opened once)."""
    def forward(self, conn_id: int, slot: int, frame: bytes) -> None:
        """Sends a Python slot's request to the broker (response via ``bridge.on_response``)."""
    def learn_topic_ids(self, pairs: list[tuple[bytes, str]]) -> int: ...
    def protect_topics(self, names: list[str], ids: list[bytes] = ...) -> None:
        """Closes the proxy's own topics to clients (names once; ids added at any time)."""
    def raise_throttle(self, frame: bytes, api_key: int, api_version: int, throttle_ms: int) -> bytes:
        """The response ``frame`` (size prefix included) with ``ThrottleTimeMs`` raised to
        ``throttle_ms`` if lower, where the response version begins with it (``ValueError`` for a
        frame too short to hold it)."""
    def settle(self, conn_id: int, slot: int, data: Optional[bytes], throttle_ms: int) -> None:
        """The slot's answer (a prefixed frame, or ``None``); ``throttle_ms > 0`` mutes after it."""
    def set_user(self, conn_id: int, user: str) -> None:
        """The connection's principal (after SASL) for the native paths' quotas."""
    def user(self, conn_id: int) -> Optional[str]:
        """The connection's principal now (a TLS client's mapped certificate subject, SASL's user,
        or ``ANONYMOUS``); ``None`` once closed."""
    def close_connection(self, conn_id: int, reason: Optional[str] = None) -> None:
        """Closes one client connection (``reason`` is logged)."""
    def stop_reading(self) -> None:
        """Stops accepting connections and reading requests; owed answers still go out."""
    def close(self, drain_seconds: float) -> None:
        """Stops accepting, lets owed answers out (up to ``drain_seconds``), closes everything."""
    def stats(self) -> dict[str, Any]:
        """Counters: connections, refused_client_sockets, streamed_requests/responses, accepted,
        broker_ports, brokers, request_log_dropped, proxy_header_refused, accept_delayed,
        producer_waits; TLS: client_tls_failures and
        broker_tls_failures (cause -> count), refused_tls_handshakes."""
    def take_request_log(
        self,
    ) -> list[tuple[int, str, str, int, float, int, Optional[int], Optional[float], Optional[str]]]:
        """Rows ``(ts_ms, user, client_id, quota type value, value, throttle_time_ms,
        shadow_throttle_time_ms, shadow_delayed_bytes, topic)`` since the last call (the shadow's
        ``None`` without a shadow configuration; ``topic`` ``None`` on a request's own row, the
        topic on its topic rows)."""
    def shadow_totals(self) -> list[tuple[Optional[str], Optional[str], int, int, int]]:
        """The shadow configuration's totals per entity and quota type value: ``(user,
        client_id, quota type value, would-be throttle ms, would-be delayed bytes)``; empty
        without a shadow."""

def check_listener_tls(properties: dict[str, str]) -> list[str]:
    """Builds a TLS listener's server configuration and principal mapper from Kafka broker
    ``ssl.*`` properties (``ssl.principal.mapping.rules`` included), reading every file; returns
    the files watched for reloading. ``QuotaConfigError`` ("property: what is wrong (file)") when
    it cannot be built."""

def check_upstream_tls(properties: dict[str, str]) -> list[str]:
    """Builds the upstream client configuration from Kafka client ``ssl.*`` properties; returns
    the watched files. ``QuotaConfigError`` when it cannot be built."""

def client_tls_pem(
    properties: dict[str, str], seal_password: str
) -> tuple[Optional[str], Optional[str], Optional[str], bool]:
    """Kafka client ``ssl.*`` properties as PEM, read as the upstream connections read them (a
    store's format recognised when its type is not set): (CA certificates or None for the
    system's, certificate chain or None, the key as ENCRYPTED PRIVATE KEY under
    ``seal_password`` or None, endpoint identification). ``QuotaConfigError`` when unreadable."""

def certificate_subject(der: bytes) -> str:
    """A DER certificate's subject in RFC 2253 form, as Java's ``X500Principal.getName``."""

@final
class SslPrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``; ``None``: ``DEFAULT``. ``QuotaConfigError`` for
    rules Kafka refuses."""

    def __new__(cls, rules: Optional[str] = None) -> SslPrincipalMapper: ...
    def name(self, distinguished_name: str) -> str:
        """The principal name (``QuotaValueError`` when no rule applies)."""
    def principal(self, certificate_der: Optional[bytes]) -> str:
        """A TLS client's user: the mapped subject of its DER certificate; ``ANONYMOUS`` for None."""
