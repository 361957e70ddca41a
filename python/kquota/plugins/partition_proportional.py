"""Partition-proportional quotas (KIP-257 scenario 2).

A user's quota is a cluster-wide total; each broker enforces the share of it proportional to the
partitions the user works with that this broker leads::

    share = total * max(led / used, min_share)

``used`` counts the partitions of the user's topics in the current cluster metadata, ``led``
those whose leader is this broker (``ClusterMetadata.broker_id``). A broker cannot know which
topics a user works with, so they are configured. ``callback_configs``::

    {
        "user_topics": {"alice": ["orders", "payments"]},       # required for a user to be split
        "quotas": {"alice": {"producer_byte_rate": 3_000_000}},  # totals (optional)
        "default_quotas": {"producer_byte_rate": 1_000_000},     # users/<default> total (optional)
        "min_share": 0.01,                                        # 0..1, default 0.01
        "proportional": ["producer_byte_rate", "consumer_byte_rate"],  # keys split (the default)
    }

Totals come from ``quotas`` / ``default_quotas`` and from ``alter_client_quotas`` on user
entities (``{"user": "alice"}`` and ``{"user": None}``), which override the configured values
(removing one falls back to ``users/<default>``). Entities naming a client-id are ignored: every
request of a user shares one sensor per type, tagged ``{"user": ..., "client-id": ""}``. A user
without a total is unlimited.

Choices: a broker leading none of a user's partitions grants ``min_share`` of the total (1 % by
default, so metadata and stray requests still pass; 0 blocks them). Until the first
``update_cluster_metadata``, for users without a topic list, and for users whose topics have no
partitions in the metadata, the whole total applies (Kafka's behaviour without the plugin). Only
the ``proportional`` keys are split; the others (request and mutation quotas) apply in full.
``update_cluster_metadata`` recomputes every share and returns True only if one changed, so
limits are re-read exactly when a leader moved in a way that matters.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Optional

from kquota.quota_type import ClientQuotaType
from kquota.callback import ClientQuotaCallback, ClusterMetadata
from kquota.entity import CLIENT_ID, USER, ClientQuotaEntity, KafkaPrincipal
from kquota.exceptions import QuotaConfigError
from kquota.plugins import _config
from kquota.plugins._configured import sanitize

__all__ = ["PartitionProportionalCallback"]

_DEFAULT_PROPORTIONAL = ("producer_byte_rate", "consumer_byte_rate")


class PartitionProportionalCallback(ClientQuotaCallback):
    """Splits each user's total quota across brokers by partition leadership (see the module doc)."""

    def __init__(self) -> None:
        self.user_topics: dict[str, frozenset[str]] = {}
        self.min_share = 0.01
        self.proportional: frozenset[ClientQuotaType] = frozenset(
            _config.KEY_TYPES[k] for k in _DEFAULT_PROPORTIONAL
        )
        self._lock = threading.Lock()
        # (sanitized user tag or None for <default>) -> {type: total}; configured, then altered
        self._configured: dict[Optional[str], dict[ClientQuotaType, float]] = {}
        self._altered: dict[Optional[str], dict[ClientQuotaType, float]] = {}
        # sanitized user tag -> this broker's fraction of the user's total
        self.shares: dict[str, float] = {}

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Validates and loads the configs; raises ``QuotaConfigError`` naming the bad entry."""
        where = "partition-proportional configs"
        configs = _config.mapping(configs, where)
        _config.known_keys(configs, ("user_topics", "quotas", "default_quotas", "min_share", "proportional"), where)
        topics = _config.mapping(configs.get("user_topics", {}), "partition-proportional: 'user_topics'")
        user_topics = {
            user: frozenset(_config.names(t, f"partition-proportional: 'user_topics', user {user!r}"))
            for user, t in topics.items()
        }
        if "" in user_topics:
            raise QuotaConfigError("partition-proportional: 'user_topics': a user name must not be empty")
        configured: dict[Optional[str], dict[ClientQuotaType, float]] = {}
        for user, q in _config.mapping(configs.get("quotas", {}), "partition-proportional: 'quotas'").items():
            configured[sanitize(user)] = _config.quotas(q, f"partition-proportional: 'quotas', user {user!r}")
        if "default_quotas" in configs:
            configured[None] = _config.quotas(configs["default_quotas"], "partition-proportional: 'default_quotas'")
        min_share = _config.number(configs.get("min_share", 0.01), "partition-proportional: 'min_share'", maximum=1.0)
        keys = _config.names(configs.get("proportional", list(_DEFAULT_PROPORTIONAL)), "partition-proportional: 'proportional'")
        _config.known_keys(dict.fromkeys(keys), tuple(_config.KEY_TYPES), "partition-proportional: 'proportional'")
        self.user_topics = user_topics
        self._configured = configured
        self.min_share = min_share
        self.proportional = frozenset(_config.KEY_TYPES[k] for k in keys)

    # ------------------------------------------------------------------ totals

    def total(self, quota_type: ClientQuotaType, user_tag: str) -> Optional[float]:
        """The user's cluster-wide total for ``quota_type`` (``user_tag`` sanitized), if any."""
        for key in (user_tag, None):
            for table in (self._altered, self._configured):
                value = table.get(key, {}).get(quota_type)
                if value is not None:
                    return value
        return None

    def _user_key(self, entity: ClientQuotaEntity) -> tuple[bool, Optional[str]]:
        if CLIENT_ID in entity or USER not in entity:
            return False, None
        name = entity[USER]
        return True, None if name is None else sanitize(name)

    def update_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        ok, key = self._user_key(entity)
        if ok:
            with self._lock:
                table = dict(self._altered.get(key, {}))
                table[quota_type] = float(new_value)
                self._altered = {**self._altered, key: table}

    def remove_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        ok, key = self._user_key(entity)
        if ok:
            with self._lock:
                table = dict(self._altered.get(key, {}))
                table.pop(quota_type, None)
                self._altered = {**self._altered, key: table}

    # ------------------------------------------------------------------ shares

    def update_cluster_metadata(self, cluster: ClusterMetadata) -> bool:
        leaders: dict[str, list[Optional[int]]] = {}
        for p in cluster.partitions:
            leaders.setdefault(p.topic, []).append(p.leader)
        shares = {}
        for user, topics in self.user_topics.items():
            used = led = 0
            for topic in topics:
                for leader in leaders.get(topic, ()):
                    used += 1
                    led += leader == cluster.broker_id
            shares[sanitize(user)] = 1.0 if used == 0 else max(led / used, self.min_share)
        # 1.0 is also the share of a user never computed, so it is no change from "unknown"
        changed = any(shares.get(u, 1.0) != self.shares.get(u, 1.0) for u in {*shares, *self.shares})
        self.shares = shares
        return changed

    def share(self, user_tag: str) -> float:
        """This broker's fraction of a user's total (1.0 if the user is not split)."""
        return self.shares.get(user_tag, 1.0)

    # ------------------------------------------------------------------ callback

    def quota_metric_tags(
        self, quota_type: ClientQuotaType, principal: KafkaPrincipal, client_id: str
    ) -> dict[str, str]:
        return {"user": sanitize(principal.name), "client-id": ""}

    def quota_limit(self, quota_type: ClientQuotaType, metric_tags: Mapping[str, str]) -> Optional[float]:
        user = metric_tags.get("user", "")
        total = self.total(quota_type, user)
        if total is None:
            return None
        if quota_type not in self.proportional:
            return total
        return total * self.share(user)
