"""Request handlers of the APIs the proxy inspects (every other API is relayed as bytes).

Each follows the Kafka broker method named in its docstring; the quota arithmetic is the
kernel's (``kquota.QuotaManager``), the proxy only decides what to record and when.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any, Optional

from kquota._kquota import fetch_answer
from kquota.proxy import addresses, apis, mutations, sasl
from kquota.proxy.codec import (
    CodecError,
    decode_body,
    encode_body,
    is_flexible,
    read_fixed,
    read_uvarint,
    top_level_tags,
)
from kquota.proxy.connection import Answer, ClientConnection, Pending
from kquota.proxy.dispatch import register
from kquota.proxy.frames import response_body_offset, response_frame
from kquota.proxy.streaming import StreamPlan
from kquota.proxy.throttle import patch_throttle, patch_throttle_head
from kquota.proxy.versions import clamp_api_versions, unsupported_api_versions
from kquota.quota_type import ClientQuotaType

log = logging.getLogger("kquota.proxy")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
PRODUCE = ClientQuotaType.PRODUCE
FETCH = ClientQuotaType.FETCH


def _elapsed(p: Pending, t0: int) -> None:
    p.ns += time.perf_counter_ns() - t0


# ---------------------------------------------------------------------------- ApiVersions


@register(apis.API_VERSIONS)
async def api_versions(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Relayed; the answer offers only versions the proxy parses. A version outside those is
    answered by the proxy as Kafka answers it (``KafkaApis.handleApiVersionsRequest``, KIP-511):
    ``UNSUPPORTED_VERSION`` in a v0 body listing the ApiVersions versions, so the client retries
    with one the proxy reads (a broker that speaks a newer one never sees it)."""
    async def on_response(p: Pending, frame: bytes) -> Answer:
        throttle = conn.request_throttle(p)
        return clamp_api_versions(frame, p.header.api_version, throttle), throttle

    lo, hi = apis.PARSED_VERSIONS[apis.API_VERSIONS]
    _elapsed(p, t0)
    if lo <= p.header.api_version <= hi:
        await conn.forward(p, frame, on_response)
    else:
        await conn.answer(p, unsupported_api_versions(p.header.correlation_id), conn.request_throttle(p))


# ---------------------------------------------------------------------------- addresses


def _remember_partitions(conn: ClientConnection, body: dict) -> None:
    for topic in body.get("Topics") or ():
        name = topic.get("Name")
        if name and topic.get("ErrorCode", 0) == 0:
            conn.server.topic_partitions[name] = len(topic.get("Partitions") or ())


async def _addressed_response(conn: ClientConnection, p: Pending, frame: bytes) -> Answer:
    t0 = time.perf_counter_ns()
    h = p.header
    schema = {apis.METADATA: "MetadataResponse", apis.FIND_COORDINATOR: "FindCoordinatorResponse",
              apis.DESCRIBE_CLUSTER: "DescribeClusterResponse"}[h.api_key]
    offset = response_body_offset(frame, h.api_key, h.api_version)
    body = decode_body(schema, h.api_version, frame, offset)
    if h.api_key == apis.METADATA:
        _remember_partitions(conn, body)
    await addresses.rewrite_body(h.api_key, h.api_version, body, conn.resolve)
    _elapsed(p, t0)
    throttle = conn.request_throttle(p)
    if throttle > 0 and "ThrottleTimeMs" in body:
        body["ThrottleTimeMs"] = max(body["ThrottleTimeMs"], throttle)
    return response_frame(h.correlation_id, h.api_key, h.api_version, encode_body(schema, h.api_version, body)), throttle


