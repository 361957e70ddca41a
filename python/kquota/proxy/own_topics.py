"""The proxy's own topics, closed to clients: a ``kafka://`` store's topic and its usage topic
(``<store topic>.usage``, :mod:`kquota.proxy.fleet_usage`).

The broker sees the proxy's principal, so whatever a client sends through the proxy to those
topics would be written or read as the proxy: forged quota records, forged fleet usage. Clients
get what Kafka answers a principal without access to a topic (``KafkaApis`` /
``ControllerApis``): ``TOPIC_AUTHORIZATION_FAILED`` for each own topic of a request, the
request's other topics still served; Metadata lists them to no one (a request naming them gets
the error, as Kafka answers a topic the principal may not describe).

Produce and Fetch are refused on the native paths (``rust/kquota-proxy/src/own_topics.rs``,
given the names and the topic ids learned here, whole requests: docs/semantics-notes.md).
ListOffsets, DeleteRecords, AlterConfigs and IncrementalAlterConfigs are handled here (the own
topics stripped from the request, their errors merged into the broker's answer), and
DescribeTopicPartitions as Metadata; CreateTopics, DeleteTopics and CreatePartitions through
:func:`strip_mutation` in the KIP-599 handler; Metadata through :func:`metadata_request` and
:func:`metadata_response`.

Topic ids (Fetch v13+ and DeleteTopics v6+ name topics by id): learned from the store's cluster
at start (:func:`resolve_ids`) and from every Metadata and DescribeTopicPartitions response the
proxy relays (the own topics are taken out of it there, so a client cannot learn their ids
through the proxy before the proxy does).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Optional

from kquota.proxy.dispatch import register
from kquota.proxy.offload import decode_request
from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import decode_body, encode_body
from kquota.kafka.protocol.frames import response_frame
from kquota.proxy.request import Answer, Pending, elapsed, forward_decoded

log = logging.getLogger("kquota.proxy")

TOPIC_AUTHORIZATION_FAILED = 29
#: ``ConfigResource.Type.TOPIC``.
TOPIC_RESOURCE = 2
_ZERO_ID = bytes(16)
#: Kafka's texts for the error where its handlers set one.
_TOPIC_AUTH_MESSAGE = "Topic authorization failed."
_CREATE_AUTH_MESSAGE = "Authorization failed."


def own_topic_names(store: Any) -> frozenset[str]:
    """The topics of a ``kafka://`` store (its topic and the fleet's usage topic); none for
    another store. The usage topic is closed even when no fleet uses it: a client must not
    create it first."""
    url = str(getattr(store, "url", "") or "")
    topic = getattr(store, "topic", None)
    if not url.lower().startswith("kafka://") or not topic:
        return frozenset()
    from kquota.proxy.fleet_usage import USAGE_SUFFIX

    return frozenset({topic, topic + USAGE_SUFFIX})


def resolve_ids(store: Any, names: Iterable[str], timeout: float = 5.0) -> list[bytes]:
    """The topic ids of ``names`` on the store's cluster (those that exist); ``[]`` when the
    cluster cannot say (logged: the ids are then learned from Metadata responses)."""
    try:
        from confluent_kafka import KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": store.hosts, "client.id": "kquota-proxy-own-topics",
                             **(getattr(store, "client_security", None) or {})})
        futures = admin.describe_topics(TopicCollection(sorted(names)), request_timeout=timeout)
    except Exception as e:  # noqa: BLE001 - no client or no cluster: learned from Metadata
        log.warning("own topics: cannot describe %s: %s", ", ".join(sorted(names)), e)
        return []
    ids = []
    for name, future in futures.items():
        try:
            uuid = future.result(timeout).topic_id
        except KafkaException:
            continue  # not created yet
        except Exception as e:  # noqa: BLE001 - a future's timeout
            log.warning("own topics: cannot describe %s: %s", name, e)
            continue
        hi, lo = uuid.get_most_significant_bits(), uuid.get_least_significant_bits()
        ids.append((hi & (2**64 - 1)).to_bytes(8, "big") + (lo & (2**64 - 1)).to_bytes(8, "big"))
    return ids


class OwnTopics:
    """The own topics' names and the ids learned so far; ``on_id`` tells the native plane."""

    def __init__(self, names: Iterable[str] = (), on_id: Optional[Callable[[bytes], None]] = None) -> None:
        self.names = frozenset(names)
        self.ids: set[bytes] = set()
        self.on_id = on_id

    def learn(self, topic_id: Optional[bytes]) -> None:
        """Remembers an own topic's id (the zero id names none)."""
        if not topic_id or topic_id == _ZERO_ID or topic_id in self.ids:
            return
        self.ids.add(topic_id)
        if self.on_id is not None:
            self.on_id(topic_id)

    def named(self, name: Optional[str], topic_id: Optional[bytes] = None) -> bool:
        """Whether a topic given by name or id is one of the own topics."""
        return (name is not None and name in self.names) or (topic_id is not None and topic_id in self.ids)


