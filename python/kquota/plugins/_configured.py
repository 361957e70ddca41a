"""Kafka's built-in quota precedence over the quotas a plugin learns from ``update_quota``.

Plugins that also honour quotas set through ``QuotaManager.alter_client_quotas`` keep one of
these: Kafka's ``DefaultQuotaCallback`` (the eight ``<user, client-id>`` levels and their metric
tags) for principals the plugin does not handle itself. The walk is the kernel's own
(``_kquota.QuotaConfig``, the same code as the built-in rules). It sees only what the manager
forwards to the callback, so the broker's static defaults (``producer_default``) do not apply,
and it skips Kafka's "kinds ever configured" shortcut: an unconfigured principal gets the tags
``{"user": "", "client-id": client_id}``, which are unlimited like Kafka's.
"""

from __future__ import annotations

from typing import Mapping, Optional

from kquota._kquota import QuotaConfig
from kquota.entity import CLIENT_ID, USER, ClientQuotaEntity
from kquota.quota_type import ClientQuotaType
from kquota.validation import entity_side

__all__ = ["ConfiguredQuotas"]


class ConfiguredQuotas:
    """Quotas per (type, entity), looked up with Kafka's precedence. Thread-safe."""

    def __init__(self) -> None:
        self._config = QuotaConfig()

    def _set(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, value: Optional[float]) -> None:
        entity = ClientQuotaEntity(entity)
        uk, u = entity_side(entity, USER)
        ck, c = entity_side(entity, CLIENT_ID)
        self._config.set(quota_type, uk, u, ck, c, value)

    def update(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, value: float) -> None:
        """Sets the quota of ``entity`` (as ``update_quota``)."""
        self._set(quota_type, entity, float(value))

    def remove(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        """Removes the quota of ``entity`` (as ``remove_quota``)."""
        self._set(quota_type, entity, None)

    def metric_tags(self, quota_type: ClientQuotaType, user: str, client_id: str) -> dict[str, str]:
        """The tags of the most specific configured level (Kafka's eight-level walk); ``user``
        is the raw principal name, its tag the sanitized form."""
        u, c = self._config.metric_tags(quota_type, user, client_id)
        return {"user": u, "client-id": c}

    def limit(self, quota_type: ClientQuotaType, tags: Mapping[str, str]) -> Optional[float]:
        """Kafka's ``quotaLimit`` for a ``{"user", "client-id"}`` tag map; ``None`` unlimited."""
        return self._config.limit(quota_type, tags.get("user", ""), tags.get("client-id", ""))
