"""The checks of an alter request that happen in Python, and the one native validation.

:func:`normalize_alter` turns ``alter_client_quotas``-style entries into the native change
tuples (type and shape checks, Kafka's name limits); :func:`validate_alter` adds the kernel's
own rules (entities, value ranges, ``request_percentage`` capacity) through
``_kquota.validate_quota_changes``, which needs no ``QuotaManager`` and starts no thread.
Config keys and entity-side codes come from the native module: one source for each.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Tuple, Union

from kquota import _kquota
from kquota.entity import CLIENT_ID, IP, TOPIC, USER, ClientQuotaEntity
from kquota.exceptions import QuotaConfigError, QuotaValueError
from kquota.shadow_marks import SHADOW_PREFIX, split_marks

#: Dynamic config keys of client quotas (KIP-546 names), in ``ClientQuotaType`` order.
CONFIG_KEYS: Tuple[str, ...] = _kquota.CONFIG_KEYS

#: The one config key of ``ip`` entities (KIP-612).
CONNECTION_CREATION_RATE: str = _kquota.CONNECTION_CREATION_RATE
#: The config keys each kind of entity takes (Kafka's ``configKeysForEntityType``).
IP_CONFIG_KEYS: Tuple[str, ...] = (CONNECTION_CREATION_RATE,)
#: The config keys of ``topic`` entities: a topic's total produce and fetch byte rates.
TOPIC_CONFIG_KEYS: Tuple[str, ...] = ("producer_byte_rate", "consumer_byte_rate")

#: Entity-side codes of a change tuple: absent, ``<default>``, named.
ENTITY_ABSENT: int = _kquota.ENTITY_ABSENT
ENTITY_DEFAULT: int = _kquota.ENTITY_DEFAULT
ENTITY_NAMED: int = _kquota.ENTITY_NAMED

#: Kafka's wire limit for a principal name or client-id (an int16 string), from the core.
MAX_NAME_BYTES: int = _kquota.MAX_NAME_BYTES

EntityLike = Union[ClientQuotaEntity, Mapping[str, Optional[str]]]
Ops = Mapping[str, Union[int, float, None]]
#: ``(user_kind, user, client_kind, client, config_key, value)``, as the kernel takes it.
ChangeTuple = Tuple[int, str, int, str, str, Optional[float]]
#: ``(ip or None for <default>, connection_creation_rate or None to remove)``.
IpChange = Tuple[Optional[str], Optional[float]]
#: ``(topic or None for <default>, config key, value or None to remove)``.
TopicChange = Tuple[Optional[str], str, Optional[float]]


class NormalizedAlter(NamedTuple):
    """An alter request after the Python-side checks."""

    #: The native change tuples, in request order.
    changes: list[ChangeTuple]
    #: ``(entity, {config key: value or None})`` per entry, in request order (``ip`` ones too).
    entries: list[tuple[ClientQuotaEntity, dict[str, Optional[float]]]]
    #: The ``ip`` entities' changes, already checked (they never reach the client kernel).
    ip_changes: list[IpChange]
    #: The ``topic`` entities' changes, already checked (they never reach the client kernel).
    topic_changes: list[TopicChange]


def entity_side(entity: ClientQuotaEntity, key: str) -> Tuple[int, str]:
    """``(code, name)`` of one side (``user`` or ``client-id``) of ``entity``; a name with a
    lone surrogate or longer than Kafka's 32,767 UTF-8 bytes is a ``QuotaValueError``."""
    if key not in entity:
        return ENTITY_ABSENT, ""
    name = entity[key]
    if name is None:
        return ENTITY_DEFAULT, ""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as e:
        # A lone surrogate has no UTF-8 form: no Kafka client can send this name.
        raise QuotaValueError(
            f"invalid quota entity {entity}: {key} {name!r} holds a lone surrogate "
            f"({name[e.start:e.end]!r} at {e.start}) that has no UTF-8 form"
        ) from None
    if size > MAX_NAME_BYTES:
        raise QuotaValueError(
            f"invalid quota entity: {key} is {size} bytes long in UTF-8; Kafka's limit is "
            f"{MAX_NAME_BYTES} bytes (an int16 string)"
        )
    return ENTITY_NAMED, name