# ---------------------------------------------------------------------------- Metadata


class MetadataPlan:
    """What became of a Metadata request's own topics: the error entries to add to the answer,
    and whether the answer keeps only them (a v0 request whose topics were all own ones: its
    forwarded empty list means every topic)."""

    __slots__ = ("refused", "only_refused")

    def __init__(self, refused: list, only_refused: bool) -> None:
        self.refused = refused
        self.only_refused = only_refused


def metadata_request(own: OwnTopics, p: Pending, frame: bytes) -> tuple[bytes, MetadataPlan]:
    """Takes the own topics out of a Metadata request (so none is auto-created for a client),
    each answered as Kafka answers a topic the principal may not describe."""
    h = p.header
    v = h.api_version
    req = decode_body("MetadataRequest", v, frame, h.body_offset)
    topics = req.get("Topics")
    if topics is None or (v == 0 and not topics):
        return frame, MetadataPlan([], False)
    refused, kept = [], []
    for t in topics:
        name, topic_id = t.get("Name"), t.get("TopicId")
        if own.named(name, topic_id):
            if name is None:  # asked by id: the name is not given, the id is not secret
                refused.append(_metadata_error(None, topic_id))
            else:
                refused.append(_metadata_error(name, _ZERO_ID))
        else:
            kept.append(t)
    if not refused:
        return frame, MetadataPlan([], False)
    req["Topics"] = kept
    frame = frame[:h.body_offset] + bytes(encode_body("MetadataRequest", v, req))
    return frame, MetadataPlan(refused, v == 0 and not kept)


def _metadata_error(name: Optional[str], topic_id: Optional[bytes]) -> dict:
    return {"ErrorCode": TOPIC_AUTHORIZATION_FAILED, "Name": name, "TopicId": topic_id or _ZERO_ID,
            "IsInternal": False, "Partitions": [], "TopicAuthorizedOperations": -2147483648}


def metadata_response(own: OwnTopics, body: dict, plan: Optional[MetadataPlan]) -> None:
    """Learns the own topics' ids from a Metadata response and takes them out of it; adds the
    errors of those the request named."""
    kept = []
    for t in body.get("Topics") or ():
        if not _hidden(own, t) and (plan is None or not plan.only_refused):
            kept.append(t)
    if plan is not None:
        kept.extend(plan.refused)
    body["Topics"] = kept


# ---------------------------------------------------------------------------- KIP-599 APIs


