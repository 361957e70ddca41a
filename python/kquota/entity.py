"""Quota entities (KIP-546 shape) and principals."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

from kquota._kquota import MAX_TOPIC_NAME_LENGTH, canonical_ip, is_legal_topic_name
from kquota.exceptions import QuotaConfigError

#: The entity types a quota entity may name, as in Kafka's Admin API.
USER = "user"
CLIENT_ID = "client-id"
#: KIP-612's connection-rate entity: an IP address (``connection_creation_rate``).
IP = "ip"
#: A topic quota's entity (KIP-1010 style, a kquota extension): a topic's total produce or fetch
#: rate over all its partitions, clients and brokers (``producer_byte_rate``, ``consumer_byte_rate``).
TOPIC = "topic"
ENTITY_TYPES = (USER, CLIENT_ID, IP, TOPIC)
#: The entity types that stand alone (never combined with another type).
SOLE_ENTITY_TYPES = (IP, TOPIC)

_NOT_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._-]")


def topic_name_error(name: str) -> Optional[str]:
    """Why Kafka would refuse ``name`` as a topic name (``Topic.validate``'s reason, prefixed
    ``Topic name is invalid: ``), or ``None`` if it is valid: not empty, not ``.`` or ``..``, at
    most 249 characters, only ASCII alphanumerics, ``.``, ``_`` and ``-``. Whether it is valid is
    the kernel's rule (:func:`kquota._kquota.is_legal_topic_name`); only the reason is found here."""
    if is_legal_topic_name(name):
        return None
    if name == "":
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        # Kafka quotes the whole name; a hostile one may be megabytes or hold line breaks, so the
        # line shows its start, escaped.
        reason = (f"the length of {name[:40] + '...'!r} ({len(name)} characters) is longer than the max "
                  f"allowed length {MAX_TOPIC_NAME_LENGTH}")
    else:
        bad = _NOT_TOPIC_CHARS.search(name)
        reason = (f"{name[:80]!r} contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
                  + (f" ({bad.group()!r})" if bad else ""))
    return f"Topic name is invalid: {reason}"


def _short(entries: Mapping[str, Any]) -> str:
    """An entity mapping for an error line, each name cut to 80 characters."""
    return repr({k: v[:80] + "..." if isinstance(v, str) and len(v) > 80 else v for k, v in entries.items()})


def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


