"""Units of the proxy: the schema-driven codec, ApiVersions clamp, SASL usernames, the
``ThrottleTimeMs`` patch (the data plane's, as Python's answers use it), broker address
rewriting, KIP-599 planning and the client-quota filter."""

from __future__ import annotations

import base64
import json
import struct

import kquota
import pytest
from kquota.entity import ClientQuotaEntity
from kquota.proxy import mutations, sasl
from kquota.kafka.protocol import apis
from kquota.proxy.admin import _matches, principal_names
from kquota.kafka.protocol.codec import CodecError, decode_body, encode_body
from kquota.kafka.protocol.frames import parse_request_header, response_body_offset, response_frame, with_prefix
from kquota.proxy.api_versions import clamp_api_versions


def test_round_trip_keeps_unknown_tagged_fields():
    body = {"ThrottleTimeMs": 7, "Brokers": [{"NodeId": 1, "Host": "b1", "Port": 9092, "Rack": None}],
            "ClusterId": "c", "ControllerId": 1,
            "Topics": [{"ErrorCode": 0, "Name": "t", "TopicId": bytes(range(16)), "IsInternal": False,
                        "Partitions": [{"ErrorCode": 0, "PartitionIndex": 0, "LeaderId": 1, "LeaderEpoch": 3,
                                        "ReplicaNodes": [1], "IsrNodes": [1], "OfflineReplicas": []}],
                        "TopicAuthorizedOperations": -2147483648}],
            "_tags": {7: b"\x01\x02"}}
    raw = bytes(encode_body("MetadataResponse", 12, body))
    back = decode_body("MetadataResponse", 12, raw, 0)
    assert back["_tags"] == {7: b"\x01\x02"}
    assert back["Brokers"] == body["Brokers"] and back["Topics"][0]["Partitions"][0]["LeaderEpoch"] == 3
    assert bytes(encode_body("MetadataResponse", 12, back)) == raw
    # Non-flexible version: no tags, int16 strings.
    raw1 = bytes(encode_body("MetadataResponse", 1, body))
    assert decode_body("MetadataResponse", 1, raw1, 0)["Brokers"][0]["Host"] == "b1"