def strip_mutation(own: OwnTopics, api_key: int, version: int, body: dict) -> tuple[dict, list]:
    """CreateTopics, DeleteTopics, CreatePartitions: the request without the own topics, and
    their answers (``ControllerApis``: CreateTopics "Authorization failed.", DeleteTopics by id
    without the name)."""
    key = "TopicNames" if api_key == apis.DELETE_TOPICS and version < 6 else "Topics"
    topics = body.get(key) or []
    refused, kept = [], []
    for t in topics:
        name = t if isinstance(t, str) else t.get("Name")
        topic_id = None if isinstance(t, str) else t.get("TopicId")
        if not own.named(name, topic_id):
            kept.append(t)
        elif api_key == apis.CREATE_TOPICS:
            refused.append({"Name": name, "ErrorCode": TOPIC_AUTHORIZATION_FAILED,
                            "ErrorMessage": _CREATE_AUTH_MESSAGE})
        elif api_key == apis.CREATE_PARTITIONS:
            refused.append({"Name": name, "ErrorCode": TOPIC_AUTHORIZATION_FAILED, "ErrorMessage": None})
        elif name is None or name not in own.names:  # DeleteTopics by id
            refused.append({"Name": None, "TopicId": topic_id, "ErrorCode": TOPIC_AUTHORIZATION_FAILED,
                            "ErrorMessage": _TOPIC_AUTH_MESSAGE})
        else:
            refused.append({"Name": name, "TopicId": _ZERO_ID, "ErrorCode": TOPIC_AUTHORIZATION_FAILED,
                            "ErrorMessage": _TOPIC_AUTH_MESSAGE})
    if not refused:
        return body, []
    return dict(body, **{key: kept}), refused


def mutation_topics(api_key: int, version: int, body: dict) -> list:
    """The topics a KIP-599 request still names."""
    key = "TopicNames" if api_key == apis.DELETE_TOPICS and version < 6 else "Topics"
    return body.get(key) or []


# ---------------------------------------------------------------------------- by-topic APIs


def _partitions_refused(partition: Callable[[dict], dict]) -> Callable[[dict], dict]:
    def entry(topic: dict) -> dict:
        return {"Name": topic["Name"], "Partitions": [partition(p) for p in topic.get("Partitions") or ()]}
    return entry


def _resource_refused(resource: dict) -> dict:
    return {"ErrorCode": TOPIC_AUTHORIZATION_FAILED, "ErrorMessage": None,
            "ResourceType": resource["ResourceType"], "ResourceName": resource["ResourceName"]}


#: api key -> (request schema, response schema, request list, response list, refused entry):
#: the APIs relayed otherwise unparsed whose request names topics.
_BY_TOPIC: dict[int, tuple[str, str, str, str, Callable[[dict], dict]]] = {
    apis.LIST_OFFSETS: ("ListOffsetsRequest", "ListOffsetsResponse", "Topics", "Topics", _partitions_refused(
        lambda p: {"PartitionIndex": p["PartitionIndex"], "ErrorCode": TOPIC_AUTHORIZATION_FAILED,
                   "OldStyleOffsets": [], "Timestamp": -1, "Offset": -1, "LeaderEpoch": -1})),
    apis.DELETE_RECORDS: ("DeleteRecordsRequest", "DeleteRecordsResponse", "Topics", "Topics", _partitions_refused(
        lambda p: {"PartitionIndex": p["PartitionIndex"], "LowWatermark": -1,
                   "ErrorCode": TOPIC_AUTHORIZATION_FAILED})),
    apis.ALTER_CONFIGS: ("AlterConfigsRequest", "AlterConfigsResponse", "Resources", "Responses",
                         _resource_refused),
    apis.INCREMENTAL_ALTER_CONFIGS: ("IncrementalAlterConfigsRequest", "IncrementalAlterConfigsResponse",
                                     "Resources", "Responses", _resource_refused),
}


def _is_own(own: OwnTopics, api_key: int, item: dict) -> bool:
    if api_key in (apis.ALTER_CONFIGS, apis.INCREMENTAL_ALTER_CONFIGS):
        return item.get("ResourceType") == TOPIC_RESOURCE and item.get("ResourceName") in own.names
    return item.get("Name") in own.names


async def _relayed(conn: Any, p: Pending, frame: bytes, t0: int) -> None:
    """Forwards the request as it came; the broker's answer goes back as it is."""
    elapsed(p, t0)
    await conn.forward(p, frame, conn.plain_response)


async def _decoded_unless_relayed(conn: Any, p: Pending, frame: bytes, t0: int, schema: str) -> Optional[dict]:
    """The request decoded as ``schema``, or ``None`` once it is relayed as it came: a proxy
    without own topics has nothing to keep out of it."""
    if not conn.server.own_topics.names:
        await _relayed(conn, p, frame, t0)
        return None
    return await decode_request(schema, p.header, frame, conn.server.max_decoded_request_bytes)


