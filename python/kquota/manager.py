"""`QuotaManager`: the public facade over the native kernel."""

from __future__ import annotations

import logging
import numbers
from typing import Any, Iterable, Mapping, Optional, Tuple

from kquota._kquota import BROKER_DEFAULTS, QuotaKernel
from kquota.callback import ClusterMetadata, _CallbackAdapter, decode_tags, load_callback
from kquota.connections import ConnectionQuotasMixin
from kquota.delay_queue import DelayQueue
from kquota.entity import IP, TOPIC, ClientQuotaEntity
from kquota.exceptions import KQuotaError, QuotaConfigError, QuotaValueError
from kquota.metrics import Metric, collect
from kquota.quota_type import ClientQuotaType, QuotaTypeLike, coerce_quota_type
from kquota.utilization import DEFAULT_MAX_ENTITIES, Utilization, check_max_entities, from_native, utilization_metrics
from kquota.validation import CONFIG_KEYS, CONNECTION_CREATION_RATE, EntityLike, Ops, entity_from_sides, normalize_alter

__all__ = ["CONFIG_KEYS", "KERNEL_GROUP", "QuotaManager"]

#: Metric group of the kernel's own (non-Kafka) values such as the name-byte budget.
KERNEL_GROUP = "KQuota"

#: The quota type each config key sets.
_KEY_TYPES = {t.config_key: t for t in ClientQuotaType.members()}