def test_tagged_fields_at_their_default_are_left_out_as_kafka_writes_them():
    # tansu ends its ApiVersions v3 answer with all four tagged fields at their defaults (bytes as
    # captured from tansu 0.6). Kafka's generated writers leave such fields out, and librdkafka
    # before 2.2 (Debian's kcat: 2.0.2) skips one byte too few per tag, so it cannot read them.
    tansu_tags = bytes.fromhex("04" "000101" "0108ffffffffffffffff" "020101" "030100")
    head = bytes(encode_body("ApiVersionsResponse", 3, {"ErrorCode": 0, "ApiKeys": [], "ThrottleTimeMs": 0}))
    raw = head[:-1] + tansu_tags
    body = decode_body("ApiVersionsResponse", 3, raw, 0)
    assert body["FinalizedFeaturesEpoch"] == -1 and body["ZkMigrationReady"] is False
    assert bytes(encode_body("ApiVersionsResponse", 3, body)) == head  # an empty tagged section
    out = clamp_api_versions(struct.pack(">i", 9) + raw, 3)
    assert out.endswith(b"\x00") and decode_body("ApiVersionsResponse", 3, out[4:], 4)["ApiKeys"]
    # Fields that differ from their default are written, and read back the same.
    body = dict(body, FinalizedFeaturesEpoch=5, ZkMigrationReady=True,
                SupportedFeatures=[{"Name": "metadata.version", "MinVersion": 1, "MaxVersion": 20}])
    back = decode_body("ApiVersionsResponse", 3, bytes(encode_body("ApiVersionsResponse", 3, body)), 0)
    assert (back["FinalizedFeaturesEpoch"], back["ZkMigrationReady"]) == (5, True)
    assert back["SupportedFeatures"] == body["SupportedFeatures"] and "FinalizedFeatures" not in back
    # A nullable tagged field whose default is null: null is left out, a value is written.
    req = {"ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "Topics": [], "ForgottenTopicsData": []}
    assert "ClusterId" not in decode_body("FetchRequest", 12, encode_body("FetchRequest", 12,
                                                                         dict(req, ClusterId=None)), 0)
    assert decode_body("FetchRequest", 12, encode_body("FetchRequest", 12, dict(req, ClusterId="c1")), 0)[
        "ClusterId"] == "c1"


def test_nullable_structs_carry_kafkas_marker_byte():
    # Kafka's generated code writes a nullable struct field (DescribeTopicPartitions' Cursor and
    # NextCursor) behind a marker byte: -1 for null, 1 before the struct. Without it, Kafka's broker
    # closed the connection on a request with a null Cursor ("non-nullable field topicName was
    # serialized as null"), and the proxy misread what clients sent.
    head = bytes.fromhex("02" "0261" "00" "000007d0")  # Topics [{"Name": "a"}], ResponsePartitionLimit 2000
    null = {"Topics": [{"Name": "a"}], "ResponsePartitionLimit": 2000, "Cursor": None}
    assert bytes(encode_body("DescribeTopicPartitionsRequest", 0, null)) == head + bytes.fromhex("ff" "00")
    cursor = dict(null, Cursor={"TopicName": "a", "PartitionIndex": 3})
    raw = head + bytes.fromhex("01" "0261" "00000003" "00" "00")
    assert bytes(encode_body("DescribeTopicPartitionsRequest", 0, cursor)) == raw
    assert decode_body("DescribeTopicPartitionsRequest", 0, raw, 0) == cursor
    assert decode_body("DescribeTopicPartitionsRequest", 0, head + b"\xff\x00", 0) == null
    with pytest.raises(CodecError):
        decode_body("DescribeTopicPartitionsRequest", 0, head, 0)
    # An array of structs takes no marker per element (Metadata v12's nullable Topics).
    topics = {"Topics": [{"TopicId": bytes(16), "Name": "t"}], "AllowAutoTopicCreation": False,
              "IncludeTopicAuthorizedOperations": False}
    raw = bytes(encode_body("MetadataRequest", 12, topics))
    assert raw[:17] == b"\x02" + bytes(16)  # the count, then the element's TopicId


def test_every_transcribed_default_encodes():
    # A default the transcription left as text (Kafka writes FetchRequest MaxBytes as 0x7fffffff)
    # would fail only when a message leaves the field out; encoding each default finds it now.
    from kquota.kafka.protocol.codec import SCHEMAS, _default, _write_value

    def walk(fields, v):
        for f in fields:
            _write_value(f[1], f, v, True, _default(f), bytearray())
            if len(f) > 8 and f[8]:
                walk(f[8], v)

    for spec in SCHEMAS.values():
        walk(spec["fields"], spec["valid"][1])


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_truncated_bodies_raise_codec_error(cut):
    raw = bytes(encode_body("FindCoordinatorResponse", 3, {"NodeId": 1, "Host": "h", "Port": 1}))
    with pytest.raises(CodecError):
        decode_body("FindCoordinatorResponse", 3, raw[:-cut] if cut < len(raw) else b"", 0)


def test_absurd_array_length_rejected_without_allocation():
    raw = struct.pack(">i", 0) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(CodecError):
        decode_body("MetadataResponse", 1, raw, 0)


def test_request_header_v2():
    client = b"cid"
    head = struct.pack(">hhih", 0, 9, 42, len(client)) + client + b"\x00"
    body = b"\x01" + struct.pack(">h", -1)  # null compact transactional id, acks = -1
    frame = head + body
    h = parse_request_header(frame)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.body_offset) == (0, 9, 42, "cid", len(head))


def test_api_versions_clamped_and_proxy_apis_added():
    keys = [{"ApiKey": 0, "MinVersion": 0, "MaxVersion": 13}, {"ApiKey": 1, "MinVersion": 0, "MaxVersion": 18},
            {"ApiKey": 17, "MinVersion": 0, "MaxVersion": 1}, {"ApiKey": 99, "MinVersion": 0, "MaxVersion": 5}]
    raw = struct.pack(">i", 5) + bytes(encode_body("ApiVersionsResponse", 3, {"ErrorCode": 0, "ApiKeys": keys,
                                                                             "ThrottleTimeMs": 0}))
    out = clamp_api_versions(raw, 3, throttle_ms=25)
    body = decode_body("ApiVersionsResponse", 3, out[4:], 4)
    got = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in body["ApiKeys"]}
    assert got == {0: (3, 11), 1: (4, 17), 17: (1, 1), 99: (0, 5), 48: (0, 1), 49: (0, 1)}
    assert body["ThrottleTimeMs"] == 25
    # An error answer is relayed as the broker wrote it.
    err = struct.pack(">ih", 5, apis.UNSUPPORTED_VERSION) + b"\x01\x02\x03"
    assert clamp_api_versions(err, 3)[4:] == err


