"""Request handlers of the APIs the proxy inspects (every other API is relayed as bytes).

Each follows the Kafka broker method named in its docstring; the quota arithmetic is the
kernel's (``kquota.QuotaManager``), the proxy only decides what to record and when. Produce and
Fetch are not here: the native data plane runs them (``rust/kquota-proxy``) with the kernel's
response steps (``ClientHandle.produce_response`` / ``fetch_response``).
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import TYPE_CHECKING, Optional

from kquota.kafka.protocol import apis
from kquota.proxy import addresses, mutations, own_topics, sasl
from kquota.kafka.protocol.codec import decode_body, encode_body, read_fixed
from kquota.proxy.dispatch import register
from kquota.proxy.offload import decode_request, encode_answer
from kquota.kafka.protocol.frames import response_body_offset, response_frame
from kquota.proxy.request import Answer, Pending, elapsed, forward_decoded
from kquota.proxy.api_versions import clamp_api_versions, unsupported_api_versions

if TYPE_CHECKING:  # annotations only: the native plane's connection, which imports no handler
    from kquota.proxy.bridge import BridgeConnection


_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_SASL_HANDSHAKE_BODY = struct.Struct(">hi")


# ---------------------------------------------------------------------------- ApiVersions


@register(apis.API_VERSIONS)
async def api_versions(conn: BridgeConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Relayed; the answer offers only versions the proxy parses. A version outside those is
    answered by the proxy as Kafka answers it (``KafkaApis.handleApiVersionsRequest``, KIP-511):
    ``UNSUPPORTED_VERSION`` in a v0 body listing the ApiVersions versions, so the client retries
    with one the proxy reads (a broker that speaks a newer one never sees it)."""
    async def on_response(p: Pending, frame: bytes) -> Answer:
        throttle = _authenticator_throttle(conn, p)
        return clamp_api_versions(frame, p.header.api_version, throttle), throttle

    lo, hi = apis.PARSED_VERSIONS[apis.API_VERSIONS]
    elapsed(p, t0)
    if lo <= p.header.api_version <= hi:
        await conn.forward(p, frame, on_response)
    else:
        await conn.answer(p, unsupported_api_versions(p.header.correlation_id), _authenticator_throttle(conn, p))


def _authenticator_throttle(conn: BridgeConnection, p: Pending) -> int:
    """ApiVersions' request quota: before a SASL listener's client is authenticated, Kafka's
    ``SaslServerAuthenticator`` answers it, not ``KafkaApis``: nothing is recorded, and no quota
    handle (sensor, client-id name) is made for a client no one has authenticated."""
    return conn.request_throttle(p) if conn.auth.authenticated else 0


# ---------------------------------------------------------------------------- addresses


def _remember_partitions(conn: BridgeConnection, body: dict) -> None:
    """Each topic's partition count (KIP-599's partition mutations) and, from Metadata v10+, its
    topic id, which the native Fetch path names topics by from v13 (its topic quotas): both
    from the broker's answer, never from the request."""
    ids = []
    for topic in body.get("Topics") or ():
        name = topic.get("Name")
        if name and topic.get("ErrorCode", 0) == 0:
            conn.server.topic_partitions[name] = len(topic.get("Partitions") or ())
            if topic.get("TopicId"):
                ids.append((topic["TopicId"], name))
    if ids:
        conn.learn_topic_ids(ids)


async def _addressed_response(conn: BridgeConnection, p: Pending, frame: bytes,
                              own: Optional[own_topics.MetadataPlan] = None) -> Answer:
    t0 = time.perf_counter_ns()
    h = p.header
    schema = {apis.METADATA: "MetadataResponse", apis.FIND_COORDINATOR: "FindCoordinatorResponse",
              apis.DESCRIBE_CLUSTER: "DescribeClusterResponse"}[h.api_key]
    offset = response_body_offset(frame, h.api_key, h.api_version)
    body = decode_body(schema, h.api_version, frame, offset)
    if h.api_key == apis.METADATA:
        if conn.server.own_topics.names:
            own_topics.metadata_response(conn.server.own_topics, body, own)
        _remember_partitions(conn, body)
    await addresses.rewrite_body(h.api_key, h.api_version, body, conn.resolve)
    elapsed(p, t0)
    throttle = conn.request_throttle(p)
    data = response_frame(h.correlation_id, h.api_key, h.api_version, encode_body(schema, h.api_version, body))
    return conn.throttled(p, data, throttle), throttle