async def _addressed(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Metadata / FindCoordinator / DescribeCluster: broker addresses become the proxy's."""
    _elapsed(p, t0)
    await conn.forward(p, frame, lambda p, f: _addressed_response(conn, p, f))


for _key in (apis.METADATA, apis.FIND_COORDINATOR, apis.DESCRIBE_CLUSTER):
    register(_key)(_addressed)


# ---------------------------------------------------------------------------- Produce


def produce_acks(frame: bytes, offset: int, version: int) -> int:
    """The ``acks`` of a Produce request (after the transactional id in v3+)."""
    pos = offset
    if version >= 3:
        if is_flexible(apis.PRODUCE, version):
            n, pos = read_uvarint(frame, pos)
            pos += max(n - 1, 0)
        else:
            n = read_fixed(_I16, frame, pos, "Produce TransactionalId")
            pos += 2 + max(n, 0)
    if pos + 2 > len(frame):
        raise CodecError("truncated Produce request")
    return _I16.unpack_from(frame, pos)[0]


@register(apis.PRODUCE, streamed=True)
async def produce(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """KafkaApis.handleProduceRequest: the request size (header + body) is recorded when the
    broker answers; throttle = max(bandwidth, request); acks=0 has no answer but is muted.

    ``frame`` may be only the head of a large request (the rest is streamed to the broker)."""
    h = p.header
    try:
        acks = produce_acks(frame, h.body_offset, h.api_version)
    except CodecError:
        whole = await conn.read_rest(frame)
        if whole is frame:
            raise
        frame = whole  # a transactional id longer than the head
        acks = produce_acks(frame, h.body_offset, h.api_version)
    size = p.size
    if acks == 0:
        throttle = int(conn.handle(h.client_id).record_and_get_throttle_time_ms(PRODUCE, size))
        conn.server.log_request(conn, h.client_id, PRODUCE, size)
        _elapsed(p, t0)
        conn.server.qm.record_exempt_request_time(p.ns)  # acks=0 is exempt from the request quota
        await conn.forward_no_response(p, frame, throttle)
        return

    async def on_response(p: Pending, frame: bytes) -> Answer:
        t1 = time.perf_counter_ns()
        bandwidth = int(conn.handle(h.client_id).record_and_get_throttle_time_ms(PRODUCE, size))
        conn.server.log_request(conn, h.client_id, PRODUCE, size)
        _elapsed(p, t1)
        throttle = max(bandwidth, conn.request_throttle(p))
        if h.api_version >= 10 and (throttle > 0 or addresses.NODE_ENDPOINTS in top_level_tags(
                "ProduceResponse", h.api_version, frame, response_body_offset(frame, h.api_key, h.api_version))):
            offset = response_body_offset(frame, h.api_key, h.api_version)
            body = decode_body("ProduceResponse", h.api_version, frame, offset)
            changed = await addresses.rewrite_body(apis.PRODUCE, h.api_version, body, conn.resolve)
            if changed or throttle > 0:
                body["ThrottleTimeMs"] = max(body.get("ThrottleTimeMs", 0), throttle)
                return response_frame(h.correlation_id, h.api_key, h.api_version,
                                      encode_body("ProduceResponse", h.api_version, body)), throttle
        elif throttle > 0:
            offset = response_body_offset(frame, h.api_key, h.api_version)
            return patch_throttle(frame, h.api_key, h.api_version, offset, throttle), throttle
        return (_I32.pack(len(frame)), frame), throttle

    _elapsed(p, t0)
    await conn.forward(p, frame, on_response)
    if conn.handle(h.client_id).peek_throttle_time_ms(PRODUCE, conn.unanswered_produce_bytes()) > 0:
        conn.hold_next_request()  # recording what is unanswered would throttle the client


# ---------------------------------------------------------------------------- Fetch


_FETCH_FIXED = struct.Struct(">iiibii")  # MaxWaitMs MinBytes MaxBytes IsolationLevel SessionId SessionEpoch


def fetch_request_fields(frame: bytes, offset: int, version: int) -> dict:
    """The Fetch request fields the proxy uses, read in place (v7+: fixed offsets; the topics
    are walked only on v15+ to find a ReplicaState tag); older versions are decoded."""
    if version < 7:
        return decode_body("FetchRequest", version, frame, offset)
    base = offset if version >= 15 else offset + 4
    if base + _FETCH_FIXED.size > len(frame):
        raise CodecError("truncated Fetch request")
    _, min_bytes, max_bytes, _, session_id, epoch = _FETCH_FIXED.unpack_from(frame, base)
    out = {"MinBytes": min_bytes, "MaxBytes": max_bytes, "SessionId": session_id, "SessionEpoch": epoch}
    if version < 15:
        out["ReplicaId"] = read_fixed(_I32, frame, offset, "Fetch ReplicaId")
    elif _REPLICA_STATE in top_level_tags("FetchRequest", version, frame, offset):
        out["ReplicaState"] = decode_body("FetchRequest", version, frame, offset).get("ReplicaState")
    return out


_REPLICA_STATE = 1  # the tag of ReplicaState in Fetch v15+ requests


def _replica_id(req: dict, version: int) -> int:
    if version >= 15:
        state = req.get("ReplicaState")
        return state.get("ReplicaId", -1) if state else -1
    return req.get("ReplicaId", -1)


@register(apis.FETCH)
async def fetch(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """KafkaApis.handleFetchRequest: max bytes capped to what the quota window allows, the
    response size recorded; over quota, the answer is empty with the throttle and the size is
    unrecorded. Follower fetches (replica id >= 0) are exempt."""
    h = p.header
    v = h.api_version
    req = fetch_request_fields(frame, h.body_offset, v)
    if _replica_id(req, v) >= 0:
        _elapsed(p, t0)
        await conn.forward(p, frame, conn.plain_response)
        return
    handle = conn.handle(h.client_id)
    cap = handle.max_value_in_quota_window(FETCH)
    max_bytes = req["MaxBytes"]
    if v >= 3 and cap < max_bytes:
        # Kafka: fetchMaxBytes = min(maxBytes, quota window bytes); fetchMinBytes = min(minBytes, that).
        max_bytes = max(int(cap), 0)
        buf = bytearray(frame)
        at = h.body_offset + (0 if v >= 15 else 4)  # ReplicaId (v0-14), MaxWaitMs, MinBytes, MaxBytes
        _I32.pack_into(buf, at + 4, min(req["MinBytes"], max_bytes))
        _I32.pack_into(buf, at + 8, max_bytes)
        frame = bytes(buf)

    def decide(p: Pending, frame: bytes, offset: int, size: int) -> tuple[str, Any, int]:
        """(how, data, throttle) for a response of ``size`` bytes (``frame``: all or its head):
        "patch" (throttle patched in), "empty" (the throttled empty answer in ``data``),
        "pass" (unchanged, NodeEndpoints aside)."""
        t1 = time.perf_counter_ns()
        bandwidth = int(handle.record_and_get_throttle_time_ms(FETCH, size))
        _elapsed(p, t1)
        throttle = max(bandwidth, conn.request_throttle(p))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("fetch v%d by %r: %d bytes, max bytes %d, throttle %d ms", v, h.client_id, size,
                      max_bytes, throttle)
        answer = fetch_answer(size, cap, throttle)
        if answer == "mute":
            # A large share of the quota window, or more than all of it: Kafka's empty answer
            # would leave the window's remainder unused (or repeat forever). Deliver it, keep it
            # recorded and mute until the quota has allowed it: Kafka's throttle alone counts
            # samples - 1 windows the client never waited, and let such a consumer through at
            # up to 1.5x its quota.
            throttle = max(throttle, handle.time_at_quota_ms(FETCH, size))
            conn.server.log_request(conn, h.client_id, FETCH, size)
            return "patch", None, throttle
        if answer == "empty":
            handle.unrecord(FETCH, size)
            error = read_fixed(_I16, frame, offset + 4, "Fetch ErrorCode") if v >= 7 else 0
            if error == 0:
                return "empty", throttled_fetch_response(h.correlation_id, v, frame, offset, req, throttle), throttle
            return "patch", None, throttle
        conn.server.log_request(conn, h.client_id, FETCH, size)
        return "pass", None, 0

    async def on_response(p: Pending, frame: bytes) -> Answer:
        offset = response_body_offset(frame, h.api_key, v)
        how, data, throttle = decide(p, frame, offset, len(frame))
        if how == "empty":
            return data, throttle
        if how == "patch":
            return patch_throttle(frame, h.api_key, v, offset, throttle), throttle
        if v >= 16 and addresses.NODE_ENDPOINTS in top_level_tags("FetchResponse", v, frame, offset):
            rewritten = await addresses.rewrite_addresses(frame, apis.FETCH, v, offset, conn.resolve)
            if rewritten is not None:
                return rewritten, 0
        return (_I32.pack(len(frame)), frame), 0

    def on_stream(p: Pending, head: bytes, size: int) -> Optional[StreamPlan]:
        """The plan for a large response, from its head (``None``: the head is too short)."""
        try:
            offset = response_body_offset(head, h.api_key, v)
        except CodecError:
            return None
        if offset + 10 > len(head):
            return None
        how, data, throttle = decide(p, head, offset, size)
        if how == "empty":
            return data, throttle, True, None
        out = patch_throttle_head(head, size, h.api_key, v, offset, throttle)
        if v < 16:
            return out, throttle, False, None
        return out, throttle, False, addresses.StreamedTail(apis.FETCH, v, offset, size, conn.resolve)

    _elapsed(p, t0)
    await conn.forward(p, frame, on_response, on_stream)


def throttled_fetch_response(corr: int, version: int, frame: bytes, offset: int, req: dict, throttle: int) -> bytes:
    """An empty FetchResponse carrying the throttle, as ``FetchContext.getThrottledResponse``.

    The session id: a sessionless fetch (epoch -1) gets none; an incremental one keeps its
    session; a full fetch (epoch 0) keeps the session the broker has just created for it, since
    the proxy, unlike Kafka's throttled path, cannot stop the broker from creating it — the
    client then continues incrementally instead of opening a new session every throttled fetch.
    """
    session = 0
    if version >= 7 and req.get("SessionEpoch", -1) >= 0:
        session = read_fixed(_I32, frame, offset + 6, "Fetch SessionId")  # after ThrottleTimeMs, ErrorCode
    body = {"ThrottleTimeMs": throttle, "ErrorCode": 0, "SessionId": session, "Responses": []}
    return response_frame(corr, apis.FETCH, version, encode_body("FetchResponse", version, body))


# ---------------------------------------------------------------------------- KIP-599


async def _mutation(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Create/Delete topics, CreatePartitions: controller mutation quota (strict or permissive)."""
    h = p.header
    v = h.api_version
    req_schema, resp_schema = mutations.REQUEST_SCHEMA[h.api_key], mutations.RESPONSE_SCHEMA[h.api_key]
    req = decode_body(req_schema, v, frame, h.body_offset)
    handle = conn.handle(h.client_id)
    plan = mutations.plan(h.api_key, v, req, handle, conn.server.topic_partitions.get,
                          conn.server.default_partitions)

    def finish(body: Optional[dict]) -> Answer:
        throttle = max(plan.throttle_ms, conn.request_throttle(p))
        merged = mutations.merge(h.api_key, body, plan)
        merged["ThrottleTimeMs"] = max(merged["ThrottleTimeMs"], throttle)
        return response_frame(h.correlation_id, h.api_key, v, encode_body(resp_schema, v, merged)), throttle

    if plan.forward is None:
        _elapsed(p, t0)
        data, throttle = finish(None)
        await conn.answer(p, data, throttle)
        return
    if plan.rejected:
        frame = frame[:h.body_offset] + bytes(encode_body(req_schema, v, plan.forward))

    async def on_response(p: Pending, frame: bytes) -> Answer:
        t1 = time.perf_counter_ns()
        body = decode_body(resp_schema, v, frame, response_body_offset(frame, h.api_key, v))
        _elapsed(p, t1)
        return finish(body)

    _elapsed(p, t0)
    await conn.forward(p, frame, on_response)


for _key in (apis.CREATE_TOPICS, apis.DELETE_TOPICS, apis.CREATE_PARTITIONS):
    register(_key)(_mutation)


# ---------------------------------------------------------------------------- client quotas


@register(apis.DESCRIBE_CLIENT_QUOTAS)
async def describe_client_quotas(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Answered from the proxy's configuration (never reaches the broker)."""
    h = p.header
    req = decode_body("DescribeClientQuotasRequest", h.api_version, frame, h.body_offset)
    body = await conn.server.admin.describe(req)
    await _local_answer(conn, p, t0, "DescribeClientQuotasResponse", body)


@register(apis.ALTER_CLIENT_QUOTAS)
async def alter_client_quotas(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Applied to the proxy's store (only for ``--admin-principals``)."""
    h = p.header
    req = decode_body("AlterClientQuotasRequest", h.api_version, frame, h.body_offset)
    body = await conn.server.admin.alter(req, conn.user)
    await _local_answer(conn, p, t0, "AlterClientQuotasResponse", body)


async def _local_answer(conn: ClientConnection, p: Pending, t0: int, schema: str, body: dict) -> None:
    h = p.header
    _elapsed(p, t0)
    throttle = conn.request_throttle(p)
    body["ThrottleTimeMs"] = throttle
    data = response_frame(h.correlation_id, h.api_key, h.api_version, encode_body(schema, h.api_version, body))
    await conn.answer(p, data, throttle)


# ---------------------------------------------------------------------------- SASL


@register(apis.SASL_HANDSHAKE)
async def sasl_handshake(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Relayed; the mechanism is remembered to read the username later."""
    h = p.header
    conn.sasl_mechanism = decode_body("SaslHandshakeRequest", h.api_version, frame, h.body_offset)["Mechanism"]
    _elapsed(p, t0)
    await conn.forward(p, frame, conn.plain_response)


@register(apis.SASL_AUTHENTICATE)
async def sasl_authenticate(conn: ClientConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Relayed; the principal becomes the token's username once the broker accepts it."""
    h = p.header
    req = decode_body("SaslAuthenticateRequest", h.api_version, frame, h.body_offset)
    name = sasl.username(conn.sasl_mechanism, req["AuthBytes"])
    if name is not None:
        conn.sasl_user = name

    async def on_response(p: Pending, frame: bytes) -> Answer:
        offset = response_body_offset(frame, h.api_key, h.api_version)
        body = decode_body("SaslAuthenticateResponse", h.api_version, frame, offset)
        if body["ErrorCode"] == 0 and conn.sasl_user is not None:
            conn.user = conn.sasl_user
        return await conn.plain_response(p, frame)

    _elapsed(p, t0)
    await conn.forward(p, frame, on_response)
