"""Pluggable quota callbacks (KIP-257): the interface, cluster metadata, and the kernel adapter.

A ``ClientQuotaCallback`` decides which requests share a quota (their metric tags) and what the
quota is (the limit for a tag set). The kernel asks it only on a cache miss: tags once per
(quota type, principal, client-id) and the limit once per tag set, until a quota update, a
cluster-metadata change, or a reset the callback signals (``quota_reset_required`` returning
True, polled on every request only if the class overrides it, or
``QuotaManager.signal_quota_reset``). A cached request costs the same as without a callback.

A callback that raises or answers garbage (tags that are not a ``dict`` of ``str`` to ``str``, a
limit that is negative, NaN or not a number) never reaches the host: the error is logged on the
``kquota.callback`` logger, counted (``QuotaManager.callback_errors``), and the request proceeds
on the last good answer; with none, it is unthrottled (``callback_failure="open"``, the default)
or blocked (``"closed"``). A limit of 0 blocks: the maximum throttle for the quota type.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from kquota import _kquota
from kquota.quota_type import ClientQuotaType
from kquota.entity import ClientQuotaEntity, KafkaPrincipal
from kquota.exceptions import KQuotaError

__all__ = ["ENCODED_TAGS_PREFIX", "ClientQuotaCallback", "ClusterMetadata", "PartitionInfo", "decode_tags",
           "encode_tags", "load_callback"]

logger = logging.getLogger("kquota.callback")

#: Prefix of the kernel tag under which a tag map that is not exactly {"user", "client-id"} is
#: stored (as canonical JSON); a control character, so no real tag value collides with it. The
#: core's definition (the Prometheus exposition strips it); public for the metric readers.
ENCODED_TAGS_PREFIX: str = _kquota.ENCODED_TAGS_PREFIX


@dataclass(frozen=True)
class PartitionInfo:
    """One partition and the broker leading it (``None`` while it has no leader)."""

    topic: str
    partition: int
    leader: Optional[int]


@dataclass(frozen=True)
class ClusterMetadata:
    """What a callback learns about the cluster (KIP-257 passes Kafka's ``Cluster``).

    ``broker_id`` is the broker this quota manager runs on.
    """

    broker_id: int
    partitions: tuple[PartitionInfo, ...] = field(default=())

    @classmethod
    def from_leaders(cls, broker_id: int, leaders: Mapping[str, Mapping[int, Optional[int]]]) -> "ClusterMetadata":
        """Builds metadata from ``{topic: {partition: leader broker id}}``."""
        parts = tuple(
            PartitionInfo(topic, int(p), None if leader is None else int(leader))
            for topic, by_partition in sorted(leaders.items())
            for p, leader in sorted(by_partition.items())
        )
        return cls(int(broker_id), parts)

    def topics(self) -> set[str]:
        """Every topic with at least one partition."""
        return {p.topic for p in self.partitions}

    def partitions_for_topic(self, topic: str) -> list[PartitionInfo]:
        """The partitions of ``topic`` in partition order."""
        return sorted((p for p in self.partitions if p.topic == topic), key=lambda p: p.partition)

    def leader(self, topic: str, partition: int) -> Optional[int]:
        """The leader of one partition (``None`` if unknown or leaderless)."""
        for p in self.partitions:
            if p.topic == topic and p.partition == partition:
                return p.leader
        return None


class ClientQuotaCallback:
    """KIP-257's ``ClientQuotaCallback``. Subclass it and override what you need.

    ``quota_metric_tags`` and ``quota_limit`` are required; the other methods default to doing
    nothing. Tag maps may use any keys; the tags alone decide who shares a sensor. Use the keys
    ``"user"`` and ``"client-id"`` to get Kafka-style metric names.
    """

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Receives ``callback_configs`` once, before any other call."""

    def quota_metric_tags(
        self, quota_type: ClientQuotaType, principal: KafkaPrincipal, client_id: str
    ) -> dict[str, str]:
        """The tags a request of ``principal`` / ``client_id`` is recorded under."""
        raise NotImplementedError

    def quota_limit(self, quota_type: ClientQuotaType, metric_tags: Mapping[str, str]) -> Optional[float]:
        """The quota of a tag set; ``None`` for unlimited, 0 to block."""
        raise NotImplementedError

    def update_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        """A quota was set through ``alter_client_quotas``."""

    def remove_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        """A quota was removed through ``alter_client_quotas``."""

    def quota_reset_required(self, quota_type: ClientQuotaType) -> bool:
        """True if every cached tag and limit of ``quota_type`` must be asked again.

        Polled on every request, but only if the class overrides it.
        """
        return False

    def update_cluster_metadata(self, cluster: ClusterMetadata) -> bool:
        """New cluster metadata; return True if quotas may have changed (tags and limits are
        then asked again)."""
        return False

    def close(self) -> None:
        """Releases resources; called when the callback is replaced or the manager closes."""


_REQUIRED = ("quota_metric_tags", "quota_limit")
_OPTIONAL = (
    "configure",
    "update_quota",
    "remove_quota",
    "quota_reset_required",
    "update_cluster_metadata",
    "close",
)


def load_callback(spec: Any) -> Any:
    """An instance from a ``ClientQuotaCallback`` instance or a dotted class path
    (``client.quota.callback.class``). Raises ``KQuotaError`` with the reason otherwise."""
    if isinstance(spec, str):
        module_name, _, cls_name = spec.rpartition(".")
        if not module_name:
            raise KQuotaError(f"callback class {spec!r} must be a dotted path 'package.module.Class'")
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError) as e:
            raise KQuotaError(f"cannot load callback class {spec!r}: {e}") from None
        if not isinstance(cls, type):
            raise KQuotaError(f"callback {spec!r} is not a class")
        try:
            spec = cls()
        except Exception as e:
            raise KQuotaError(f"cannot instantiate callback class {spec!r}: {e}") from None
    missing = [m for m in _REQUIRED if not callable(getattr(spec, m, None))]
    if missing:
        raise KQuotaError(
            f"{type(spec).__name__} is not a ClientQuotaCallback: it lacks {', '.join(missing)}"
        )
    return spec


