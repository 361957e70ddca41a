"""The proxy's own protocol behaviour against Apache Kafka's broker: client-quota admin APIs over
the Kafka protocol, KIP-599 strict mutations, malformed frames, the connection bound, broker loss
(on tansu)."""

from __future__ import annotations

import logging
import struct
import uuid

import kquota
import pytest
from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import decode_body
from proxy_support import ProxyThread, Tansu
from proxy_wire import Wire
from waiting import wait_until

pytestmark = pytest.mark.process

kafka = pytest.importorskip("kafka")


@pytest.fixture
def proxy(broker):
    p = ProxyThread(("127.0.0.1", broker.port), admin_principals=["ANONYMOUS"], max_frame_bytes=1 << 20)
    yield p
    p.stop()


def _bootstrap(proxy: ProxyThread) -> tuple[str, int]:
    return proxy.proxy.bootstrap_address


# ---------------------------------------------------------------------------- client quotas


def describe_with_kafka_python(address: str) -> dict:
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import DescribeClientQuotasRequest

    admin = KafkaAdminClient(bootstrap_servers=address)
    try:
        req = DescribeClientQuotasRequest[0](components=[], strict=False)
        future = admin._send_request_to_node(admin._client.least_loaded_node(), req)
        admin._wait_for_futures([future])
        resp = future.value
    finally:
        admin.close()
    assert resp.error_code == 0
    return {tuple((t, n) for t, n in entity): dict(values) for entity, values in resp.entries}


def test_alter_then_describe_client_quotas_over_the_kafka_protocol(proxy):
    w = Wire(_bootstrap(proxy))
    resp = w.call(apis.ALTER_CLIENT_QUOTAS, 1, "AlterClientQuotas", {"Entries": [
        {"Entity": [{"EntityType": "user", "EntityName": "alice"}],
         "Ops": [{"Key": "producer_byte_rate", "Value": 1024.0, "Remove": False}]},
        {"Entity": [{"EntityType": "client-id", "EntityName": None}],
         "Ops": [{"Key": "consumer_byte_rate", "Value": 2048.0, "Remove": False}]},
        {"Entity": [{"EntityType": "user", "EntityName": "bob"}],
         "Ops": [{"Key": "no_such_quota", "Value": 1.0, "Remove": False}]},
    ], "ValidateOnly": False})
    assert [e["ErrorCode"] for e in resp["Entries"]] == [0, 0, apis.INVALID_REQUEST]
    # Applied to the proxy's quotas (no store here: the manager itself).
    assert proxy.qm.quota_limit(kquota.ClientQuotaType.PRODUCE, "alice", "x") == 1024
    described = describe_with_kafka_python(proxy.address)  # a real client's request encoding
    assert described == {(("user", "alice"),): {"producer_byte_rate": 1024.0},
                         (("client-id", None),): {"consumer_byte_rate": 2048.0}}
    # Filters: exact user match, strict.
    resp = w.call(apis.DESCRIBE_CLIENT_QUOTAS, 1, "DescribeClientQuotas", {
        "Components": [{"EntityType": "user", "MatchType": 0, "Match": "alice"}], "Strict": True})
    assert [[(e["EntityType"], e["EntityName"]) for e in x["Entity"]] for x in resp["Entries"]] == [[("user", "alice")]]
    # Remove.
    resp = w.call(apis.ALTER_CLIENT_QUOTAS, 1, "AlterClientQuotas", {"Entries": [
        {"Entity": [{"EntityType": "user", "EntityName": "alice"}],
         "Ops": [{"Key": "producer_byte_rate", "Value": 0.0, "Remove": True}]}], "ValidateOnly": False})
    assert resp["Entries"][0]["ErrorCode"] == 0
    assert proxy.qm.quota_limit(kquota.ClientQuotaType.PRODUCE, "alice", "x") is None
    w.close()


def test_alter_refused_unless_admin_principal(broker):
    p = ProxyThread(("127.0.0.1", broker.port), admin_principals=["User:admin"])
    try:
        w = Wire(p.proxy.bootstrap_address)
        resp = w.call(apis.ALTER_CLIENT_QUOTAS, 0, "AlterClientQuotas", {"Entries": [
            {"Entity": [{"EntityType": "user", "EntityName": "eve"}],
             "Ops": [{"Key": "producer_byte_rate", "Value": 1.0, "Remove": False}]}], "ValidateOnly": False})
        assert resp["Entries"][0]["ErrorCode"] == apis.CLUSTER_AUTHORIZATION_FAILED
        assert p.qm.describe_client_quotas() == {}
        # Describe is refused too, as Kafka refuses a principal without DESCRIBE_CONFIGS on the
        # cluster: the quotas name every user, client id and address that has one.
        resp = w.call(apis.DESCRIBE_CLIENT_QUOTAS, 1, "DescribeClientQuotas", {"Components": [], "Strict": False})
        assert (resp["ErrorCode"], resp["ErrorMessage"], resp["Entries"]) == (apis.CLUSTER_AUTHORIZATION_FAILED,
                                                                              None, None)
        w.close()
    finally:
        p.stop()


