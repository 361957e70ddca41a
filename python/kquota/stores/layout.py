"""Entity paths in Kafka's ZooKeeper layout, shared by every store.

An entity's path is what Kafka writes in a change notification's ``entity_path``:
``users/<sanitized user>``, ``users/<sanitized user>/clients/<sanitized client-id>`` or
``clients/<sanitized client-id>``, or ``ips/<ip>`` (KIP-612; Kafka does not sanitize addresses,
and a canonical address holds no ``/``), with ``<default>`` for the default entity. Sanitized names
contain no ``/`` and a user literally named ``<default>`` is ``%3Cdefault%3E``, so a path names
exactly one entity; the SQLite store uses it as its key too.

A topic quota (a kquota extension) is ``topic-quotas/<topic>``, not ``topics/<topic>``: that node
and notification path are Kafka's own topic configs, which a Kafka broker reads and validates. A
valid topic name holds only ``[a-zA-Z0-9._-]``, so it needs no sanitizing and is never ``<default>``.
"""

from __future__ import annotations

from kquota.entity import CLIENT_ID, IP, TOPIC, USER, ClientQuotaEntity
from kquota.sanitizer import desanitize, sanitize

#: Kafka's ``ZooKeeperInternals.DEFAULT_STRING``.
DEFAULT = "<default>"
USERS = "users"
CLIENTS = "clients"
#: Kafka's ``ConfigType.IP``: ``/config/ips/<ip>``.
IPS = "ips"
#: Topic quotas: ``/config/topic-quotas/<topic>`` (kquota's, beside Kafka's ``/config/topics``).
TOPIC_QUOTAS = "topic-quotas"
#: The top-level nodes of quota entities.
ENTITY_ROOTS = (USERS, CLIENTS, IPS, TOPIC_QUOTAS)


def _node(name: "str | None") -> str:
    return DEFAULT if name is None else sanitize(name)


def _name(node: str) -> "str | None":
    if node == DEFAULT:
        return None
    if not node:
        raise ValueError("empty entity name")
    name = desanitize(node)
    if not name:
        raise ValueError("empty entity name")
    return name


def entity_path(entity: ClientQuotaEntity) -> str:
    """``users/alice/clients/<default>``-style path with sanitized names (``ips/10.1.2.3``,
    ``topic-quotas/orders``)."""
    if IP in entity:
        return f"{IPS}/{DEFAULT if entity[IP] is None else entity[IP]}"
    if TOPIC in entity:
        return f"{TOPIC_QUOTAS}/{DEFAULT if entity[TOPIC] is None else entity[TOPIC]}"
    parts = []
    if USER in entity:
        parts += [USERS, _node(entity[USER])]
    if CLIENT_ID in entity:
        parts += [CLIENTS, _node(entity[CLIENT_ID])]
    return "/".join(parts)


def parse_entity_path(path: str) -> ClientQuotaEntity:
    """The entity an ``entity_path`` names; ``ValueError`` if it is not a quota entity path."""
    parts = path.split("/")
    try:
        if len(parts) == 2 and parts[0] == USERS:
            return ClientQuotaEntity({USER: _name(parts[1])})
        if len(parts) == 2 and parts[0] == CLIENTS:
            return ClientQuotaEntity({CLIENT_ID: _name(parts[1])})
        if len(parts) == 2 and parts[0] == IPS:
            if parts[1] != DEFAULT and parts[1] != ClientQuotaEntity({IP: parts[1]})[IP]:
                # One entity, one path: a non-canonical spelling is not ours to reinterpret.
                raise ValueError(f"{parts[1]!r} is not an address in canonical form")
            return ClientQuotaEntity({IP: None if parts[1] == DEFAULT else parts[1]})
        if len(parts) == 2 and parts[0] == TOPIC_QUOTAS:
            # An invalid topic name is a QuotaConfigError, a ValueError.
            return ClientQuotaEntity({TOPIC: None if parts[1] == DEFAULT else parts[1]})
        if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS:
            return ClientQuotaEntity({USER: _name(parts[1]), CLIENT_ID: _name(parts[3])})
    except ValueError as e:
        raise ValueError(f"invalid quota entity path {path!r}: {e}") from None
    raise ValueError(
        f"invalid quota entity path {path!r}: expected users/<u>, clients/<c>, users/<u>/clients/<c>, ips/<ip> "
        f"or topic-quotas/<topic>"
    )


def is_quota_entity_path(path: str) -> bool:
    """Whether a change notification's path is about a client quota entity (not a topic, broker, ...)."""
    return path.startswith(tuple(root + "/" for root in ENTITY_ROOTS))