def test_sasl_usernames():
    assert sasl.username("PLAIN", b"\x00alice\x00secret") == "alice"
    # An authorization id other than the username: Kafka's PlainSaslServer and ScramSaslServer
    # fail the exchange, so it names no principal.
    assert sasl.username("PLAIN", b"admin\x00alice\x00secret") is None
    assert sasl.username("PLAIN", b"alice\x00alice\x00secret") == "alice"
    assert sasl.username("PLAIN", b"garbage") is None
    assert sasl.username("SCRAM-SHA-256", b"n,,n=al=2Cice=3D,r=nonce") == "al,ice="
    assert sasl.username("SCRAM-SHA-512", b"n,a=x,n=bob,r=abc") is None
    assert sasl.username("SCRAM-SHA-512", b"n,a=bob,n=bob,r=abc") == "bob"
    assert sasl.username("SCRAM-SHA-512", b"n,,n=bob") is None  # no nonce: not a client-first message
    assert sasl.username("GSSAPI", b"\x60\x82") is None
    assert sasl.username(None, b"x") is None


def _jwt(claims: dict) -> bytes:
    def b64(obj: dict) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=")

    return b64({"alg": "none"}) + b"." + b64(claims) + b"."  # an unsecured JWS, as Kafka's tests use


def test_sasl_oauthbearer_subject():
    # RFC 7628 client response as Java's OAuthBearerClientInitialResponse and librdkafka write it:
    # gs2 header, then \x01-separated pairs, the token first and SASL extensions after.
    token = _jwt({"sub": "carol", "iat": 1, "exp": 2**31})
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Bearer " + token + b"\x01\x01") == "carol"
    assert sasl.username("oauthbearer", b"n,a=carol,\x01auth=Bearer " + token + b"\x01ext=1\x01\x01") == "carol"
    assert sasl.username("OAUTHBEARER", b"n,a=dave,\x01auth=Bearer " + token + b"\x01\x01") is None
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Bearer " + _jwt({"iat": 1}) + b"\x01\x01") is None
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Bearer " + _jwt({"sub": 7}) + b"\x01\x01") is None
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Bearer not-a-jwt\x01\x01") is None
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Bearer a.!!!.b\x01\x01") is None
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Basic " + token + b"\x01\x01") is None
    assert sasl.username("OAUTHBEARER", b"garbage") is None
    # A lone surrogate (valid JSON, no UTF-8) would fail every use of the name (the native plane's
    # set_user, the kernel's entity names): replaced, as PLAIN's undecodable bytes are.
    lone = _jwt({"sub": "\ud800x"})
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Bearer " + lone + b"\x01\x01") == "\ufffdx"
    pair = _jwt({"sub": "\U0001F600"})  # a surrogate pair in the JSON: one character, kept
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Bearer " + pair + b"\x01\x01") == "\U0001F600"


def test_fields_read_in_place_from_a_short_frame_are_codec_errors():
    """A frame cut short inside a field the proxy reads in place is malformed (``CodecError``:
    that connection closes), like any other short frame. Found by fuzzing: a Produce v3-8
    request cut inside its TransactionalId length raised ``struct.error``, which the proxy
    logged as an internal error; the other in-place reads had the same gap."""
    conn, qm = _bridge_connection()
    with pytest.raises(CodecError, match="ThrottleTimeMs"):
        conn.throttled(_pending(apis.FETCH, 11), with_prefix(struct.pack(">i", 9) + b"\x00\x01"), 50)
    qm.close()