def entity_from_sides(user_kind: int, user: str, client_kind: int, client: str) -> ClientQuotaEntity:
    """The entity of a native ``(user_kind, user, client_kind, client)``."""
    entries: dict[str, Optional[str]] = {}
    if user_kind != ENTITY_ABSENT:
        entries[USER] = user if user_kind == ENTITY_NAMED else None
    if client_kind != ENTITY_ABSENT:
        entries[CLIENT_ID] = client if client_kind == ENTITY_NAMED else None
    return ClientQuotaEntity(entries)


def _config_value(entity: ClientQuotaEntity, key: str, value: Any) -> float:
    def bad(reason: str) -> QuotaConfigError:
        return QuotaConfigError(f"invalid quota for entity {entity}, key {key}: {reason}")

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise bad(f"must be a number, got {type(value).__name__} {value!r}")
    try:
        number = float(value)
    except (OverflowError, ValueError) as e:
        raise bad(f"must be a finite number, got {value!r}") from e
    if isinstance(value, numbers.Integral) and not math.isinf(number) and int(value) >= 2**63:
        raise bad(f"must be at most 2^63 - 1, got {value}")
    return number


def normalize_alter(entries: Iterable[Tuple[EntityLike, Ops]]) -> NormalizedAlter:
    """The Python-side checks of ``alter_client_quotas`` entries (shape, types, names, keys,
    one entry per entity); raises ``QuotaConfigError`` naming the first bad entity and key."""
    if isinstance(entries, (str, bytes, Mapping)):
        raise QuotaConfigError("entries must be an iterable of (entity, ops) pairs")
    try:
        items = list(entries)
    except TypeError as e:
        raise QuotaConfigError(f"entries must be an iterable of (entity, ops) pairs: {e}") from None
    out = NormalizedAlter([], [], [], [])
    seen: set[ClientQuotaEntity] = set()
    for item in items:
        try:
            raw_entity, ops = item
        except (TypeError, ValueError):
            raise QuotaConfigError(f"each entry must be an (entity, ops) pair, got {item!r}") from None
        entity = ClientQuotaEntity(raw_entity)
        if not isinstance(ops, Mapping):
            raise QuotaConfigError(
                f"invalid quota for entity {entity}: ops must map config keys to numbers, "
                f"got {type(ops).__name__}"
            )
        if entity in seen:
            keys = ", ".join(str(k) for k in ops) or "(no keys)"
            raise QuotaConfigError(
                f"invalid quota for entity {entity}, key {keys}: the entity appears more than once in one call"
            )
        seen.add(entity)
        if entity.is_ip:
            out.entries.append((entity, _ip_ops(entity, ops, out.ip_changes)))
            continue
        if entity.is_topic:
            out.entries.append((entity, _topic_ops(entity, ops, out.topic_changes)))
            continue
        uk, u = entity_side(entity, USER)
        ck, c = entity_side(entity, CLIENT_ID)
        values = _checked_ops(entity, ops, CONFIG_KEYS, f"unknown config key (expected one of {', '.join(CONFIG_KEYS)})")
        out.changes.extend((uk, u, ck, c, key, number) for key, number in values.items())
        out.entries.append((entity, values))
    return out


def _checked_ops(
    entity: ClientQuotaEntity, ops: Mapping[str, Any], keys: Tuple[str, ...], unknown: str
) -> dict[str, Optional[float]]:
    """``{key: number or None}`` of ``ops``, each key one of ``keys`` (else ``unknown`` is the
    reason) and each value a number as :func:`_config_value` takes it."""
    values: dict[str, Optional[float]] = {}
    for key, value in ops.items():
        if key not in keys:
            raise QuotaConfigError(f"invalid quota for entity {entity}, key {key}: {unknown}")
        values[key] = None if value is None else _config_value(entity, key, value)
    return values


