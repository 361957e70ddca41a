"""The client-quota admin APIs' wire form (KIP-546: DescribeClientQuotas, AlterClientQuotas) in
one place, for both sides that speak it: the proxy answering them (:mod:`kquota.proxy.admin`) and
``kquota configs --bootstrap-server`` sending them (:mod:`kquota.configs_bootstrap`).

- the filter's match types (``ClientQuotaFilterComponent``) and one component of a filter;
- an entity as its ``[{"EntityType", "EntityName"}]`` list, both ways; read back with Kafka's
  checks and messages (``ClientQuotaControlManager``), so the proxy answers a bad entry as Kafka
  does and the CLI skips an entity of a newer Kafka with the same words;
- an alteration's ``[{"Key", "Value", "Remove"}]`` operations, both ways.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

from kquota.entity import ENTITY_TYPES, ClientQuotaEntity
from kquota.exceptions import QuotaConfigError

__all__ = [
    "MATCH_ANY", "MATCH_DEFAULT", "MATCH_EXACT", "entity_of", "filter_component", "ops_of", "wire_entity",
    "wire_ops", "wire_values",
]

#: ``ClientQuotaFilterComponent``'s match types: the named entity, the default entity, any entity.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def filter_component(entity_type: str, match_type: int, name: Optional[str] = None) -> dict[str, Any]:
    """One ``Components`` entry of a DescribeClientQuotas filter (``name`` only with MATCH_EXACT)."""
    return {"EntityType": entity_type, "MatchType": match_type, "Match": name}


def wire_entity(entity: ClientQuotaEntity) -> list[dict[str, Any]]:
    """An entity's ``[{"EntityType", "EntityName"}]``, in Kafka's order of entity types
    (``EntityName`` None for a default entity)."""
    return [{"EntityType": k, "EntityName": entity[k]} for k in ENTITY_TYPES if k in entity]


def entity_of(parts: Optional[Iterable[Mapping[str, Any]]]) -> ClientQuotaEntity:
    """The entity of an ``[{"EntityType", "EntityName"}]`` list; ``QuotaConfigError`` with
    Kafka's message for an empty one, a repeated or unknown entity type."""
    names: dict[str, Optional[str]] = {}
    for part in parts or ():
        kind = part["EntityType"]
        if kind in names:
            raise QuotaConfigError(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise QuotaConfigError(f"Unhandled client quota entity type: {kind}")
        names[kind] = part["EntityName"]
    if not names:
        raise QuotaConfigError("Invalid empty client quota entity")
    return ClientQuotaEntity(names)


def wire_values(config: Mapping[str, float], keys: Iterable[str]) -> list[dict[str, Any]]:
    """A described entity's ``[{"Key", "Value"}]``, in the order of ``keys``."""
    return [{"Key": k, "Value": float(config[k])} for k in keys]


def wire_ops(ops: Mapping[str, Optional[float]]) -> list[dict[str, Any]]:
    """An alteration's ``[{"Key", "Value", "Remove"}]``: a ``None`` value removes the key."""
    return [{"Key": k, "Value": 0.0 if v is None else float(v), "Remove": v is None} for k, v in ops.items()]


def ops_of(ops: Optional[Iterable[Mapping[str, Any]]]) -> dict[str, Optional[float]]:
    """The ``{key: value or None (remove)}`` of ``[{"Key", "Value", "Remove"}]``; a key given
    twice is a ``QuotaConfigError``."""
    out: dict[str, Optional[float]] = {}
    for op in ops or ():
        if op["Key"] in out:
            raise QuotaConfigError(f"config key {op['Key']!r} appears twice")
        out[op["Key"]] = None if op.get("Remove") else op["Value"]
    return out
