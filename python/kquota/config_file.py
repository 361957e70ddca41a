"""The quota configuration file of ``docs/pipeline.md``.

One JSON document shared by ``kquota configs --describe --json``, ``kquota pipeline simulate
--quotas`` and ``kquota pipeline recommend``::

    {"quotas": [
      {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1024}},
      {"entity": {"user": null, "client-id": null}, "config": {"consumer_byte_rate": 2048}},
      {"entity": {"ip": "10.1.2.3"}, "config": {"connection_creation_rate": 20}},
      {"entity": {"topic": "orders"}, "config": {"producer_byte_rate": 12000000}}
    ]}

``null`` is the ``<default>`` entity; an ``ip`` entity (KIP-612) stands alone and takes
``connection_creation_rate``; a ``topic`` entity (a topic quota, ``docs/topic-quotas.md``) stands
alone and takes ``producer_byte_rate`` and ``consumer_byte_rate``. Loading validates every entry the way
``QuotaManager.alter_client_quotas`` does (a bad file is one ``QuotaConfigError`` naming the
entry), so a file that loads can be applied without a partial update.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping, Union

from kquota.entity import ENTITY_TYPES, ClientQuotaEntity
from kquota.exceptions import QuotaConfigError

#: What a loaded file holds: (entity, {config key: value}) pairs, in file order.
QuotaEntries = list[tuple[ClientQuotaEntity, dict[str, float]]]

PathLike = Union[str, "os.PathLike[str]"]


def _json_type(value: Any) -> str:
    """A JSON value's kind as a reader of the file names it (never a Python class name)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    return "an object"


def _entry_entity(where: str, raw: Any) -> ClientQuotaEntity:
    if not isinstance(raw, Mapping):
        raise QuotaConfigError(f'{where}: "entity" must be an object with "user" and/or "client-id", or "ip", '
                               f'or "topic", got {_json_type(raw)}')
    for key, name in raw.items():
        if key not in ENTITY_TYPES:
            raise QuotaConfigError(
                f'{where}: unknown entity key "{key}" (expected "user" and/or "client-id", or "ip", or "topic")'
            )
        if name is not None and not isinstance(name, str):
            raise QuotaConfigError(f'{where}: entity "{key}" must be a string (or null for <default>), '
                                   f"got {_json_type(name)}")
        if name == "":
            raise QuotaConfigError(f'{where}: entity "{key}" is empty (use null for the <default> entity)')
    if not raw:
        raise QuotaConfigError(f'{where}: "entity" needs "user", "client-id" or both, or "ip", or "topic"')
    try:
        return ClientQuotaEntity(raw)
    except QuotaConfigError as e:  # an ip that is no address, a topic name Kafka refuses, or a mix
        raise QuotaConfigError(f"{where}: {e}") from None


def _entry_config(where: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise QuotaConfigError(f'{where}: "config" must be an object of config keys to numbers, '
                               f"got {_json_type(raw)}")
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise QuotaConfigError(f"{where}, key {key}: must be a number, got {_json_type(value)}")
    return dict(raw)


def parse_quota_config(doc: Any, source: str = "quota configuration") -> QuotaEntries:
    """Validates a decoded quota configuration document and returns its entries.

    Raises ``QuotaConfigError`` naming ``source``, the offending entry (``quotas[i]``, its
    entity) and key, in the file's own (JSON) terms.
    """
    # Imported here: manager imports the native module, which this light module need not load
    # for callers that only read or write files.
    from kquota.manager import QuotaManager

    if not isinstance(doc, Mapping) or not isinstance(doc.get("quotas"), list):
        raise QuotaConfigError(f"{source}: expected a JSON object with a list under \"quotas\"")
    out: QuotaEntries = []
    seen: dict[ClientQuotaEntity, int] = {}
    validator = QuotaManager(expiry_interval_seconds=None)
    try:
        for i, item in enumerate(doc["quotas"]):
            where = f"{source}: quotas[{i}]"
            if not isinstance(item, Mapping) or set(item) != {"entity", "config"}:
                raise QuotaConfigError(f"{where}: expected an object with exactly \"entity\" and \"config\"")
            entity = _entry_entity(where, item["entity"])
            where = f"{where} ({entity})"
            if entity in seen:
                raise QuotaConfigError(f"{where}: entity {entity.path} appears twice (also quotas[{seen[entity]}])")
            seen[entity] = i
            config = _entry_config(where, item["config"])
            # Value validation (keys, integrality, ranges) exactly as an alter does it, per entry so
            # the message names the entry.
            try:
                validator.alter_client_quotas([(entity, config)], validate_only=True)
            except QuotaConfigError as e:
                raise QuotaConfigError(_in_entry(where, str(e))) from None
            out.append((entity, config))
    finally:
        validator.close()
    return [(entity, {k: float(v) for k, v in config.items()}) for entity, config in out]


def _in_entry(where: str, message: str) -> str:
    """``invalid quota for entity user="a", key k: ...`` -> ``<where>, key k: ...`` (``where``
    already names the entry and its entity)."""
    head, sep, rest = message.partition(", key ")
    return f"{where}, key {rest}" if sep and head.startswith("invalid quota for entity") else f"{where}: {message}"


def load_quota_config(path: PathLike) -> QuotaEntries:
    """Reads and validates a quota configuration file."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise QuotaConfigError(f"cannot read quota configuration {name!r}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise QuotaConfigError(f"quota configuration {name!r} is not valid JSON: {e}") from None
    return parse_quota_config(doc, source=name)


def _plain(value: float) -> Union[int, float]:
    # Byte rates are integral; write them as JSON integers so the file reads like Kafka's.
    return int(value) if float(value).is_integer() and abs(value) < 2**63 else float(value)


def quota_config_document(entries: Iterable[tuple[Any, Mapping[str, float]]]) -> dict[str, Any]:
    """The JSON-ready document for ``entries`` (entities as ``ClientQuotaEntity`` or mappings)."""
    quotas = []
    for entity, config in entries:
        e = ClientQuotaEntity(entity)
        quotas.append({"entity": e.entries, "config": {k: _plain(v) for k, v in config.items()}})
    return {"quotas": quotas}


def dump_quota_config(entries: Iterable[tuple[Any, Mapping[str, float]]], path: PathLike) -> None:
    """Writes a quota configuration file (atomically: a reader never sees half a file)."""
    name = os.fspath(path)
    tmp = f"{name}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(quota_config_document(entries), f, indent=2)
        f.write("\n")
    os.replace(tmp, name)