def _call_optional(callback: Any, name: str, *args: Any) -> Any:
    method = getattr(callback, name, None)
    return method(*args) if callable(method) else None


def _overrides_reset(callback: Any) -> bool:
    method = getattr(type(callback), "quota_reset_required", None)
    return callable(method) and method is not ClientQuotaCallback.quota_reset_required


#: User-tag prefixes reserved for the kernel: ``\x01`` its internal sensors, ``\x02`` an encoded
#: tag map. Tag values are data: a value holding them is encoded, never passed through.
_RESERVED = (_kquota.INTERNAL_TAG_PREFIX, ENCODED_TAGS_PREFIX)


def encode_tags(tags: Mapping[str, str]) -> tuple[str, str]:
    """The kernel's (user, client-id) tag pair for a callback's tag map. Any tag values are
    representable: a user value that could be mistaken for a kernel tag (a reserved control
    prefix or a NUL) is stored encoded like a non-Kafka tag map, so no client-id or user name can
    reach an internal sensor."""
    if set(tags) == {"user", "client-id"}:
        user = tags["user"]
        if not user.startswith(_RESERVED) and "\0" not in user:
            return user, tags["client-id"]
    return ENCODED_TAGS_PREFIX + json.dumps(sorted(tags.items()), ensure_ascii=False, separators=(",", ":")), ""


def decode_tags(user_tag: str, client_tag: str) -> dict[str, str]:
    """The callback's tag map for a kernel tag pair (the inverse of :func:`encode_tags`)."""
    if user_tag.startswith(ENCODED_TAGS_PREFIX):
        return dict(json.loads(user_tag[len(ENCODED_TAGS_PREFIX):]))
    return {"user": user_tag, "client-id": client_tag}


# The extension reports a handle's callback tags through this function (it never imports kquota).
_kquota._register_tag_decoder(decode_tags)


def _short(value: Any) -> str:
    """At most 200 characters of ``repr(value)``; a failing ``repr`` is described, not raised."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} whose repr() failed>"
    return text[:200]


class _CallbackAdapter:
    """What the native kernel calls on a cache miss; validates and counts, never raises."""

    def __init__(self, callback: Any, fail_closed: bool) -> None:
        self.callback = callback
        self.fail_closed = fail_closed
        self.polls_reset = _overrides_reset(callback)
        self.errors = 0
        self.last_error: Optional[str] = None
        self._lock = threading.Lock()
        self._last_log = 0.0
        self._suppressed = 0

    def failed(self, what: str, detail: str) -> None:
        """Counts (and, at most once a second, logs) a failed or garbage answer."""
        with self._lock:
            self.errors += 1
            self.last_error = f"{what}: {detail}"
            now = time.monotonic()
            if now - self._last_log < 1.0:
                self._suppressed += 1
                return
            suppressed, self._suppressed, self._last_log = self._suppressed, 0, now
        more = f" ({suppressed} more suppressed)" if suppressed else ""
        logger.warning("quota callback %s failed: %s; using the last good answer%s", what, detail, more)

    def metric_tags(self, quota_type: ClientQuotaType, user: str, client_id: str) -> Optional[tuple[str, str]]:
        # Everything, including converting the answer (a Mapping whose items() raises), is
        # contained: an error is counted and logged, never raised into the request path.
        try:
            tags = self.callback.quota_metric_tags(quota_type, KafkaPrincipal("User", user), client_id)
            if not isinstance(tags, Mapping):
                self.failed("quota_metric_tags", f"expected a dict of str to str, got {_short(tags)}")
                return None
            items = list(tags.items())
            if not all(type(k) is str and type(v) is str for k, v in items):
                self.failed("quota_metric_tags", f"expected a dict of str to str, got {_short(tags)}")
                return None
            return encode_tags(dict(items))
        except Exception as e:  # a plugin's bug must not reach the request path
            self.failed("quota_metric_tags", f"{type(e).__name__}: {_short(e)}")
            return None

    def limit(self, quota_type: ClientQuotaType, user_tag: str, client_tag: str) -> Optional[float]:
        try:
            value = self.callback.quota_limit(quota_type, decode_tags(user_tag, client_tag))
            if value is None:
                return math.inf
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.failed("quota_limit", f"expected a number or None, got {_short(value)}")
                return None
            value = float(value)  # 10**400 raises OverflowError: contained below
            if math.isnan(value) or value < 0:
                self.failed("quota_limit", f"expected a limit >= 0, got {value}")
                return None
            return value
        except Exception as e:
            self.failed("quota_limit", f"{type(e).__name__}: {_short(e)}")
            return None

    def reset_required(self, quota_type: ClientQuotaType) -> bool:
        try:
            return bool(self.callback.quota_reset_required(quota_type))
        except Exception as e:
            self.failed("quota_reset_required", f"{type(e).__name__}: {_short(e)}")
            return False

    def notify(self, name: str, *args: Any) -> Any:
        """Calls an optional lifecycle method, counting a failure instead of raising."""
        try:
            return _call_optional(self.callback, name, *args)
        except Exception as e:
            self.failed(name, f"{type(e).__name__}: {_short(e)}")
            return None