async def _addressed(conn: BridgeConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Metadata / FindCoordinator / DescribeCluster: broker addresses become the proxy's (and
    Metadata shows no client the proxy's own topics)."""
    own = None
    if p.header.api_key == apis.METADATA and conn.server.own_topics.names:
        frame, own = own_topics.metadata_request(conn.server.own_topics, p, frame)
    elapsed(p, t0)
    await conn.forward(p, frame, lambda p, f: _addressed_response(conn, p, f, own))


for _key in (apis.METADATA, apis.FIND_COORDINATOR, apis.DESCRIBE_CLUSTER):
    register(_key)(_addressed)


# ---------------------------------------------------------------------------- KIP-599


async def _mutation(conn: BridgeConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Create/Delete topics, CreatePartitions: controller mutation quota (strict or permissive)."""
    h = p.header
    v = h.api_version
    req_schema, resp_schema = mutations.REQUEST_SCHEMA[h.api_key], mutations.RESPONSE_SCHEMA[h.api_key]
    req = await decode_request(req_schema, h, frame, conn.server.max_decoded_request_bytes)
    req, refused = own_topics.strip_mutation(conn.server.own_topics, h.api_key, v, req)
    handle = conn.handle(h.client_id)
    plan = mutations.plan(h.api_key, v, req, handle, conn.server.topic_partitions.get,
                          conn.server.default_partitions)
    if refused:  # the proxy's own topics: refused, never charged
        plan.rejected = refused + plan.rejected
        if plan.forward is not None and not own_topics.mutation_topics(h.api_key, v, plan.forward):
            plan.forward = None

    def finish(body: Optional[dict]) -> Answer:
        throttle = conn.mutation_throttle(p, plan.throttle_ms)
        merged = mutations.merge(h.api_key, body, plan)
        return conn.throttled(p, response_frame(h.correlation_id, h.api_key, v, encode_body(resp_schema, v, merged)),
                              throttle), throttle

    if plan.forward is None:
        elapsed(p, t0)
        data, throttle = finish(None)
        await conn.answer(p, data, throttle)
        return
    if plan.rejected:
        frame = frame[:h.body_offset] + bytes(encode_body(req_schema, v, plan.forward))

    await forward_decoded(conn, p, frame, t0, resp_schema, finish)


for _key in (apis.CREATE_TOPICS, apis.DELETE_TOPICS, apis.CREATE_PARTITIONS):
    register(_key)(_mutation)


# ---------------------------------------------------------------------------- client quotas


@register(apis.DESCRIBE_CLIENT_QUOTAS)
async def describe_client_quotas(conn: BridgeConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Answered from the proxy's configuration (never reaches the broker), to admin principals
    and ``--describe-principals`` only."""
    h = p.header
    req = await decode_request("DescribeClientQuotasRequest", h, frame, conn.server.max_decoded_request_bytes)
    body = await conn.server.admin.describe(req, conn.user if conn.may_administer else None)
    await _local_answer(conn, p, t0, "DescribeClientQuotasResponse", body)


@register(apis.ALTER_CLIENT_QUOTAS)
async def alter_client_quotas(conn: BridgeConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Applied to the proxy's store (only for ``--admin-principals``)."""
    h = p.header
    req = await decode_request("AlterClientQuotasRequest", h, frame, conn.server.max_decoded_request_bytes)
    body = await conn.server.admin.alter(req, conn.user if conn.may_administer else None)
    await _local_answer(conn, p, t0, "AlterClientQuotasResponse", body)


async def _local_answer(conn: BridgeConnection, p: Pending, t0: int, schema: str, body: dict) -> None:
    h = p.header
    elapsed(p, t0)
    throttle = conn.request_throttle(p)
    body["ThrottleTimeMs"] = throttle
    encoded = await encode_answer(schema, h.api_version, body, len(body.get("Entries") or ()))
    data = response_frame(h.correlation_id, h.api_key, h.api_version, encoded)
    await conn.answer(p, data, throttle)


# ---------------------------------------------------------------------------- SASL
#
# The broker authenticates: both requests are relayed on a SASL listener, and the principal is
# taken only from an exchange the broker completed (kquota.proxy.sasl). They are Kafka's
# authenticator's there (pre-authentication and KIP-368 re-authentication): nothing is recorded.
# On any other listener Kafka's ``KafkaApis`` answers both ILLEGAL_SASL_STATE, recorded as any
# request: so does the proxy, without asking the broker.


@register(apis.SASL_HANDSHAKE)
async def sasl_handshake(conn: BridgeConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Relayed; opens the exchange the SaslAuthenticate rounds after it belong to."""
    h = p.header
    if not conn.auth.sasl_listener:
        # SaslHandshakeResponse v0-1 (not flexible): ErrorCode, then Mechanisms (none).
        await _illegal_sasl_state(conn, p, t0, _SASL_HANDSHAKE_BODY.pack(apis.ILLEGAL_SASL_STATE, 0))
        return
    mechanism = decode_body("SaslHandshakeRequest", h.api_version, frame, h.body_offset)["Mechanism"]
    exchange = conn.auth.handshake(mechanism)

    async def on_response(p: Pending, frame: bytes) -> Answer:
        offset = response_body_offset(frame, h.api_key, h.api_version)
        conn.auth.handshake_answered(exchange, read_fixed(_I16, frame, offset, "SaslHandshake ErrorCode"))
        return (_I32.pack(len(frame)), frame), 0

    elapsed(p, t0)
    await conn.forward(p, frame, on_response)


@register(apis.SASL_AUTHENTICATE)
async def sasl_authenticate(conn: BridgeConnection, p: Pending, frame: bytes, t0: int) -> None:
    """Relayed; the broker's answer decides this round of its exchange only. A request outside
    any open exchange after authentication is ``KafkaApis``' (recorded); it changes nothing."""
    h = p.header
    if not conn.auth.sasl_listener:
        await _illegal_sasl_state(conn, p, t0, encode_body("SaslAuthenticateResponse", h.api_version, {
            "ErrorCode": apis.ILLEGAL_SASL_STATE, "AuthBytes": b"", "SessionLifetimeMs": 0,
            "ErrorMessage": "SaslAuthenticate request received after successful authentication"}))
        return
    req = decode_body("SaslAuthenticateRequest", h.api_version, frame, h.body_offset)
    rnd = conn.auth.round(req["AuthBytes"])
    recorded = conn.auth.authenticated and (rnd is None or rnd.exchange.over)

    async def on_response(p: Pending, frame: bytes) -> Answer:
        offset = response_body_offset(frame, h.api_key, h.api_version)
        body = decode_body("SaslAuthenticateResponse", h.api_version, frame, offset)
        outcome = conn.auth.answered(rnd, body["ErrorCode"], body["AuthBytes"])
        owners = conn.server.token_owners
        if outcome == sasl.AUTHENTICATED and conn.auth.token_authenticated and owners is not None:
            owner = await asyncio.to_thread(owners.owner, conn.auth.principal)
            if owner is not None:
                conn.auth.token_owner(owner)
        conn.authenticated(outcome)
        if recorded:
            return await conn.plain_response(p, frame)
        return (_I32.pack(len(frame)), frame), 0

    elapsed(p, t0)
    await conn.forward(p, frame, on_response)


async def _illegal_sasl_state(conn: BridgeConnection, p: Pending, t0: int, body: bytes | bytearray) -> None:
    h = p.header
    elapsed(p, t0)
    throttle = conn.request_throttle(p)
    data = response_frame(h.correlation_id, h.api_key, h.api_version, body)
    await conn.answer(p, data, throttle)
