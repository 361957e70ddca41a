"""The quota configuration file of ``shared/spec/pipeline.md``.

One JSON document shared by ``kquota configs --describe --json``, ``kquota pipeline simulate
--quotas`` and ``kquota pipeline recommend``::

    {"quotas": [
      {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1024}},
      {"entity": {"user": null, "client-id": null}, "config": {"consumer_byte_rate": 2048}}
    ]}

``null`` is the ``<default>`` entity. Loading validates every entry the way
``QuotaManager.alter_client_quotas`` does (a bad file is one ``QuotaConfigError`` naming the
entry), so a file that loads can be applied without a partial update.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping, Union

from kquota.entity import ClientQuotaEntity
from kquota.exceptions import QuotaConfigError

#: What a loaded file holds: (entity, {config key: value}) pairs, in file order.
QuotaEntries = list[tuple[ClientQuotaEntity, dict[str, float]]]

PathLike = Union[str, "os.PathLike[str]"]


def parse_quota_config(doc: Any, source: str = "quota configuration") -> QuotaEntries:
    """Validates a decoded quota configuration document and returns its entries.

    Raises ``QuotaConfigError`` naming ``source`` and the offending entry.
    """
    # Imported here: manager imports the native module, which this light module need not load
    # for callers that only read or write files.
    from kquota.manager import QuotaManager

    if not isinstance(doc, Mapping) or not isinstance(doc.get("quotas"), list):
        raise QuotaConfigError(f"{source}: expected a JSON object with a list under \"quotas\"")
    out: QuotaEntries = []
    seen: set[ClientQuotaEntity] = set()
    for i, item in enumerate(doc["quotas"]):
        where = f"{source}: quotas[{i}]"
        if not isinstance(item, Mapping) or set(item) != {"entity", "config"}:
            raise QuotaConfigError(f"{where}: expected an object with exactly \"entity\" and \"config\"")
        try:
            entity = ClientQuotaEntity(item["entity"])
        except QuotaConfigError as e:
            raise QuotaConfigError(f"{where}: {e}") from None
        if entity in seen:
            raise QuotaConfigError(f"{where}: entity {entity.path} appears twice")
        seen.add(entity)
        config = item["config"]
        if not isinstance(config, Mapping):
            raise QuotaConfigError(f"{where}: \"config\" must be an object of config keys to numbers")
        out.append((entity, dict(config)))
    # Full value validation (keys, integrality, ranges) exactly as an alter would do it.
    try:
        QuotaManager().alter_client_quotas(out, validate_only=True)
    except QuotaConfigError as e:
        raise QuotaConfigError(f"{source}: {e}") from None
    return [(entity, {k: float(v) for k, v in config.items()}) for entity, config in out]


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
