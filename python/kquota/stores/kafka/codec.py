"""The store topic's records: one per (entity, config key), as KRaft's ``ClientQuotaRecord``.

Key (UTF-8 JSON, written canonically so that compaction sees one key per entity and config key)::

    {"entity":[{"entityType":"user","entityName":"alice"}],"key":"producer_byte_rate"}

``entityName`` is ``null`` for ``<default>``; names are not sanitized (KRaft keeps them raw).
Value: ``{"value":1024.0}`` sets the key; no value (a tombstone) removes it, so compaction keeps
each entity's latest values and, once ``delete.retention.ms`` has passed, nothing of removed ones.
Headers name the alter a record belongs to: ``kquota-alter`` (a random id) and ``kquota-records``
(how many records the alter wrote), so a follower applies an alter's records together.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import NamedTuple, Optional

from kquota.entity import ClientQuotaEntity
from kquota.exceptions import QuotaConfigError
from kquota.stores.base import AlterEntries
from kquota.validation import validate_alter

ALTER_HEADER = "kquota-alter"
COUNT_HEADER = "kquota-records"
#: Bytes a record adds to a batch besides its key, value and header strings (varints, attributes,
#: deltas; an upper bound), and the batch header.
RECORD_OVERHEAD, BATCH_OVERHEAD = 48, 61


class CorruptRecord(Exception):
    """A record that is not a quota record kquota can read (the message says why)."""


class Record(NamedTuple):
    """One record to produce: ``value`` is ``None`` for a removal (a tombstone)."""

    key: bytes
    value: Optional[bytes]


def encode_key(entity: ClientQuotaEntity, config_key: str) -> bytes:
    """The record key of ``entity``'s ``config_key`` (canonical JSON)."""
    parts = [{"entityType": kind, "entityName": name} for kind, name in entity.items()]
    return json.dumps({"entity": parts, "key": config_key}, separators=(",", ":"), ensure_ascii=False).encode()


def encode_value(value: Optional[float]) -> Optional[bytes]:
    """``{"value":...}`` for a set, ``None`` (a tombstone) for a removal."""
    if value is None:
        return None
    return json.dumps({"value": float(value)}, separators=(",", ":")).encode()


def encode_alter(validated: AlterEntries) -> list[Record]:
    """The records of a validated alter, in entry order."""
    return [Record(encode_key(entity, k), encode_value(v)) for entity, ops in validated for k, v in ops.items()]


def new_alter_id() -> bytes:
    """A fresh alter id for the ``kquota-alter`` header."""
    return uuid.uuid4().hex.encode()


def alter_headers(alter_id: bytes, count: int) -> list[tuple[str, bytes]]:
    """The headers every record of an alter of ``count`` records carries."""
    return [(ALTER_HEADER, alter_id), (COUNT_HEADER, str(count).encode())]


def batch_bytes(records: list[Record], alter_id: bytes) -> int:
    """An upper bound of the record batch's size on the wire (uncompressed)."""
    headers = sum(len(k) + len(v) for k, v in alter_headers(alter_id, len(records)))
    return BATCH_OVERHEAD + sum(
        RECORD_OVERHEAD + len(r.key) + len(r.value or b"") + headers for r in records
    )


def decode_key(key: Optional[bytes]) -> tuple[ClientQuotaEntity, str]:
    """The entity and config key a record key names; ``CorruptRecord`` if it names none."""
    if not key:
        raise CorruptRecord("no record key")
    try:
        doc = json.loads(key.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptRecord(f"key is not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entity"), list) or not isinstance(doc.get("key"), str):
        raise CorruptRecord('key is not {"entity":[...],"key":"..."}')
    names: dict[str, Optional[str]] = {}
    for part in doc["entity"]:
        if not isinstance(part, dict) or not isinstance(part.get("entityType"), str):
            raise CorruptRecord("an entity part has no entityType")
        name = part.get("entityName")
        if name is not None and not isinstance(name, str):
            raise CorruptRecord(f"entityName {name!r} is not a string")
        if part["entityType"] in names:
            raise CorruptRecord(f"entity type {part['entityType']!r} appears twice")
        names[part["entityType"]] = name
    try:
        return ClientQuotaEntity(names), doc["key"]
    except QuotaConfigError as e:
        raise CorruptRecord(str(e)) from None


def decode_value(entity: ClientQuotaEntity, config_key: str, value: Optional[bytes]) -> Optional[float]:
    """The value a record sets (``None``: removed), validated as an alter would be."""
    if value is None:
        return None
    try:
        doc = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptRecord(f"value is not valid JSON ({e})") from None
    number = doc.get("value") if isinstance(doc, dict) else None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        raise CorruptRecord(f'value is not {{"value": <finite number>}}: {value[:80]!r}')
    try:
        validate_alter([(entity, {config_key: float(number)})], shadow_marks=True)
    except QuotaConfigError as e:
        raise CorruptRecord(str(e)) from None
    return float(number)


def header(headers: Optional[list[tuple[str, bytes]]], name: str) -> Optional[bytes]:
    """A header's value (the last one of that name), or ``None``."""
    found = None
    for k, v in headers or ():
        if k == name:
            found = v
    return found