class ClientQuotaEntity(Mapping[str, Optional[str]]):
    """An immutable, hashable quota entity.

    Built from a mapping with keys ``"user"`` and/or ``"client-id"``, or with the one key ``"ip"``
    (KIP-612); a value of ``None`` is the ``<default>`` entity.
    ``ClientQuotaEntity({"user": "alice", "client-id": None})`` is
    ``users/alice/clients/<default>``. A user literally named ``"<default>"`` is an ordinary user.
    An ``ip`` name must be an IPv4 or IPv6 literal and is kept in canonical form
    (``{"ip": "0:0::1"}`` is ``ips/::1``); an ``ip`` never goes with a user or client-id (Kafka
    refuses the combination). A ``topic`` entity (``{"topic": "orders"}``, ``topics/orders``; a
    kquota extension, see ``docs/topic-quotas.md``) also stands alone; its name must be one Kafka
    accepts as a topic name (:func:`topic_name_error`).
    """

    __slots__ = ("_entries", "_hash")

    def __init__(self, entries: Mapping[str, Optional[str]] | "ClientQuotaEntity") -> None:
        if isinstance(entries, ClientQuotaEntity):
            self._entries: dict[str, Optional[str]] = dict(entries._entries)
            self._hash = entries._hash
            return
        if not isinstance(entries, Mapping):
            raise QuotaConfigError(
                f"a quota entity must be a mapping with keys 'user' and/or 'client-id', or 'ip', or 'topic', "
                f"got {type(entries).__name__}"
            )
        out: dict[str, Optional[str]] = {}
        for key, value in entries.items():
            if key not in ENTITY_TYPES:
                raise QuotaConfigError(
                    f"invalid quota entity {dict(entries)!r}: unknown entity type {key!r} "
                    f"(expected 'user' and/or 'client-id', or 'ip', or 'topic')"
                )
            if value is not None and not isinstance(value, str):
                raise QuotaConfigError(
                    f"invalid quota entity {dict(entries)!r}, key {key!r}: a name must be a str "
                    f"(or None for <default>), got {type(value).__name__}"
                )
            if value == "":
                raise QuotaConfigError(
                    f"invalid quota entity {dict(entries)!r}, key {key!r}: the name is empty "
                    f"(use None for the <default> entity)"
                )
            if key == IP and value is not None:
                try:
                    value = canonical_ip(value)
                except QuotaConfigError as e:
                    raise QuotaConfigError(f"invalid quota entity {dict(entries)!r}: {e}") from None
            if key == TOPIC and value is not None:
                error = topic_name_error(value)
                if error is not None:
                    raise QuotaConfigError(f"invalid quota entity: {error}")
            out[key] = value
        if not out:
            raise QuotaConfigError(
                "invalid quota entity {}: it needs a 'user', a 'client-id' or both, or an 'ip', or a 'topic'"
            )
        if IP in out and len(out) > 1:
            # Kafka's ClientQuotaControlManager.configKeysForEntityType, word for word.
            raise QuotaConfigError(
                f"invalid quota entity {_short(entries)}: Invalid quota entity combination, IP entity "
                f"should not be combined with User or ClientId"
            )
        if TOPIC in out and len(out) > 1:
            # The same rule, in the same words, for the topic entity.
            raise QuotaConfigError(
                f"invalid quota entity {_short(entries)}: Invalid quota entity combination, Topic entity "
                f"should not be combined with User or ClientId"
            )
        self._entries = {k: out[k] for k in ENTITY_TYPES if k in out}
        self._hash = hash(tuple(self._entries.items()))

    @property
    def is_topic(self) -> bool:
        """Whether this is a ``topic`` entity (a topic quota: its total produce / fetch rate)."""
        return TOPIC in self._entries

    @property
    def is_ip(self) -> bool:
        """Whether this is an ``ip`` entity (KIP-612's ``connection_creation_rate``)."""
        return IP in self._entries

    @property
    def entries(self) -> dict[str, Optional[str]]:
        """The entity as a new mapping (``None`` for ``<default>``)."""
        return dict(self._entries)

    def __getitem__(self, key: str) -> Optional[str]:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, ClientQuotaEntity):
            return self._entries == other._entries
        if isinstance(other, Mapping):
            return self._entries == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"ClientQuotaEntity({self._entries!r})"

    def __str__(self) -> str:
        parts = []
        for key in ENTITY_TYPES:
            if key in self._entries:
                value = self._entries[key]
                parts.append(f"{key}={'<default>' if value is None else _quote(value)}")
        return ", ".join(parts)

    def config_entities(self) -> list["ConfigEntity"]:
        """KIP-257's view of the entity: its parts, user first (``ClientQuotaEntity.configEntities``).
        An ``ip`` entity has none: a quota callback never sees connection quotas, as in Kafka;
        nor has a ``topic`` entity (a topic quota is not a client quota).

        >>> ClientQuotaEntity({"user": "alice", "client-id": None}).config_entities()
        [ConfigEntity(entity_type=<ConfigEntityType.USER: 'USER'>, name='alice'), \
ConfigEntity(entity_type=<ConfigEntityType.DEFAULT_CLIENT_ID: 'DEFAULT_CLIENT_ID'>, name=None)]
        """
        out = []
        if USER in self._entries:
            name = self._entries[USER]
            out.append(ConfigEntity(ConfigEntityType.DEFAULT_USER if name is None else ConfigEntityType.USER, name))
        if CLIENT_ID in self._entries:
            name = self._entries[CLIENT_ID]
            kind = ConfigEntityType.DEFAULT_CLIENT_ID if name is None else ConfigEntityType.CLIENT_ID
            out.append(ConfigEntity(kind, name))
        return out

    @property
    def path(self) -> str:
        """The ZooKeeper-style path, e.g. ``users/alice/clients/<default>`` or ``ips/10.1.2.3``
        or ``topics/orders`` (names raw)."""
        if IP in self._entries:
            return "ips/" + (self._entries[IP] or "<default>")
        if TOPIC in self._entries:
            return "topics/" + (self._entries[TOPIC] or "<default>")
        parts = []
        if USER in self._entries:
            parts.append("users/" + (self._entries[USER] or "<default>"))
        if CLIENT_ID in self._entries:
            parts.append("clients/" + (self._entries[CLIENT_ID] or "<default>"))
        return "/".join(parts)


@dataclass(frozen=True)
class KafkaPrincipal:
    """An authenticated principal, as Kafka's ``KafkaPrincipal`` (type ``"User"`` by default)."""

    principal_type: str = "User"
    name: str = ""

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


class ConfigEntityType(enum.Enum):
    """KIP-257's ``ClientQuotaEntity.ConfigEntityType``."""

    USER = "USER"
    CLIENT_ID = "CLIENT_ID"
    DEFAULT_USER = "DEFAULT_USER"
    DEFAULT_CLIENT_ID = "DEFAULT_CLIENT_ID"


@dataclass(frozen=True)
class ConfigEntity:
    """One part of a quota entity as callbacks see it; ``name`` is ``None`` for the defaults."""

    entity_type: ConfigEntityType
    name: Optional[str]