# ---------------------------------------------------------------------------- KIP-599


def _create(w: Wire, version: int, names: list[str]) -> dict:
    return w.call(apis.CREATE_TOPICS, version, "CreateTopics", {
        "Topics": [{"Name": n, "NumPartitions": 1, "ReplicationFactor": 1, "Assignments": [], "Configs": []}
                   for n in names], "TimeoutMs": 10_000, "ValidateOnly": False})


def _existing(address: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": address}).list_topics(timeout=10).topics)


def test_strict_create_topics_refuses_topics_over_the_mutation_quota(broker):
    qm = kquota.QuotaManager(controller_window_num=2, controller_window_size_seconds=1)
    qm.alter_client_quotas([({"client-id": "creator"}, {"controller_mutation_rate": 1})])
    p = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        w = Wire(p.proxy.bootstrap_address, client_id="creator")
        names = ["m-" + uuid.uuid4().hex[:8] for _ in range(6)]
        resp = _create(w, 7, names)  # v6+: strict
        errors = {t["Name"]: t["ErrorCode"] for t in resp["Topics"]}
        assert set(errors) == set(names)
        refused = {n for n, e in errors.items() if e == apis.THROTTLING_QUOTA_EXCEEDED}
        created = {n for n, e in errors.items() if e == 0}
        assert refused and created and refused | created == set(names)
        assert resp["ThrottleTimeMs"] > 0
        existing = _existing(broker.address)
        assert created <= existing and not (refused & existing)  # refused never reached the broker
        w.close()
        # Permissive (v5): everything forwarded, the throttle returned.
        w = Wire(p.proxy.bootstrap_address, client_id="creator")
        names = ["p-" + uuid.uuid4().hex[:8] for _ in range(4)]
        resp = _create(w, 5, names)
        assert all(t["ErrorCode"] == 0 for t in resp["Topics"])
        assert resp["ThrottleTimeMs"] > 0
        assert set(names) <= _existing(broker.address)
        w.close()
    finally:
        p.stop()
        qm.close()


# ---------------------------------------------------------------------------- robustness


def _metadata_ok(w: Wire) -> None:
    resp = w.call(apis.METADATA, 1, "Metadata", {"Topics": None})
    assert resp["Brokers"]


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", -5),                                          # negative size
    struct.pack(">i", (1 << 20) + 1) + b"x" * 64,                   # over socket.request.max.bytes
    struct.pack(">i", 10) + struct.pack(">hhih", 3, 1, 1, 200),     # client id past the frame
    struct.pack(">i", 12) + struct.pack(">hhih", 0, 7, 1, -1) + b"\x00\x09",  # truncated Produce
    struct.pack(">i", 14) + struct.pack(">hhih", 1, 11, 1, -1) + b"\xff\xff\xff\xff",  # truncated Fetch
    struct.pack(">i", 8) + b"\x00\x12\x00\x03\x00\x00\x00\x01",     # flexible header cut short
    struct.pack(">i", 14) + struct.pack(">hhih", 19, 0, 1, -1) + b"\x00\x00\x00\x05",  # CreateTopics body cut short
])
def test_garbage_closes_only_its_own_connection(proxy, garbage):
    good = Wire(_bootstrap(proxy))
    _metadata_ok(good)
    bad = Wire(_bootstrap(proxy))
    bad.send_raw(garbage)
    assert bad.closed_by_peer()
    _metadata_ok(good)  # the other connection is untouched
    again = Wire(_bootstrap(proxy))
    _metadata_ok(again)  # and the proxy still accepts
    for w in (good, bad, again):
        w.close()


# ---------------------------------------------------------------------------- versions