class QuotaManager(ConnectionQuotasMixin, QuotaKernel):
    """Kafka's client quota managers for one broker, in process.

    Per-request methods (``record_and_get_throttle_time_ms``, ``record_no_throttle``,
    ``unrecord``, ``quota_metric_tags``, ``quota_limit``, ``max_value_in_quota_window``,
    ``measured_rate``, ``client``) are native; ``now_ms`` is integer milliseconds on a monotonic
    clock, ``None`` reading the kernel's own (CLOCK_MONOTONIC, as ``time.monotonic()``). The
    defaults of the broker settings below are Kafka's, from the core
    (``kquota._kquota.BROKER_DEFAULTS``).
    Connection quotas (KIP-612: ``record_connection`` and the ``ip`` entities) are described in
    :mod:`kquota.connections`.

    Args:
        window_num: ``quota.window.num``, samples per quota window.
        window_size_seconds: ``quota.window.size.seconds``.
        num_io_threads, num_network_threads: the capacity behind ``request_percentage``
            (``(io + network) * 100``).
        producer_default, consumer_default: static broker defaults (KIP-55 step 8), bytes/s.
        callback: a KIP-257 :class:`~kquota.callback.ClientQuotaCallback` instance or its dotted
            class path (``client.quota.callback.class``); ``None`` for Kafka's built-in rules.
        callback_configs: passed to the callback's ``configure()``.
        callback_failure: ``"open"`` (default) lets a request the callback failed to answer,
            with no earlier answer to fall back on, through unthrottled; ``"closed"`` blocks it.
        metrics_num_samples, metrics_sample_window_ms: the broker's ``metrics.num.samples`` and
            ``metrics.sample.window.ms``; Kafka measures the quota-less rates ``mutation-rate`` and
            ``exempt-request-time`` over this window (2 samples of 30 s by default).
        controller_window_num, controller_window_size_seconds: ``controller.quota.window.num`` and
            ``controller.quota.window.size.seconds``, the window of controller-mutation quotas
            (burst = num x size x rate).
        sensor_expiry_seconds: sensors unused for more than this are removed (Kafka: 3600 s).
        max_sensors: cap on live sensors per quota type (``None``: 1,000,000); at the cap new
            tags share an overflow sensor (see ``docs/semantics-notes.md``).
        max_name_bytes: budget for the bytes of names held (sensor tags and the metric-tag
            cache's raw names, all types; ``None``: 256 MiB); past it new tags share an overflow
            sensor as at ``max_sensors``. A single name longer than Kafka's 32,767-byte wire
            limit is refused with ``QuotaValueError``.
        max_client_ids_per_principal: ``kquota.max.client.ids.per.principal``: distinct client
            ids one principal keeps sensors and names for, per quota type (``None``: 1,000);
            past it the principal's new client ids share its own overflow sensor, limited by
            the quota its client ids get, so one principal's flood of client ids never makes
            another principal share a sensor; calls naming no principal (user ``""``) are not
            bounded by it (see ``docs/semantics.md``).
        expiry_interval_seconds: how often the background thread removes idle sensors
            (Kafka: 30 s); ``None`` runs no thread (call :meth:`expire_sensors` yourself).
        fetch_answer: ``kquota.fetch.answer``, how an over-quota Fetch response is answered:
            ``"deliver-large"`` (``None``, the default) answers it empty as Kafka does when it is
            at most a tenth of the quota window and delivers a larger one with a mute, so the
            consumer gets its quota; ``"kafka"`` answers every throttled response empty, exactly
            as Kafka's broker does (a consumer whose responses fill the window then gets about
            half its quota; see ``docs/semantics.md``).
    """

    def __init__(
        self,
        window_num: int = BROKER_DEFAULTS["window_num"],
        window_size_seconds: int = BROKER_DEFAULTS["window_size_seconds"],
        num_io_threads: int = BROKER_DEFAULTS["num_io_threads"],
        num_network_threads: int = BROKER_DEFAULTS["num_network_threads"],
        producer_default: Optional[float] = None,
        consumer_default: Optional[float] = None,
        callback: Any = None,
        callback_configs: Optional[Mapping[str, Any]] = None,
        callback_failure: str = "open",
        metrics_num_samples: int = BROKER_DEFAULTS["metrics_num_samples"],
        metrics_sample_window_ms: int = BROKER_DEFAULTS["metrics_sample_window_ms"],
        controller_window_num: int = BROKER_DEFAULTS["controller_window_num"],
        controller_window_size_seconds: int = BROKER_DEFAULTS["controller_window_size_seconds"],
        sensor_expiry_seconds: float = BROKER_DEFAULTS["sensor_expiry_seconds"],
        max_sensors: Optional[int] = None,
        expiry_interval_seconds: Optional[float] = BROKER_DEFAULTS["expiry_interval_seconds"],
        max_name_bytes: Optional[int] = None,
        max_client_ids_per_principal: Optional[int] = None,
        fetch_answer: Optional[str] = None,
    ) -> None:
        # The native constructor (``__new__``) has validated the values and started the expiry
        # thread; whatever is refused from here on stops that thread, in this one place.
        try:
            self._setup(producer_default, consumer_default, callback, callback_configs, callback_failure,
                        sensor_expiry_seconds, max_sensors, expiry_interval_seconds)
        except BaseException:
            self._stop_background()
            raise

    def _setup(
        self,
        producer_default: Optional[float],
        consumer_default: Optional[float],
        callback: Any,
        callback_configs: Optional[Mapping[str, Any]],
        callback_failure: str,
        sensor_expiry_seconds: float,
        max_sensors: Optional[int],
        expiry_interval_seconds: Optional[float],
    ) -> None:
        self._bind_connections()
        # Types are checked here so that bool or str never pass as numbers.
        for name, value in (
            ("sensor_expiry_seconds", sensor_expiry_seconds),
            ("expiry_interval_seconds", expiry_interval_seconds),
            ("max_sensors", max_sensors),
        ):
            if isinstance(value, bool):
                    raise QuotaValueError(f"{name} must be a number, got {value!r}")
        for name, value in (("producer_default", producer_default), ("consumer_default", consumer_default)):
            # Exact ints past Long.MAX_VALUE (the float 2^63 is what Kafka's toLong accepts).
            if isinstance(value, numbers.Integral) and int(value) >= 2**63:
                    raise QuotaValueError(f"{name} must be at most 2^63 - 1, got {value}")
        if max_sensors is not None and not isinstance(max_sensors, numbers.Integral):
            raise QuotaValueError(f"max_sensors must be an int or None, got {max_sensors!r}")
        self._delay_queues: dict[ClientQuotaType, Any] = {}
        if callback_failure not in ("open", "closed"):
            raise QuotaValueError(f"callback_failure must be 'open' or 'closed', got {callback_failure!r}")
        self._closed = False
        self._callback_failure = callback_failure
        self._adapter: Optional[_CallbackAdapter] = None
        self._callback_errors_before = 0
        if callback is not None:
            self.set_callback(callback, callback_configs)
        elif callback_configs is not None:
            raise QuotaValueError("callback_configs given without a callback")

    # ------------------------------------------------------------------ callbacks (KIP-257)

    @property
    def callback(self) -> Any:
        """The installed ``ClientQuotaCallback``, or ``None`` for the built-in rules."""
        return None if self._adapter is None else self._adapter.callback

    @property
    def callback_errors(self) -> int:
        """How many times a callback raised or answered garbage (since this manager started)."""
        return self._callback_errors_before + (0 if self._adapter is None else self._adapter.errors)

    def set_callback(self, callback: Any, configs: Optional[Mapping[str, Any]] = None) -> None:
        """Replaces the quota callback at run time (an instance, a dotted class path, or ``None``
        for the built-in rules). The new callback is configured before it is installed; then the
        old one's ``close()`` is called. Cached tags and limits are dropped."""
        adapter = None
        if callback is not None:
            instance = load_callback(callback)
            if configs is not None and not isinstance(configs, Mapping):
                raise QuotaValueError(f"callback configs must be a mapping, got {type(configs).__name__}")
            configure = getattr(instance, "configure", None)
            if callable(configure):
                try:
                    configure(dict(configs or {}))
                except Exception as e:
                    # A plugin's rejected config stays a QuotaConfigError (a ValueError).
                    kind = type(e) if isinstance(e, (QuotaConfigError, QuotaValueError)) else KQuotaError
                    raise kind(f"{type(instance).__name__}.configure() failed: {e}") from e
            adapter = _CallbackAdapter(instance, fail_closed=self._callback_failure == "closed")
        elif configs is not None:
            raise QuotaValueError("callback configs given without a callback")
        old = self._adapter
        self._set_callback_adapter(adapter)
        self._adapter = adapter
        if old is not None:
            old.notify("close")
            self._callback_errors_before += old.errors

    def update_cluster_metadata(self, cluster: ClusterMetadata) -> bool:
        """Hands broker metadata to the callback; True if it said quotas changed (cached tags
        and limits are then asked again). Without a callback: False."""
        if self._adapter is None:
            return False
        changed = bool(self._adapter.notify("update_cluster_metadata", cluster))
        if changed:
            self._invalidate(None, True)
        return changed

    def signal_quota_reset(self, quota_type: Optional[QuotaTypeLike] = None) -> None:
        """The push form of ``quota_reset_required``: the callback's tags and limits (of one
        type, or all) are asked again on the next request."""
        self._invalidate(None if quota_type is None else [quota_type], True)

    def quota_metric_tags(self, quota_type: QuotaTypeLike, user: str, client_id: str) -> dict[str, str]:
        """The metric tags the request is recorded under (a callback's own tag map if one is
        installed, else ``{"user": ..., "client-id": ...}``)."""
        tags = super().quota_metric_tags(quota_type, user, client_id)
        if self._adapter is None:
            return tags
        return decode_tags(tags["user"], tags["client-id"])

    # ------------------------------------------------------------------ configuration

    def alter_client_quotas(self, entries: Iterable[Tuple[EntityLike, Ops]], validate_only: bool = False) -> None:
        """Sets or removes quotas, atomically: every entry applies or none does.

        ``entries`` is an iterable of ``(entity, ops)``: ``entity`` a :class:`ClientQuotaEntity`
        or a mapping with ``"user"`` / ``"client-id"`` (``None`` = ``<default>``); ``ops`` maps
        ``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage`` or
        ``controller_mutation_rate`` to a number, or to ``None`` to remove that key. An ``ip``
        entity (``{"ip": "10.1.2.3"}``, ``{"ip": None}`` for ``<default>``) takes
        ``connection_creation_rate`` (KIP-612), a whole number of connections per second. A
        ``topic`` entity (``{"topic": "orders"}``, ``{"topic": None}`` for ``<default>``) takes
        ``producer_byte_rate`` and ``consumer_byte_rate``: the topic's total rate over all its
        partitions, clients and brokers (``docs/topic-quotas.md``).

        Raises :class:`QuotaConfigError` (a ``ValueError``) naming the entity and key of the first
        bad entry; nothing is applied then. With ``validate_only=True`` nothing is applied either.
        """
        normalized = normalize_alter(entries)
        if self._closed:
            raise KQuotaError("the QuotaManager is closed; create a new one")
        # The client changes are checked and applied atomically by the kernel; the ip changes
        # were fully checked above and cannot fail, so they follow only once the kernel accepted.
        self._alter(normalized.changes, bool(validate_only))
        if not validate_only:
            for ip, number in normalized.ip_changes:
                self._conn.set_ip_rate(ip, number)
            # Topic changes were fully checked too (names, keys, values): they follow the same way.
            topics = self._topics()
            for topic, key, number in normalized.topic_changes:
                topics.set(topic, key, number)
        if self._adapter is not None and not validate_only:
            touched = set()
            for entity, values in normalized.entries:
                if entity.is_ip or entity.is_topic:
                    # Kafka's ClientQuotaCallback never sees connection quotas; topic quotas are
                    # not client quotas either.
                    continue
                for key, number in values.items():
                    quota_type = _KEY_TYPES[key]
                    touched.add(quota_type)
                    if number is None:
                        self._adapter.notify("remove_quota", quota_type, entity)
                    else:
                        self._adapter.notify("update_quota", quota_type, entity, number)
            # Kafka re-reads every quota metric's limit after an update; tags too, since a
            # callback may regroup on configuration.
            self._invalidate(sorted(touched, key=int), True)

    def describe_client_quotas(self) -> dict[ClientQuotaEntity, dict[str, float]]:
        """Every configured entity with its keys and values."""
        out = {entity_from_sides(uk, u, ck, c): dict(values) for uk, u, ck, c, values in self._describe()}
        for ip, value in self._conn.ip_rates():
            out[ClientQuotaEntity({IP: ip})] = {CONNECTION_CREATION_RATE: value}
        for topic, key, value in self._topics().describe():
            out.setdefault(ClientQuotaEntity({TOPIC: topic}), {})[key] = value
        return out

    # ------------------------------------------------------------------ observability

    def metrics(self, now_ms: Optional[int] = None, max_entities: Optional[int] = None) -> list[Metric]:
        """Every quota metric as :class:`kquota.Metric` rows with Kafka's groups, names and tags
        (``byte-rate``, ``quota-limit``, ``throttle-time``, ``queue-size``, ``sensor-count``, ...;
        see :mod:`kquota.metrics`), the connection quotas' (:meth:`connection_metrics`) among them,
        and the utilization rows (``quota-utilization``, ``effective-quota``) of
        :meth:`utilization` with ``max_entities`` (see :func:`kquota.utilization.utilization_metrics`).

        Rates are measured at ``now_ms`` (ms on the clock you record with), each sensor at the
        later of that and its own latest time; ``None`` uses the kernel's estimate of that clock
        (the newest time any sensor has seen, advanced by real time since). The snapshot is built
        natively without the GIL and without touching any sensor: a scrape is not a use and
        does not delay expiry.
        """
        rows = collect(self._metrics_snapshot(now_ms), self.extra_metrics())
        return rows + utilization_metrics(self.utilization(max_entities, now_ms))

    def utilization(self, max_entities: Optional[int] = None, now_ms: Optional[int] = None) -> Utilization:
        """KIP-1373's utilization of Produce, Fetch, Request and ControllerMutation quotas: a
        :class:`~kquota.utilization.Utilization` whose ``rows`` are every throttled entity plus
        the ``max_entities`` others with the highest utilization (``None``: 1000, as
        ``kquota.metrics.max.entities``), each with its measured rate, effective quota, the
        precedence level that matched and ``rate / quota x 100`` (NaN when unlimited), and
        whose ``rest`` sums the others per quota type (see :mod:`kquota.utilization`).

        Rates are measured at ``now_ms`` as in :meth:`metrics` (``None``: the kernel's estimate
        of the callers' clock). Computed natively without the GIL from the live sensors, none of
        them touched; with a callback installed, each sensor's last limit is reported (a scrape
        never calls the callback)."""
        k = DEFAULT_MAX_ENTITIES if max_entities is None else check_max_entities(max_entities)
        return from_native(self._utilization(now_ms, k))

    def expire_sensors(self, now_ms: Optional[int] = None) -> int:
        """Removes sensors unused for more than ``sensor_expiry_seconds`` at ``now_ms`` (Kafka's
        ``now - lastRecordTime > expiry``, strictly) and returns how many; ``None`` uses the
        kernel's estimate of the callers' clock. The background thread does this every
        ``expiry_interval_seconds``."""
        removed, _now = self._expire_sensors(now_ms)
        return removed

    def sensor_stats(self, quota_type: Any) -> dict[str, int]:
        """``{"live": ..., "overflowed": ..., "expired": ...}`` for a quota type: live sensors,
        resolutions sent to an overflow sensor at the cap, sensors removed by expiry."""
        live, overflowed, expired = self._sensor_stats(quota_type)
        return {"live": live, "overflowed": overflowed, "expired": expired}

    @property
    def expiry_running(self) -> bool:
        """Whether the background expiry thread runs."""
        return self._expiry_running()

    def delay_queue(self, quota_type: QuotaTypeLike) -> DelayQueue:
        """The quota type's delay queue of throttled channels (``kquota.delay_queue``; Kafka has
        one per quota manager); its size is the ``queue-size`` metric."""
        qt = coerce_quota_type(quota_type)
        q = self._delay_queues.get(qt)
        if q is None:
            q = self._delay_queues[qt] = DelayQueue(qt)
        return q

    def add_metrics_source(self, source: Any) -> None:
        """Adds a callable returning extra :class:`~kquota.metrics.Metric` rows (per-type values,
        no tags) to every :meth:`metrics` call and Prometheus scrape; a config watcher registers
        its ``watcher-errors-total`` and ``config-sync-age-seconds`` this way. A source that
        raises is skipped (and logged), never failing the scrape."""
        if not callable(source):
            raise TypeError(f"a metrics source must be callable, got {type(source).__name__}")
        self.__dict__.setdefault("_metric_sources", []).append(source)

    def remove_metrics_source(self, source: Any) -> None:
        """Removes a source added with :meth:`add_metrics_source` (no-op if absent)."""
        sources = self.__dict__.get("_metric_sources", [])
        if source in sources:
            sources.remove(source)

    def extra_metrics(self) -> list[Metric]:
        """The per-type rows kept beside the kernel's snapshot (part of :meth:`metrics` and of
        every Prometheus scrape): delay queues, the name-byte budget, the connection quotas'
        rows (tagged ``ip`` or ``listener``; the per-address ones capped as the client sensors
        are), and the registered sources."""
        held, limit, refused = self._name_bytes()
        out = self.delay_queue_metrics()
        out += [
            Metric(KERNEL_GROUP, "name-bytes", {}, float(held)),
            Metric(KERNEL_GROUP, "name-bytes-limit", {}, float(limit)),
            Metric(KERNEL_GROUP, "name-bytes-refused-total", {}, float(refused)),
        ]
        out += self.connection_metrics()
        for source in list(self.__dict__.get("_metric_sources", [])):
            try:
                out.extend(source())
            except Exception:
                logging.getLogger("kquota.metrics").exception("a metrics source failed")
        return out

    def delay_queue_metrics(self) -> list[Metric]:
        """One ``queue-size`` row per delay queue created with :meth:`delay_queue`."""
        return [
            Metric(q.quota_type.metric_group, "queue-size", {}, float(q.queue_size))
            # list() copies in one step under the GIL: the exporter thread may read while the
            # event loop's thread adds a queue.
            for q in list(self._delay_queues.values())
        ]

    # ------------------------------------------------------------------ lifecycle

    def _stop_background(self) -> None:
        self._stop_expiry()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stops background work (the expiry thread) and closes the callback; safe to call more
        than once. A closed manager refuses further records and changes with ``KQuotaError``
        (its handles too) instead of running on without expiry."""
        self._stop_background()
        self._close()
        if self._closed:
            return
        self._closed = True
        if self._adapter is not None:
            self._adapter.notify("close")

    def __dir__(self) -> list[str]:
        # The native base class's helpers (``_alter``, ``_describe``, ``_invalidate``, ...) and
        # this class's own are private: completion and ``dir()`` show the public API only. The
        # class stays a subclass of the native kernel so per-request calls remain one C call.
        return sorted(n for n in super().__dir__() if not n.startswith("_") or n.startswith("__"))

    def __enter__(self) -> "QuotaManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"QuotaManager(window_num={self.window_num}, window_size_seconds={self.window_size_seconds}, "
            f"entities={len(self.describe_client_quotas())})"
        )
