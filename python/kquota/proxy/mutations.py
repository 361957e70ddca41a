"""Controller mutation quotas (KIP-599) on CreateTopics, CreatePartitions and DeleteTopics.

Strict versions (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): each topic is
charged in request order; a topic arriving while the quota is exhausted is answered
THROTTLING_QUOTA_EXCEEDED by the proxy and never reaches the broker, the others are forwarded
and both answers merged. Older versions are permissive: everything is forwarded and recorded,
and the throttle is returned. Validate-only requests are not charged (as Kafka).

The proxy knows partition counts only from the Metadata responses it has relayed; a topic it
has not seen counts one mutation for DeleteTopics and CreatePartitions' new partitions are the
requested count minus the known one (Kafka reads its metadata cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from kquota.exceptions import ThrottlingQuotaExceededError
from kquota.kafka.protocol import apis

STRICT_SINCE = {apis.CREATE_TOPICS: 6, apis.CREATE_PARTITIONS: 3, apis.DELETE_TOPICS: 5}
REQUEST_SCHEMA = {apis.CREATE_TOPICS: "CreateTopicsRequest", apis.CREATE_PARTITIONS: "CreatePartitionsRequest",
                  apis.DELETE_TOPICS: "DeleteTopicsRequest"}
RESPONSE_SCHEMA = {apis.CREATE_TOPICS: "CreateTopicsResponse", apis.CREATE_PARTITIONS: "CreatePartitionsResponse",
                   apis.DELETE_TOPICS: "DeleteTopicsResponse"}
_MESSAGE = "The throttling quota has been exceeded."


@dataclass
class MutationPlan:
    """What to do with one mutation request."""

    throttle_ms: int = 0
    #: Response entries for the topics refused by the proxy (strict versions).
    rejected: list = field(default_factory=list)
    #: The request body to forward (topics kept), or ``None`` when nothing is left to forward.
    forward: Optional[dict] = None


def _topics(api_key: int, version: int, body: dict) -> tuple[str, list]:
    if api_key == apis.DELETE_TOPICS:
        return ("Topics", body.get("Topics") or []) if version >= 6 else ("TopicNames", body.get("TopicNames") or [])
    return "Topics", body.get("Topics") or []


def _mutations(api_key: int, topic: Any, partitions_of: Callable[[str], Optional[int]],
               default_partitions: int) -> Optional[int]:
    """The topic's mutations, or ``None`` for a topic Kafka refuses before charging its quota
    (``ReplicationControlManager``: a partition count below -1 or 0 is ``INVALID_PARTITIONS``, so
    is a CreatePartitions count that is no increase); the broker gives that answer."""
    if api_key == apis.CREATE_TOPICS:
        if topic.get("Assignments"):
            return len(topic["Assignments"])
        n = topic.get("NumPartitions", -1)
        if n is None or n == -1:
            return default_partitions
        return n if n > 0 else None
    if api_key == apis.CREATE_PARTITIONS:
        known = partitions_of(topic["Name"])
        added = topic["Count"] - (known or 0)
        return added if added > 0 else None
    name = topic if isinstance(topic, str) else topic.get("Name")
    known = partitions_of(name) if name else None
    return known if known is not None else 1


def _rejected_entry(api_key: int, version: int, topic: Any) -> dict:
    if api_key == apis.DELETE_TOPICS:
        if isinstance(topic, str):
            return {"Name": topic, "ErrorCode": apis.THROTTLING_QUOTA_EXCEEDED, "ErrorMessage": _MESSAGE}
        return {"Name": topic.get("Name"), "TopicId": topic.get("TopicId"),
                "ErrorCode": apis.THROTTLING_QUOTA_EXCEEDED, "ErrorMessage": _MESSAGE}
    return {"Name": topic["Name"], "ErrorCode": apis.THROTTLING_QUOTA_EXCEEDED, "ErrorMessage": _MESSAGE}


def plan(api_key: int, version: int, body: dict, handle: Any,
         partitions_of: Callable[[str], Optional[int]], default_partitions: int) -> MutationPlan:
    """Charges the request's mutations to ``handle`` and splits it as Kafka's quota would."""
    out = MutationPlan(forward=body)
    if body.get("ValidateOnly"):
        return out
    key, topics = _topics(api_key, version, body)
    charges = [_mutations(api_key, t, partitions_of, default_partitions) for t in topics]
    if version < STRICT_SINCE[api_key]:
        out.throttle_ms = int(handle.record_controller_mutations(sum(n for n in charges if n is not None)))
        return out
    kept = []
    for topic, n in zip(topics, charges):
        if n is None:
            kept.append(topic)  # refused by the broker, uncharged
            continue
        try:
            handle.record_controller_mutations(n, strict=True)
        except ThrottlingQuotaExceededError as e:
            out.throttle_ms = max(out.throttle_ms, int(e.throttle_time_ms))
            out.rejected.append(_rejected_entry(api_key, version, topic))
        else:
            kept.append(topic)
    out.forward = dict(body, **{key: kept}) if kept else None
    return out


def results_field(api_key: int) -> str:
    """The response list that holds per-topic results."""
    return {apis.CREATE_TOPICS: "Topics", apis.CREATE_PARTITIONS: "Results", apis.DELETE_TOPICS: "Responses"}[api_key]


def merge(api_key: int, response: Optional[dict], p: MutationPlan) -> dict:
    """The broker's response (or an empty one) with the proxy's refusals appended; its
    ``ThrottleTimeMs`` is the broker's (0 for none), raised once encoded by the response step's
    throttle (which includes the plan's)."""
    body = dict(response) if response is not None else {}
    key = results_field(api_key)
    body[key] = list(body.get(key) or []) + p.rejected
    body.setdefault("ThrottleTimeMs", 0)
    return body