def test_api_versions_of_a_version_not_offered_answered_as_kafka_then_retried(proxy, caplog):
    """Kafka answers an ApiVersions request of a version it does not support with
    UNSUPPORTED_VERSION in a v0 body that names its ApiVersions versions (KIP-511,
    ``ApiVersionsRequest.getErrorResponse``; ``RequestContext.apiVersion`` serializes it as v0)
    and keeps the connection, on which the client retries with one of them. Before, the proxy
    relayed the request and failed on the answer (v-1: an internal error) or clamped a layout it
    does not know (a newer version)."""
    lo, hi = apis.PARSED_VERSIONS[apis.API_VERSIONS]
    w = Wire(_bootstrap(proxy))
    for version in (hi + 1, 127, -1):
        # A v3+ body (two empty compact strings, no tags); Kafka does not read it.
        w.send_raw(w.frame(apis.API_VERSIONS, version, b"\x01\x01\x00" if version >= 3 else b""))
        frame = w.read_frame()
        assert struct.unpack_from(">i", frame)[0] == w.corr
        body = decode_body("ApiVersionsResponse", 0, frame, 4)  # v0 header and body
        assert body == {"ErrorCode": apis.UNSUPPORTED_VERSION,
                        "ApiKeys": [{"ApiKey": apis.API_VERSIONS, "MinVersion": lo, "MaxVersion": hi}]}
    answer = w.call(apis.API_VERSIONS, hi, "ApiVersions", {"ClientSoftwareName": "retry",
                                                           "ClientSoftwareVersion": "1"})
    assert answer["ErrorCode"] == 0
    offered = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in answer["ApiKeys"]}
    assert offered[apis.PRODUCE] == apis.PARSED_VERSIONS[apis.PRODUCE]
    _metadata_ok(w)
    w.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_version_the_proxy_does_not_offer_closes_only_that_connection(proxy, caplog):
    """Kafka's ``SocketServer`` closes a connection whose request has a version the broker does not
    support. The proxy does so for every API it inspects, just outside the versions its
    ApiVersions offers. Before, such a request was decoded at that version
    (an internal error for v-1, a Metadata v13 passed on unclamped) or, on one plane only,
    relayed (Produce v2 on asyncio, v12 on native)."""
    good = Wire(_bootstrap(proxy))
    _metadata_ok(good)
    for key, (lo, hi) in apis.PARSED_VERSIONS.items():
        if key == apis.API_VERSIONS:
            continue
        for version in (lo - 1, hi + 1):
            bad = Wire(_bootstrap(proxy))
            bad.send_raw(bad.frame(key, version, b"\x00" * 16))
            assert bad.closed_by_peer(), (key, version)
            bad.close()
    _metadata_ok(good)  # the other connection is untouched
    good.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_descriptor_guard_closes_a_socket_over_it_at_once(broker):
    """``kquota.proxy.max.client.sockets`` is the proxy's own guard, not Kafka's ``max.connections``
    (which waits, test_proxy_max_connections.py): the socket over it is closed at once."""
    p = ProxyThread(("127.0.0.1", broker.port), max_client_sockets=2)
    try:
        a, b = Wire(p.proxy.bootstrap_address), Wire(p.proxy.bootstrap_address)
        _metadata_ok(a)
        _metadata_ok(b)
        c = Wire(p.proxy.bootstrap_address)
        assert c.closed_by_peer()
        assert p.proxy.refused_client_sockets == 1
        _metadata_ok(a)
        for w in (a, b, c):
            w.close()
    finally:
        p.stop()


def test_broker_loss_closes_client_connections():
    """On tansu: the test kills its broker, and the session's Kafka broker is shared."""
    t = Tansu()
    p = ProxyThread(("127.0.0.1", t.port))
    try:
        w = Wire(p.proxy.bootstrap_address)
        _metadata_ok(w)
        t.proc.kill()  # the broker goes away at once
        assert w.closed_by_peer()
        w.close()
    finally:
        p.stop()


# ---------------------------------------------------------------------------- request quota