def _bridge_connection():
    """A connection of a data plane that is built (its protocol tables the codec's), not started."""
    from kquota.proxy.bridge import BridgeConnection
    from kquota.proxy.server import ProxyServer

    qm = kquota.QuotaManager()
    server = ProxyServer(qm, ("127.0.0.1", 9))
    return BridgeConnection(server, server.data_plane(bridge=None), 1, None), qm


def _pending(api_key, version):
    from kquota.kafka.protocol.frames import RequestHeader
    from kquota.proxy.request import Pending

    return Pending(RequestHeader(api_key, version, 7, "c", 0), 0)


def test_throttle_time_raised_by_the_data_planes_patch_only_where_responses_begin_with_it():
    """Python's answers get the proxy's throttle from the one patch the native paths use
    (``ProxyDataPlane.raise_throttle``): ``ThrottleTimeMs`` = max(broker's, proxy's) where the
    response version begins with it (Metadata v3+; a flexible header skipped), never elsewhere."""
    conn, qm = _bridge_connection()
    body = {"ThrottleTimeMs": 20, "Brokers": [], "ClusterId": "c", "ControllerId": 1, "Topics": []}
    for version in (3, 12):
        frame = response_frame(7, apis.METADATA, version, encode_body("MetadataResponse", version, body))
        for throttle, expected in ((50, 50), (10, 20), (0, 20)):
            out = conn.throttled(_pending(apis.METADATA, version), frame, throttle)
            offset = 4 + response_body_offset(out[4:], apis.METADATA, version)
            assert decode_body("MetadataResponse", version, out, offset)["ThrottleTimeMs"] == expected
            assert len(out) == len(frame) and out[offset + 4:] == frame[offset + 4:]
    v0 = response_frame(7, apis.METADATA, 0, encode_body("MetadataResponse", 0, body))
    assert conn.throttled(_pending(apis.METADATA, 0), v0, 50) == v0  # no such field at v0
    qm.close()


def test_mutation_plan_strict_and_permissive():
    qm = kquota.QuotaManager(controller_window_num=2, controller_window_size_seconds=1)
    qm.alter_client_quotas([({"client-id": "c"}, {"controller_mutation_rate": 2})])
    h = qm.client("u", "c")
    body = {"Topics": [{"Name": f"t{i}", "NumPartitions": 2} for i in range(5)], "ValidateOnly": False}
    plan = mutations.plan(apis.CREATE_TOPICS, 7, body, h, {}.get, 1)
    assert plan.rejected and plan.throttle_ms > 0
    kept = [t["Name"] for t in plan.forward["Topics"]] if plan.forward else []
    assert sorted(kept + [r["Name"] for r in plan.rejected]) == [f"t{i}" for i in range(5)]
    merged = mutations.merge(apis.CREATE_TOPICS, {"ThrottleTimeMs": 0, "Topics": []}, plan)
    assert {t["ErrorCode"] for t in merged["Topics"]} == {apis.THROTTLING_QUOTA_EXCEEDED}
    # Permissive: nothing refused, a throttle returned; validate-only charges nothing.
    plan = mutations.plan(apis.CREATE_TOPICS, 5, body, h, {}.get, 1)
    assert not plan.rejected and plan.forward is body and plan.throttle_ms > 0
    plan = mutations.plan(apis.CREATE_TOPICS, 7, dict(body, ValidateOnly=True), h, {}.get, 1)
    assert not plan.rejected and plan.throttle_ms == 0
    qm.close()