def _ip_ops(entity: ClientQuotaEntity, ops: Mapping[str, Any], changes: list[IpChange]) -> dict[str, Optional[float]]:
    """Checks the ops of an ``ip`` entity (Kafka's ``ipConfigs``: ``connection_creation_rate``
    only, an INT above 0) and appends its changes."""
    values = {}
    for key in ops:
        # Kafka's word for a key the entity type does not take, per key.
        values.update(_checked_ops(entity, {key: ops[key]}, IP_CONFIG_KEYS,
                                   f"Invalid configuration key {key} (an ip entity takes {CONNECTION_CREATION_RATE} only)"))
    for number in values.values():
        if number is not None:
            _kquota.validate_connection_rate(str(entity), number)
    changes.extend((entity[IP], number) for number in values.values())
    return values


#: The entity a topic's byte rate is checked against: the rule is the kernel's (one place), and
#: an error names the topic instead.
_STAND_IN = ClientQuotaEntity({USER: None})


def _topic_ops(entity: ClientQuotaEntity, ops: Mapping[str, Any], changes: list[TopicChange]) -> dict[str, Optional[float]]:
    """Checks the ops of a ``topic`` entity (``producer_byte_rate`` / ``consumer_byte_rate``
    only, each a whole number of bytes per second above 0, as a client's) and appends its changes."""
    values = {}
    for key in ops:
        values.update(_checked_ops(entity, {key: ops[key]}, TOPIC_CONFIG_KEYS,
                                   f"Invalid configuration key {key} (a topic entity takes "
                                   f"{' and '.join(TOPIC_CONFIG_KEYS)} only)"))
    uk, u = entity_side(_STAND_IN, USER)
    try:
        _kquota.validate_quota_changes([(uk, u, ENTITY_ABSENT, "", key, v) for key, v in values.items()])
    except QuotaConfigError as e:
        raise QuotaConfigError(str(e).replace(f"entity {_STAND_IN},", f"entity {entity},", 1)) from None
    changes.extend((entity[TOPIC], key, number) for key, number in values.items())
    return values


def validate_alter(entries: Iterable[Tuple[EntityLike, Ops]], *,
                   shadow_marks: bool = False) -> list[tuple[ClientQuotaEntity, dict[str, Optional[float]]]]:
    """Validates ``alter_client_quotas``-style entries exactly as a default ``QuotaManager``
    does, without one; nothing is applied. Returns ``(entity, {config key: value or None})``
    per entry. Raises ``QuotaConfigError`` naming the entity and key of the first bad entry.

    ``shadow_marks``: a store's check, which also takes quotas marked shadow
    (:mod:`kquota.shadow_marks`) on client entities, each checked as its unmarked key."""
    if not shadow_marks or isinstance(entries, (str, bytes, Mapping)):
        normalized = normalize_alter(entries)
        _kquota.validate_quota_changes(normalized.changes)
        return normalized.entries
    try:
        items = list(entries)
    except TypeError:
        return validate_alter(entries)  # its error for a non-iterable
    plain: list[Any] = []
    marks: list[tuple[ClientQuotaEntity, dict[str, Any]]] = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Mapping):
            enforced, marked = split_marks(item[1])
            plain.append((item[0], enforced))
            marks.append((ClientQuotaEntity(item[0]), marked))
        else:
            plain.append(item)  # a malformed entry: the plain check names it
            marks.append((ClientQuotaEntity({USER: None}), {}))
    out = validate_alter(plain)
    for (entity, values), (_, marked) in zip(out, marks):
        if not marked:
            continue
        if entity.is_ip or entity.is_topic:
            raise QuotaConfigError(
                f"invalid quota for entity {entity}, key {SHADOW_PREFIX}{next(iter(marked))}: a shadow mark is for "
                "client quotas (user / client-id entities: the shadow evaluates clients' responses)")
        try:
            (_, checked), = validate_alter([(entity, marked)])
        except QuotaConfigError as e:
            message = str(e)
            for key in marked:
                message = message.replace(f", key {key}:", f", key {SHADOW_PREFIX}{key}:", 1)
            raise QuotaConfigError(message) from None
        values.update({SHADOW_PREFIX + key: value for key, value in checked.items()})
    return out