def test_request_quota_on_proxy_time_throttles_and_mutes(broker):
    """request_percentage is enforced on the proxy's own time per request: a tiny quota gives
    Metadata responses a throttle_time_ms and the connection is muted for it."""
    import time

    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    qm.alter_client_quotas([({"client-id": "busy"}, {"request_percentage": 0.001})])
    p = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        w = Wire(p.proxy.bootstrap_address, client_id="busy")
        throttles = []
        gaps = []
        recorded: list = []
        for _ in range(4):
            t0 = time.monotonic()
            resp = w.call(apis.METADATA, 4, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False})
            gaps.append(time.monotonic() - t0)
            throttles.append(resp["ThrottleTimeMs"])
            if resp["ThrottleTimeMs"] > 0 and not recorded:
                recorded = [m.value for m in qm.metrics() if (m.group, m.name) == ("Request", "throttle-time")
                            and m.tags.get("client-id") == "busy"]
        assert max(throttles) > 0
        # The throttle is recorded into the entity's throttle-time, as Kafka's
        # ClientQuotaManager.throttle does (the kernel's request_response step).
        assert recorded and recorded[0] > 0, recorded
        # The request after a throttled answer waits for the mute (the answer itself is at once).
        i = next(i for i, t in enumerate(throttles) if t > 0)
        if i + 1 < len(gaps):
            assert gaps[i + 1] >= 0.8 * throttles[i] / 1000
        assert qm.measured_rate(kquota.ClientQuotaType.REQUEST, "ANONYMOUS", "busy") > 0
        # Another client on the same proxy is not throttled.
        other = Wire(p.proxy.bootstrap_address, client_id="idle")
        assert other.call(apis.METADATA, 4, "Metadata", {"Topics": None})["ThrottleTimeMs"] == 0
        w.close()
        other.close()
    finally:
        p.stop()
        qm.close()


# ---------------------------------------------------------------------------- failures


class _BrokenStore:
    """A store whose every call fails (as an unreachable ZooKeeper would)."""

    url = "broken://"

    def describe(self, *a, **k):
        from kquota.stores.base import ConfigStoreError

        raise ConfigStoreError("broken:// is unreachable")

    alter = describe


class _FailingCallback(kquota.ClientQuotaCallback):
    def quota_metric_tags(self, quota_type, principal, client_id):
        raise RuntimeError("callback bug")


def test_store_and_callback_failures_never_stop_traffic(broker):
    qm = kquota.QuotaManager(callback=_FailingCallback())  # callback_failure="open" (default)
    p = ProxyThread(("127.0.0.1", broker.port), qm=qm, store=_BrokenStore(),
                    admin_principals=["ANONYMOUS"])
    try:
        w = Wire(p.proxy.bootstrap_address)
        resp = w.call(apis.DESCRIBE_CLIENT_QUOTAS, 1, "DescribeClientQuotas", {"Components": [], "Strict": False})
        assert resp["ErrorCode"] == apis.UNKNOWN_SERVER_ERROR and "unreachable" in resp["ErrorMessage"]
        resp = w.call(apis.ALTER_CLIENT_QUOTAS, 1, "AlterClientQuotas", {"Entries": [
            {"Entity": [{"EntityType": "user", "EntityName": "a"}],
             "Ops": [{"Key": "producer_byte_rate", "Value": 1.0, "Remove": False}]}], "ValidateOnly": False})
        assert resp["Entries"][0]["ErrorCode"] == apis.UNKNOWN_SERVER_ERROR
        _metadata_ok(w)  # the same connection keeps working
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = "f-" + uuid.uuid4().hex[:8]
        admin = AdminClient({"bootstrap.servers": p.address})
        for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            f.result(10)
        prod = Producer({"bootstrap.servers": p.address})
        for i in range(100):
            prod.produce(topic, b"%d" % i)
        assert prod.flush(10) == 0  # the failing callback lets traffic through (fail-open)
        c = Consumer({"bootstrap.servers": p.address, "group.id": "f", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        wait_until(lambda: got.extend(m for m in c.consume(100, 0.5) if not m.error()) or len(got) >= 100, 10, 0)
        c.close()
        assert len(got) == 100
        w.close()
    finally:
        p.stop()
        qm.close()


def test_serve_runs_the_proxy_until_its_event_is_set(broker):
    """``kquota.proxy.serve``, the asyncio entry point: the proxy answers until ``stop`` is set,
    then is closed (its port refuses connections)."""
    import asyncio
    import socket
    import threading

    from kquota.proxy import serve
    from waiting import free_port, wait_port

    qm = kquota.QuotaManager()
    port = free_port()
    loop = asyncio.new_event_loop()
    stop: list = []

    async def main() -> None:
        stop.append(asyncio.Event())
        await serve(qm, ("127.0.0.1", broker.port), ("127.0.0.1", port), stop[0])

    t = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    t.start()
    try:
        wait_port(port)
        w = Wire(("127.0.0.1", port))
        assert w.call(apis.METADATA, 4, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False})["Brokers"]
        w.close()
        loop.call_soon_threadsafe(stop[0].set)
        t.join(15)
        assert not t.is_alive()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        if t.is_alive():
            loop.call_soon_threadsafe(stop[0].set)
            t.join(15)
        loop.close()
        qm.close()