def test_mutation_plan_leaves_invalid_counts_to_the_broker_uncharged():
    """Kafka's controller refuses a partition count below -1 or 0 (``INVALID_PARTITIONS``) and a
    CreatePartitions count that is no increase before it charges the mutation quota
    (``ReplicationControlManager.createTopic`` / ``createPartitionsForTopic``): such topics are
    forwarded uncharged, even with the quota exhausted, for the broker to refuse. Before, a
    negative count reached the kernel (found by fuzzing: an internal error closed the client's
    connection) and a non-increase was refused THROTTLING_QUOTA_EXCEEDED."""
    qm = kquota.QuotaManager(controller_window_num=2, controller_window_size_seconds=1)
    qm.alter_client_quotas([({"client-id": "c"}, {"controller_mutation_rate": 1})])
    h = qm.client("u", "c")
    invalid = [{"Name": "neg", "NumPartitions": -253}, {"Name": "zero", "NumPartitions": 0}]
    body = {"Topics": [{"Name": "big", "NumPartitions": 50}] + invalid, "ValidateOnly": False}
    plan = mutations.plan(apis.CREATE_TOPICS, 7, body, h, {}.get, 1)  # "big" exhausts the quota
    assert [t["Name"] for t in plan.forward["Topics"]] == ["big", "neg", "zero"] and not plan.rejected
    plan = mutations.plan(apis.CREATE_TOPICS, 7, {"Topics": invalid, "ValidateOnly": False}, h, {}.get, 1)
    assert plan.forward["Topics"] == invalid and not plan.rejected and plan.throttle_ms == 0
    known = {"t": 4}.get
    for count in (4, 2, -7):
        body = {"Topics": [{"Name": "t", "Count": count, "Assignments": None}], "ValidateOnly": False}
        plan = mutations.plan(apis.CREATE_PARTITIONS, 3, body, h, known, 1)
        assert plan.forward is not None and not plan.rejected, count
    unseen = {"Topics": [{"Name": "unseen", "Count": -253, "Assignments": None}], "ValidateOnly": False}
    assert mutations.plan(apis.CREATE_PARTITIONS, 3, unseen, h, {}.get, 1).forward == unseen
    plan = mutations.plan(apis.CREATE_TOPICS, 5, {"Topics": invalid, "ValidateOnly": False}, h, {}.get, 1)
    assert plan.forward is not None  # permissive: nothing charged for them either
    # A valid topic is still refused once the quota is spent.
    body = {"Topics": [{"Name": "t", "Count": 6, "Assignments": None}], "ValidateOnly": False}
    assert mutations.plan(apis.CREATE_PARTITIONS, 3, body, h, known, 1).rejected
    qm.close()


def test_describe_filter_semantics():
    alice = ClientQuotaEntity({"user": "alice"})
    alice_c = ClientQuotaEntity({"user": "alice", "client-id": "c"})
    default_user = ClientQuotaEntity({"user": None})
    exact = [{"EntityType": "user", "MatchType": 0, "Match": "alice"}]
    assert _matches(alice, exact, strict=True) and not _matches(alice_c, exact, strict=True)
    assert _matches(alice_c, exact, strict=False)
    default = [{"EntityType": "user", "MatchType": 1, "Match": None}]
    assert _matches(default_user, default, strict=True) and not _matches(alice, default, strict=True)
    any_user = [{"EntityType": "user", "MatchType": 2, "Match": None}]
    assert _matches(default_user, any_user, False) and _matches(alice, any_user, False)
    assert principal_names(["User:admin", "bob", " "]) == {"admin", "bob"}
    with pytest.raises(kquota.KQuotaError):
        principal_names(["Group:x"])


def _resolve_log():
    seen = []

    async def resolve(node_id, host, port):
        seen.append((node_id, host, port))
        return "proxy", 10_000 + node_id

    return seen, resolve


def test_find_coordinator_v4_coordinators_rewritten():
    import asyncio

    from kquota.proxy.addresses import rewrite_body

    body = {"ThrottleTimeMs": 0, "Coordinators": [
        {"Key": "g1", "NodeId": 1, "Host": "b1", "Port": 1, "ErrorCode": 0, "ErrorMessage": None},
        {"Key": "g2", "NodeId": -1, "Host": "", "Port": -1, "ErrorCode": 15, "ErrorMessage": "not available"}]}
    decoded = decode_body("FindCoordinatorResponse", 4, bytes(encode_body("FindCoordinatorResponse", 4, body)), 0)
    seen, resolve = _resolve_log()
    assert asyncio.run(rewrite_body(apis.FIND_COORDINATOR, 4, decoded, resolve))
    back = decode_body("FindCoordinatorResponse", 4, bytes(encode_body("FindCoordinatorResponse", 4, decoded)), 0)
    assert [(c["Host"], c["Port"]) for c in back["Coordinators"]] == [("proxy", 10_001), ("", -1)]
    assert seen == [(1, "b1", 1)]
