"""Kafka's built-in quota precedence over the quotas a plugin learns from ``update_quota``.

Plugins that also honour quotas set through ``QuotaManager.alter_client_quotas`` keep one of
these: it mirrors Kafka's ``DefaultQuotaCallback`` (the eight ``<user, client-id>`` levels and
their metric tags) for principals the plugin does not handle itself. It sees only what the
manager forwards to the callback, so the broker's static defaults (``producer_default``) do not
apply, and it skips Kafka's "kinds ever configured" shortcut: an unconfigured principal gets the
tags ``{"user": "", "client-id": client_id}``, which are unlimited like Kafka's.
"""

from __future__ import annotations

import threading
from typing import Mapping, Optional
from urllib.parse import quote

from kquota.quota_type import ClientQuotaType
from kquota.entity import CLIENT_ID, USER, ClientQuotaEntity

#: One side of an entity key: absent, ``<default>``, or a name.
_Side = tuple
_ABSENT: _Side = ()
_DEFAULT: _Side = (None,)


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encodes a principal name for a metric tag."""
    # URLEncoder keeps letters, digits and ".-*_"; Kafka then encodes "*" and writes " " as %20.
    return quote(name, safe=".-_").replace("~", "%7E")


def _side(entity: ClientQuotaEntity, key: str, transform=lambda s: s) -> _Side:
    if key not in entity:
        return _ABSENT
    name = entity[key]
    return _DEFAULT if name is None else (transform(name),)


class ConfiguredQuotas:
    """Quotas per (type, entity), looked up with Kafka's precedence. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # int(quota type) -> {(user side, client side): value}; replaced, never mutated, so
        # readers need no lock.
        self._values: dict[int, dict[tuple[_Side, _Side], float]] = {}

    def _key(self, entity: ClientQuotaEntity) -> tuple[_Side, _Side]:
        return _side(entity, USER, sanitize), _side(entity, CLIENT_ID)

    def update(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, value: float) -> None:
        """Sets the quota of ``entity`` (as ``update_quota``)."""
        with self._lock:
            table = dict(self._values.get(int(quota_type), {}))
            table[self._key(ClientQuotaEntity(entity))] = float(value)
            self._values[int(quota_type)] = table

    def remove(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        """Removes the quota of ``entity`` (as ``remove_quota``)."""
        with self._lock:
            table = dict(self._values.get(int(quota_type), {}))
            table.pop(self._key(ClientQuotaEntity(entity)), None)
            self._values[int(quota_type)] = table

    def get(self, quota_type: ClientQuotaType, user: _Side, client: _Side) -> Optional[float]:
        """The quota set on exactly this entity (user side already sanitized), if any."""
        return self._values.get(int(quota_type), {}).get((user, client))

    def user_quota(self, quota_type: ClientQuotaType, user: str) -> Optional[float]:
        """The ``users/<user>`` quota, else ``users/<default>`` (``user`` raw)."""
        table = self._values.get(int(quota_type), {})
        value = table.get(((sanitize(user),), _ABSENT))
        return table.get((_DEFAULT, _ABSENT)) if value is None else value

    def metric_tags(self, quota_type: ClientQuotaType, user: str, client_id: str) -> dict[str, str]:
        """The tags of the most specific configured level (Kafka's eight-level walk)."""
        table = self._values.get(int(quota_type), {})
        u = sanitize(user)
        named, client = (u,), (client_id,)
        if (named, client) in table or (named, _DEFAULT) in table:
            return {"user": u, "client-id": client_id}  # levels 1, 2
        if (named, _ABSENT) in table:
            return {"user": u, "client-id": ""}  # level 3
        if (_DEFAULT, client) in table or (_DEFAULT, _DEFAULT) in table:
            return {"user": u, "client-id": client_id}  # levels 4, 5
        if (_DEFAULT, _ABSENT) in table:
            return {"user": u, "client-id": ""}  # level 6
        return {"user": "", "client-id": client_id}  # levels 7, 8, or none

    def limit(self, quota_type: ClientQuotaType, tags: Mapping[str, str]) -> Optional[float]:
        """Kafka's ``quotaLimit`` for a ``{"user", "client-id"}`` tag map; ``None`` unlimited."""
        table = self._values.get(int(quota_type), {})
        u, c = tags.get("user", ""), tags.get("client-id", "")
        if u and c:
            order = [((u,), (c,)), ((u,), _DEFAULT), (_DEFAULT, (c,)), (_DEFAULT, _DEFAULT)]
        elif u:
            order = [((u,), _ABSENT), (_DEFAULT, _ABSENT)]
        elif c:
            order = [(_ABSENT, (c,)), (_ABSENT, _DEFAULT)]
        else:
            return None
        for key in order:
            value = table.get(key)
            if value is not None:
                return value
        return None
