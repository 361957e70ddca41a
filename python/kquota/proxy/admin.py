"""DescribeClientQuotas and AlterClientQuotas (KIP-546) answered by the proxy from its own
configuration, so ``kafka-configs.sh --bootstrap-server <proxy>`` manages the proxy's quotas.

With a store the store is read and written (every proxy watching it converges); without one the
``QuotaManager`` is. Alter needs the caller's principal in ``admin_principals`` (Kafka asks for
ALTER_CONFIGS on the cluster); describe needs it there or in ``describe_principals`` (Kafka asks
for DESCRIBE_CONFIGS on the cluster, and answers CLUSTER_AUTHORIZATION_FAILED without it: the
quotas name every user, client id and address that has one). The principal is the one the
connection authenticated (ANONYMOUS before, or without SASL). ``ip`` entities (KIP-612's
``connection_creation_rate``) are answered as Kafka's controller answers them: filters and
entities that mix ``ip`` with ``user`` / ``client-id`` are refused, a name that is not an IP
address is an error of that entry. ``topic`` entities (topic quotas, a kquota extension:
``docs/topic-quotas.md``) are answered the same way: entity type ``topic``, never combined with
another type in a filter or an entity, a name Kafka would refuse as a topic name is an error of
that entry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Optional

from kquota.entity import ENTITY_TYPES, IP, TOPIC, ClientQuotaEntity
from kquota.exceptions import KQuotaError, QuotaConfigError
from kquota.kafka.client_quotas import MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT, entity_of, ops_of, wire_entity, wire_values
from kquota.kafka.protocol import apis
from kquota.proxy.quota_order import kafka_order
from kquota.validation import validate_alter

log = logging.getLogger("kquota.proxy")

#: AlterClientQuotas entries worked between two turns of the event loop (its other clients').
YIELD_EVERY = 1024


class _FilterError(Exception):
    """A describe filter Kafka refuses as a whole (``code`` and message as Kafka's)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _check_filter(comps: list) -> None:
    """Kafka's ``ClientQuotasImage.describe`` checks of the filter components, in its order."""
    seen: set[str] = set()
    for c in comps:
        kind, match, name = c["EntityType"], c["MatchType"], c.get("Match")
        if not kind:
            raise _FilterError(apis.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in seen:
            raise _FilterError(apis.INVALID_REQUEST, f"Entity type {kind} cannot appear more than once in the filter.")
        seen.add(kind)
        if kind not in ENTITY_TYPES:
            raise _FilterError(apis.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if match == MATCH_EXACT and name is None:
            raise _FilterError(apis.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
        if match == MATCH_DEFAULT and name is not None:
            raise _FilterError(apis.INVALID_REQUEST,
                               "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
        if match == MATCH_ANY and name is not None:
            raise _FilterError(apis.INVALID_REQUEST,
                               "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
        if match not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise _FilterError(apis.INVALID_REQUEST, f"Unknown match type {match}")
    if IP in seen and len(seen) > 1:
        raise _FilterError(apis.INVALID_REQUEST, "Invalid entity filter component combination. IP filter component "
                           "should not be used with user or clientId filter component.")
    if TOPIC in seen and len(seen) > 1:
        # The IP rule, in the same words, for the topic entity.
        raise _FilterError(apis.INVALID_REQUEST, "Invalid entity filter component combination. Topic filter "
                           "component should not be used with user or clientId filter component.")


def principal_names(specs: Iterable[str], option: str = "--admin-principals") -> frozenset[str]:
    """``User:alice`` or ``alice`` -> ``alice`` (Kafka principals are of type User); a bad one is
    an error naming ``option``."""
    out = set()
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        kind, sep, name = spec.partition(":")
        if sep and kind != "User":
            raise KQuotaError(f"{option}: principal {spec!r}: only User principals exist here")
        out.add(name if sep else spec)
    return frozenset(out)


class QuotaAdmin:
    """The proxy's answers to the two client-quota admin APIs."""

    def __init__(self, qm: Any, store: Any = None, admin_principals: Iterable[str] = (),
                 describe_principals: Iterable[str] = ()) -> None:
        self.qm = qm
        self.store = store
        self.admin_principals = frozenset(admin_principals)
        self.describe_principals = frozenset(describe_principals) | self.admin_principals

    async def _state(self) -> dict:
        if self.store is not None:
            return await asyncio.to_thread(self.store.describe)
        return self.qm.describe_client_quotas()

    async def describe(self, req: dict, user: Optional[str]) -> dict:
        """A DescribeClientQuotasResponse body for a request body from principal ``user``
        (``None``: one that may be no admin, a delegation token's of an unknown owner)."""
        if user is None or user not in self.describe_principals:
            # KafkaApis.handleDescribeClientQuotasRequest: the request's error response, whose
            # message ApiError leaves null for the error's generic one.
            return {"ErrorCode": apis.CLUSTER_AUTHORIZATION_FAILED, "ErrorMessage": None, "Entries": None}
        comps = req.get("Components") or []
        try:
            _check_filter(comps)
        except _FilterError as e:
            return {"ErrorCode": e.code, "ErrorMessage": str(e), "Entries": None}
        try:
            state = await self._state()
        except KQuotaError as e:
            return {"ErrorCode": apis.UNKNOWN_SERVER_ERROR, "ErrorMessage": str(e), "Entries": None}
        entries = []
        for entity, config in sorted(state.items(), key=lambda kv: kv[0].path):
            if not _matches(entity, comps, bool(req.get("Strict"))):
                continue
            entries.append({"Entity": wire_entity(entity), "Values": wire_values(config, kafka_order(config))})
        return {"ErrorCode": 0, "ErrorMessage": None, "Entries": entries}

    async def alter(self, req: dict, user: Optional[str]) -> dict:
        """An AlterClientQuotasResponse body: one result per entry, applied one by one as Kafka
        (``user`` as :meth:`describe`'s)."""
        results = []
        allowed = user is not None and user in self.admin_principals
        for i, entry in enumerate(req.get("Entries") or []):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # a request of many entries must not hold the event loop
            result = {"ErrorCode": 0, "ErrorMessage": None, "Entity": entry["Entity"]}
            results.append(result)
            if not allowed:
                result["ErrorCode"] = apis.CLUSTER_AUTHORIZATION_FAILED
                result["ErrorMessage"] = (f"principal User:{user} may not alter client quotas" if user is not None
                                          else "a delegation token's principal may not alter client quotas")
                continue
            try:
                entity, ops = entity_of(entry["Entity"]), ops_of(entry.get("Ops"))
                if req.get("ValidateOnly") and self.store is not None:
                    validate_alter([(entity, ops)], shadow_marks=True)  # as the store's alter checks it
                elif req.get("ValidateOnly"):
                    self.qm.alter_client_quotas([(entity, ops)], validate_only=True)
                elif self.store is not None:
                    await asyncio.to_thread(self.store.alter, [(entity, ops)])
                else:
                    self.qm.alter_client_quotas([(entity, ops)])
            except QuotaConfigError as e:  # a bad entry: Kafka answers InvalidRequest
                result["ErrorCode"] = apis.INVALID_REQUEST
                result["ErrorMessage"] = str(e)
                continue
            except KQuotaError as e:  # the store failed: nothing applied, the proxy keeps serving
                result["ErrorCode"] = apis.UNKNOWN_SERVER_ERROR
                result["ErrorMessage"] = str(e)
                continue
            if not req.get("ValidateOnly"):
                log.info("client quotas of %s altered by User:%s: %s", entity.path, user, ops)
        return {"Entries": results}


def _matches(entity: ClientQuotaEntity, comps: list, strict: bool) -> bool:
    """Kafka's ClientQuotaFilter: every component matches; strict = no other entity types."""
    for c in comps:
        kind = c["EntityType"]
        if kind not in entity:
            return False
        name = entity[kind]
        match = c["MatchType"]
        if match == MATCH_EXACT and (name is None or name != _match_name(kind, c.get("Match"))):
            return False
        if match == MATCH_DEFAULT and name is not None:
            return False
    return not (strict and len(entity) != len(comps))


def _match_name(kind: str, match: Optional[str]) -> Optional[str]:
    """The name an exact filter matches: an address in its canonical form (``0:0::1`` finds
    ``::1``, as Kafka's ``InetAddress`` keys do); anything else as given."""
    if kind == IP and match:
        try:
            return ClientQuotaEntity({IP: match})[IP]
        except QuotaConfigError:
            return match
    return match