async def by_topic(conn: Any, p: Pending, frame: bytes, t0: int) -> None:
    """ListOffsets, DeleteRecords, AlterConfigs, IncrementalAlterConfigs: relayed with only the
    request quota, unless they name an own topic: then those are answered
    ``TOPIC_AUTHORIZATION_FAILED`` (``KafkaApis.handleListOffsetRequest``,
    ``handleDeleteRecordsRequest``, ``configsAuthorizationApiError``) and the rest forwarded, the
    broker's answer merged with the proxy's."""
    own: OwnTopics = conn.server.own_topics
    h = p.header
    v = h.api_version
    req_schema, resp_schema, req_key, resp_key, refuse = _BY_TOPIC[h.api_key]
    req = await _decoded_unless_relayed(conn, p, frame, t0, req_schema)
    if req is None:
        return
    items = req.get(req_key) or []
    refused = [refuse(i) for i in items if _is_own(own, h.api_key, i)]
    if not refused:
        await _relayed(conn, p, frame, t0)
        return

    def finish(body: dict) -> Answer:
        body[resp_key] = list(body.get(resp_key) or []) + refused
        throttle = conn.request_throttle(p)
        data = response_frame(h.correlation_id, h.api_key, v, encode_body(resp_schema, v, body))
        return conn.throttled(p, data, throttle), throttle

    kept = [i for i in items if not _is_own(own, h.api_key, i)]
    if not kept:
        elapsed(p, t0)
        data, throttle = finish({"ThrottleTimeMs": 0})
        await conn.answer(p, data, throttle)
        return
    req[req_key] = kept
    frame = frame[:h.body_offset] + bytes(encode_body(req_schema, v, req))

    await forward_decoded(conn, p, frame, t0, resp_schema, finish)


for _key in _BY_TOPIC:
    register(_key)(by_topic)

#: The APIs handed to Python only for the own topics: without them they stay relayed natively.
ONLY_FOR_OWN_TOPICS = frozenset({*_BY_TOPIC, apis.DESCRIBE_TOPIC_PARTITIONS})


# ---------------------------------------------------------------------------- KIP-966


@register(apis.DESCRIBE_TOPIC_PARTITIONS)
async def describe_topic_partitions(conn: Any, p: Pending, frame: bytes, t0: int) -> None:
    """DescribeTopicPartitions lists topics as Metadata does, so it hides the own topics the
    same way (``DescribeTopicPartitionsRequestHandler``: an empty list is every topic, the
    unauthorized left out; one named gets the error, without its id)."""
    own: OwnTopics = conn.server.own_topics
    h = p.header
    v = h.api_version
    req = await _decoded_unless_relayed(conn, p, frame, t0, "DescribeTopicPartitionsRequest")
    if req is None:
        return
    topics = req.get("Topics") or []
    refused = [_metadata_error(t["Name"], _ZERO_ID) for t in topics if t["Name"] in own.names]
    kept = [t for t in topics if t["Name"] not in own.names]

    def finish(body: dict) -> Answer:
        body["Topics"] = [t for t in body.get("Topics") or () if not _hidden(own, t)] + refused
        throttle = conn.request_throttle(p)
        data = response_frame(h.correlation_id, h.api_key, v, encode_body("DescribeTopicPartitionsResponse", v, body))
        return conn.throttled(p, data, throttle), throttle

    if refused and not kept:  # forwarded empty, the list would mean every topic
        elapsed(p, t0)
        data, throttle = finish({"ThrottleTimeMs": 0, "NextCursor": None})
        await conn.answer(p, data, throttle)
        return
    if refused:
        req["Topics"] = kept
        frame = frame[:h.body_offset] + bytes(encode_body("DescribeTopicPartitionsRequest", v, req))
    await forward_decoded(conn, p, frame, t0, "DescribeTopicPartitionsResponse", finish)


def _hidden(own: OwnTopics, topic: dict) -> bool:
    """Whether a listed topic is an own one (its id learned on the way)."""
    if topic.get("Name") in own.names:
        own.learn(topic.get("TopicId"))
        return True
    return False
