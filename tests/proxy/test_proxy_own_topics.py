"""The proxy's own topics (a ``kafka://`` store's topic and its usage topic) are closed to clients:
the broker sees the proxy's principal, so a client writing or reading them through the proxy
would forge quota records and fleet usage. Each test is the attack, tried through a proxy in
front of Apache Kafka's broker, with what reached the topic read at the broker itself; where a
request also names another topic, Kafka's answer for it comes back merged with the refusals."""

from __future__ import annotations

import struct
import uuid
from types import SimpleNamespace

import pytest
from proxy_support import ProxyThread, make_topic
from proxy_wire import Wire
from record_batch import record_batch
from waiting import wait_until

import kquota
from kquota.kafka.protocol import apis
from kquota.stores import open_store

pytest.importorskip("confluent_kafka")
AUTH = 29  # TOPIC_AUTHORIZATION_FAILED
# Kafka's api keys (those the proxy relayed unparsed before have no name in kquota before).
LIST_OFFSETS, DELETE_RECORDS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 2, 21, 33, 44


def produce(topics: list[str], value: bytes = b"forged", acks: int = -1) -> dict:
    return {"TransactionalId": None, "Acks": acks, "TimeoutMs": 5000,
            "TopicData": [{"Name": t, "PartitionData": [{"Index": 0, "Records": record_batch([value])}]} for t in topics]}


def fetch_v11(topics: list[str], replica_id: int = -1) -> dict:
    return {"ReplicaId": replica_id, "MaxWaitMs": 100, "MinBytes": 1, "MaxBytes": 1 << 20, "IsolationLevel": 0,
            "SessionId": 0, "SessionEpoch": -1, "ForgottenTopicsData": [], "RackId": "",
            "Topics": [{"Topic": t, "Partitions": [{"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0,
                                                     "LogStartOffset": -1, "PartitionMaxBytes": 1 << 20}]}
                       for t in topics]}


def fetch_v13(ids: list[bytes]) -> dict:
    body = fetch_v11([])
    body["Topics"] = [{"TopicId": i, "Partitions": [{"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0,
                                                     "LastFetchedEpoch": -1, "LogStartOffset": -1,
                                                     "PartitionMaxBytes": 1 << 20}]} for i in ids]
    return body


def end_offset(broker, topic: str) -> int:
    """The topic's end offset, asked of the broker itself (by librdkafka, not kquota's codec)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.address, "group.id": "end-" + uuid.uuid4().hex[:6]})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def topic_id(broker, topic: str) -> bytes:
    w = Wire(("127.0.0.1", broker.port))
    try:
        r = w.call(apis.METADATA, 12, "Metadata", {"Topics": [{"Name": topic, "TopicId": bytes(16)}],
                                                   "AllowAutoTopicCreation": False,
                                                   "IncludeTopicAuthorizedOperations": False})
    finally:
        w.close()
    (t,) = r["Topics"]
    assert t["ErrorCode"] == 0 and t["TopicId"] != bytes(16), t
    return t["TopicId"]


@pytest.fixture(scope="module")
def own(broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    usage = topic + ".usage"
    store = open_store(f"kafka://{broker.address}/{topic}")
    admin = AdminClient({"bootstrap.servers": broker.address})
    for f in admin.create_topics([NewTopic(usage, 1, 1, config={"cleanup.policy": "delete"})]).values():
        f.result(10)  # as the fleet creates it, at the broker
    qm = kquota.QuotaManager()
    proxy = ProxyThread(("127.0.0.1", broker.port), qm, store=store)
    data = make_topic(broker.address)
    try:
        yield SimpleNamespace(proxy=proxy, qm=qm, topics=(topic, usage), data=data,
                              address=("127.0.0.1", int(proxy.address.rpartition(":")[2])))
    finally:
        proxy.stop()
        store.close()


def call(own, api_key: int, version: int, name: str, body: dict, client_id: str = "attacker") -> dict:
    w = Wire(own.address, client_id)
    try:
        return w.call(api_key, version, name, body)
    finally:
        w.close()


@pytest.mark.parametrize("version", [3, 8, 11])
def test_a_produce_to_an_own_topic_is_refused_and_nothing_is_appended(broker, own, version):
    for topic in own.topics:
        before = end_offset(broker, topic)
        r = call(own, apis.PRODUCE, version, "Produce", produce([topic, own.data]))
        errors = {t["Name"]: [p["ErrorCode"] for p in t["PartitionResponses"]] for t in r["Responses"]}
        assert errors[topic] == [AUTH]
        assert end_offset(broker, topic) == before
    served = call(own, apis.PRODUCE, version, "Produce", produce([own.data]))
    assert served["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == 0


def test_an_acks0_produce_to_an_own_topic_closes_the_connection_and_appends_nothing(broker, own):
    topic = own.topics[0]
    before = end_offset(broker, topic)
    w = Wire(own.address, "attacker")
    try:
        w.send_raw(w.frame(apis.PRODUCE, 8, bytes(_encode("ProduceRequest", 8, produce([topic], acks=0)))))
        assert w.closed_by_peer(10)
    finally:
        w.close()
    assert end_offset(broker, topic) == before


def _encode(schema: str, version: int, body: dict) -> bytes:
    from kquota.kafka.protocol.codec import encode_body

    return bytes(encode_body(schema, version, body))


def test_a_fetch_of_an_own_topic_is_refused_by_name_and_by_id(broker, own):
    for topic in own.topics:
        r = call(own, apis.FETCH, 11, "Fetch", fetch_v11([topic, own.data]))
        errors = {t["Topic"]: t["Partitions"][0]["ErrorCode"] for t in r["Responses"]}
        assert errors[topic] == AUTH
        assert all(t["Partitions"][0]["Records"] in (b"", None) for t in r["Responses"])
        r = call(own, apis.FETCH, 13, "Fetch", fetch_v13([topic_id(broker, topic)]))
        (t,) = r["Responses"]
        assert t["Partitions"][0]["ErrorCode"] == AUTH
    served = call(own, apis.FETCH, 13, "Fetch", fetch_v13([topic_id(broker, own.data)]))
    assert served["Responses"][0]["Partitions"][0]["ErrorCode"] == 0


def test_a_consumer_of_an_own_topic_gets_topic_authorization_failed(own):
    from confluent_kafka import Consumer, KafkaError

    c = Consumer({"bootstrap.servers": "%s:%d" % own.address, "group.id": "g-" + uuid.uuid4().hex[:6],
                  "enable.auto.commit": False})
    try:
        c.subscribe([own.topics[0]])
        seen = []

        def refused():
            msg = c.poll(0.5)
            if msg is not None and msg.error() is not None:
                seen.append(msg.error().code())
            return KafkaError.TOPIC_AUTHORIZATION_FAILED in seen

        assert wait_until(refused, 30), seen
    finally:
        c.close()


def test_metadata_lists_no_own_topic_and_names_them_refused(broker, own):
    everything = call(own, apis.METADATA, 12, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False,
                                                           "IncludeTopicAuthorizedOperations": False})
    names = {t["Name"] for t in everything["Topics"]}
    assert own.data in names and not names & set(own.topics)
    v0 = call(own, apis.METADATA, 0, "Metadata", {"Topics": []})
    assert not {t["Name"] for t in v0["Topics"]} & set(own.topics)
    asked = call(own, apis.METADATA, 12, "Metadata", {
        "Topics": [{"Name": own.topics[0], "TopicId": bytes(16)}, {"Name": own.data, "TopicId": bytes(16)},
                   {"Name": None, "TopicId": topic_id(broker, own.topics[1])}],
        "AllowAutoTopicCreation": True, "IncludeTopicAuthorizedOperations": False})
    by = {(t["Name"], t["TopicId"]): t for t in asked["Topics"]}
    assert by[(own.topics[0], bytes(16))]["ErrorCode"] == AUTH
    assert by[(None, topic_id(broker, own.topics[1]))]["ErrorCode"] == AUTH
    assert not by[(own.topics[0], bytes(16))]["Partitions"]
    assert [t["ErrorCode"] for t in asked["Topics"] if t["Name"] == own.data] == [0]
    only = call(own, apis.METADATA, 0, "Metadata", {"Topics": [{"Name": own.topics[1]}]})
    assert [(t["Name"], t["ErrorCode"]) for t in only["Topics"]] == [(own.topics[1], AUTH)]


def other_topic(broker, records: int = 0) -> str:
    """A topic of the test's own (not the proxy's), with ``records`` records."""
    from confluent_kafka import Producer

    topic = make_topic(broker.address)
    if records:
        p = Producer({"bootstrap.servers": broker.address})
        for _ in range(records):
            p.produce(topic, b"r")
        assert p.flush(10) == 0
    return topic


def test_list_offsets_and_delete_records_refuse_own_topics_and_serve_the_rest(broker, own):
    before = [end_offset(broker, t) for t in own.topics]
    topics = [*own.topics, own.data]
    r = call(own, LIST_OFFSETS, 7, "ListOffsets", {"ReplicaId": -1, "IsolationLevel": 0, "Topics": [
        {"Name": t, "Partitions": [{"PartitionIndex": 0, "CurrentLeaderEpoch": -1, "Timestamp": -1}]} for t in topics]})
    errors = {t["Name"]: t["Partitions"][0]["ErrorCode"] for t in r["Topics"]}
    assert errors == {own.topics[0]: AUTH, own.topics[1]: AUTH, own.data: 0}
    other = other_topic(broker, records=3)
    r = call(own, DELETE_RECORDS, 2, "DeleteRecords", {"TimeoutMs": 5000, "Topics": [
        {"Name": t, "Partitions": [{"PartitionIndex": 0, "Offset": -1}]} for t in [*own.topics, other]]})
    answers = {t["Name"]: (t["Partitions"][0]["ErrorCode"], t["Partitions"][0]["LowWatermark"]) for t in r["Topics"]}
    assert {t: answers[t][0] for t in own.topics} == {t: AUTH for t in own.topics}
    assert answers[other] == (0, 3)  # Kafka deleted the other topic's records up to its high watermark
    assert [end_offset(broker, t) for t in own.topics] == before


def test_config_changes_to_own_topics_are_refused(broker, own):
    other = other_topic(broker)
    r = call(own, INCREMENTAL_ALTER_CONFIGS, 1, "IncrementalAlterConfigs", {"ValidateOnly": False, "Resources": [
        {"ResourceType": 2, "ResourceName": t, "Configs": [{"Name": "retention.ms", "ConfigOperation": 0,
                                                           "Value": "1"}]} for t in [*own.topics, other]]})
    errors = {x["ResourceName"]: x["ErrorCode"] for x in r["Responses"]}
    assert errors == {own.topics[0]: AUTH, own.topics[1]: AUTH, other: 0}  # Kafka altered the other one
    r = call(own, ALTER_CONFIGS, 1, "AlterConfigs", {"ValidateOnly": False, "Resources": [
        {"ResourceType": 2, "ResourceName": t, "Configs": [{"Name": "cleanup.policy", "Value": "delete"}]}
        for t in [*own.topics, other]]})
    errors = {x["ResourceName"]: x["ErrorCode"] for x in r["Responses"]}
    assert errors == {own.topics[0]: AUTH, own.topics[1]: AUTH, other: 0}


def test_own_topics_cannot_be_deleted_created_or_grown(broker, own):
    victim = make_topic(broker.address)
    r = call(own, apis.DELETE_TOPICS, 4, "DeleteTopics", {"TimeoutMs": 5000, "TopicNames": [*own.topics, victim]})
    errors = {x["Name"]: x["ErrorCode"] for x in r["Responses"]}
    assert errors == {own.topics[0]: AUTH, own.topics[1]: AUTH, victim: 0}
    ids = [topic_id(broker, t) for t in own.topics]
    r = call(own, apis.DELETE_TOPICS, 6, "DeleteTopics", {"TimeoutMs": 5000, "Topics": [
        {"Name": None, "TopicId": i} for i in ids]})
    assert sorted((x["Name"], x["TopicId"], x["ErrorCode"]) for x in r["Responses"]) == sorted(
        (None, i, AUTH) for i in ids)
    for t in own.topics:
        topic_id(broker, t)  # still there
    grown = other_topic(broker)
    r = call(own, apis.CREATE_PARTITIONS, 1, "CreatePartitions", {"TimeoutMs": 5000, "ValidateOnly": False, "Topics": [
        {"Name": t, "Count": 4, "Assignments": None} for t in [*own.topics, grown]]})
    assert {x["Name"]: x["ErrorCode"] for x in r["Results"]} == {own.topics[0]: AUTH, own.topics[1]: AUTH, grown: 0}
    r = call(own, apis.CREATE_TOPICS, 4, "CreateTopics", {"timeoutMs": 5000, "validateOnly": False, "Topics": [
        {"Name": own.topics[1], "NumPartitions": 1, "ReplicationFactor": 1, "Assignments": [], "Configs": []}]})
    assert [(x["Name"], x["ErrorCode"]) for x in r["Topics"]] == [(own.topics[1], AUTH)]


@pytest.mark.parametrize("size", [100_000, 300_000])
def test_a_large_produce_to_an_own_topic_is_read_whole_and_refused(broker, own, size):
    """A Produce past the cut-through size: the own topic may come after another's batches."""
    topic = own.topics[1]
    before = end_offset(broker, topic)
    body = produce([own.data, topic], value=b"u" * size)
    r = call(own, apis.PRODUCE, 9, "Produce", body)
    errors = {t["Name"]: t["PartitionResponses"][0]["ErrorCode"] for t in r["Responses"]}
    assert errors[topic] == AUTH
    assert end_offset(broker, topic) == before
    served = call(own, apis.PRODUCE, 9, "Produce", produce([own.data], value=b"u" * size))
    assert served["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == 0


# ------------------------------------------------------------------ the merge, without a broker


class _Conn:
    """What the handlers use of a connection: the request forwarded (and its answer made from a
    broker answer given by the test), or answered."""

    def __init__(self, names):
        from kquota.proxy.own_topics import OwnTopics

        from kquota.proxy.settings import DEFAULT_MAX_DECODED_REQUEST_BYTES

        self.server = SimpleNamespace(own_topics=OwnTopics(names),
                                      max_decoded_request_bytes=DEFAULT_MAX_DECODED_REQUEST_BYTES)
        self.sent = self.answered = None

    async def forward(self, p, frame, on_response):
        self.sent = (frame, on_response)

    async def answer(self, p, data, throttle):
        self.answered = data

    def request_throttle(self, p):
        return 0

    def throttled(self, p, data, throttle):
        assert throttle == 0  # no quota here: the data plane's patch is not reached
        return data

    async def plain_response(self, p, frame):
        raise AssertionError("parsed")


def _request(api_key, version, schema, body):
    from kquota.kafka.protocol.frames import RequestHeader
    from kquota.proxy.request import Pending

    head = struct.pack(">hhih", api_key, version, 7, 1) + b"c" + (b"\x00" if version >= _flexible(api_key) else b"")
    frame = head + _encode(schema + "Request", version, body)
    return Pending(RequestHeader(api_key, version, 7, "c", len(head)), 0), frame


def _flexible(api_key):
    return {ALTER_CONFIGS: 2, INCREMENTAL_ALTER_CONFIGS: 1, DELETE_RECORDS: 2, LIST_OFFSETS: 6, 75: 0}[api_key]


def _decode(schema, version, frame, api_key):
    from kquota.kafka.protocol.codec import decode_body
    from kquota.kafka.protocol.frames import response_body_offset

    return decode_body(schema + "Response", version, frame, response_body_offset(frame, api_key, version))


@pytest.mark.parametrize("api_key,version,schema", [(ALTER_CONFIGS, 0, "AlterConfigs"), (ALTER_CONFIGS, 2, "AlterConfigs"),
                                                    (INCREMENTAL_ALTER_CONFIGS, 1, "IncrementalAlterConfigs")])
def test_config_requests_forward_the_other_resources_and_merge_the_refusals(api_key, version, schema):
    import asyncio

    from kquota.proxy.own_topics import by_topic
    from kquota.kafka.protocol.frames import response_frame

    conn = _Conn({"q", "q.usage"})
    config = {"Name": "retention.ms", "Value": "1", "ConfigOperation": 0}
    resources = [{"ResourceType": 2, "ResourceName": "q", "Configs": [config]},
                 {"ResourceType": 4, "ResourceName": "q", "Configs": [config]},  # a broker named q
                 {"ResourceType": 2, "ResourceName": "data", "Configs": [config]}]
    p, frame = _request(api_key, version, schema, {"ValidateOnly": False, "Resources": resources})
    asyncio.run(by_topic(conn, p, frame, 0))
    sent, on_response = conn.sent
    from kquota.kafka.protocol.codec import decode_body

    forwarded = decode_body(schema + "Request", version, sent, p.header.body_offset)
    assert [(r["ResourceType"], r["ResourceName"]) for r in forwarded["Resources"]] == [(4, "q"), (2, "data")]
    broker = {"ThrottleTimeMs": 3, "Responses": [
        {"ErrorCode": 0, "ErrorMessage": None, "ResourceType": t, "ResourceName": n} for t, n in [(4, "q"), (2, "data")]]}
    answer = response_frame(7, api_key, version, _encode(schema + "Response", version, broker))
    data, _ = asyncio.run(on_response(p, bytes(answer)[4:]))
    body = _decode(schema, version, bytes(data)[4:], api_key)
    assert sorted((r["ResourceType"], r["ResourceName"], r["ErrorCode"]) for r in body["Responses"]) == [
        (2, "data", 0), (2, "q", AUTH), (4, "q", 0)]
    assert body["ThrottleTimeMs"] == 3


def test_delete_records_forwards_the_other_topics_and_merges_the_refusals():
    import asyncio

    from kquota.proxy.own_topics import by_topic
    from kquota.kafka.protocol.codec import decode_body
    from kquota.kafka.protocol.frames import response_frame

    conn = _Conn({"q", "q.usage"})
    topics = [{"Name": n, "Partitions": [{"PartitionIndex": 0, "Offset": 5}, {"PartitionIndex": 1, "Offset": 5}]}
              for n in ("data", "q.usage")]
    p, frame = _request(DELETE_RECORDS, 2, "DeleteRecords", {"TimeoutMs": 100, "Topics": topics})
    asyncio.run(by_topic(conn, p, frame, 0))
    sent, on_response = conn.sent
    assert [t["Name"] for t in decode_body("DeleteRecordsRequest", 2, sent, p.header.body_offset)["Topics"]] == ["data"]
    broker = {"ThrottleTimeMs": 0, "Topics": [{"Name": "data", "Partitions": [
        {"PartitionIndex": i, "LowWatermark": 5, "ErrorCode": 0} for i in (0, 1)]}]}
    answer = response_frame(7, DELETE_RECORDS, 2, _encode("DeleteRecordsResponse", 2, broker))
    data, _ = asyncio.run(on_response(p, bytes(answer)[4:]))
    body = _decode("DeleteRecords", 2, bytes(data)[4:], DELETE_RECORDS)
    assert {(t["Name"], x["PartitionIndex"], x["ErrorCode"]) for t in body["Topics"] for x in t["Partitions"]} == {
        ("data", 0, 0), ("data", 1, 0), ("q.usage", 0, AUTH), ("q.usage", 1, AUTH)}


def test_a_proxy_without_a_kafka_store_closes_no_topic():
    from kquota.proxy.own_topics import own_topic_names

    assert own_topic_names(None) == frozenset()
    assert own_topic_names(SimpleNamespace(url="sqlite:///q.db", topic=None)) == frozenset()
    assert own_topic_names(SimpleNamespace(url="kafka://h:9092/q", topic="q")) == {"q", "q.usage"}


def test_create_partitions_keeps_the_other_topics_and_refuses_uncharged():
    from kquota.proxy.own_topics import strip_mutation, OwnTopics

    own = OwnTopics({"q", "q.usage"})
    own.learn(b"\x01" * 16)
    body = {"Topics": [{"Name": "q", "Count": 2}, {"Name": "data", "Count": 2}], "TimeoutMs": 1, "ValidateOnly": False}
    kept, refused = strip_mutation(own, apis.CREATE_PARTITIONS, 3, body)
    assert [t["Name"] for t in kept["Topics"]] == ["data"] and body["Topics"][0]["Name"] == "q"
    assert refused == [{"Name": "q", "ErrorCode": AUTH, "ErrorMessage": None}]
    by_id = {"Topics": [{"Name": None, "TopicId": b"\x01" * 16}, {"Name": None, "TopicId": b"\x02" * 16}], "TimeoutMs": 1}
    kept, refused = strip_mutation(own, apis.DELETE_TOPICS, 6, by_id)
    assert kept["Topics"] == [{"Name": None, "TopicId": b"\x02" * 16}]
    assert [(r["Name"], r["TopicId"], r["ErrorCode"]) for r in refused] == [(None, b"\x01" * 16, AUTH)]


def test_describe_topic_partitions_naming_own_topics_is_refused(own):
    only = call(own, 75, 0, "DescribeTopicPartitions", {
        "Topics": [{"Name": t} for t in own.topics], "ResponsePartitionLimit": 2000, "Cursor": None})
    assert [(t["Name"], t["ErrorCode"], t["TopicId"]) for t in only["Topics"]] == [
        (t, AUTH, bytes(16)) for t in own.topics]
    mixed = call(own, 75, 0, "DescribeTopicPartitions", {
        "Topics": [{"Name": t} for t in [*own.topics, own.data]], "ResponsePartitionLimit": 2000, "Cursor": None})
    by_name = {t["Name"]: t for t in mixed["Topics"]}
    assert {n: t["ErrorCode"] for n, t in by_name.items()} == {own.topics[0]: AUTH, own.topics[1]: AUTH, own.data: 0}
    assert [p["PartitionIndex"] for p in by_name[own.data]["Partitions"]] == [0]  # Kafka's answer


def test_describe_topic_partitions_listing_every_topic_leaves_out_the_own_topics(own):
    """Kafka lists every topic (a page at a time, by name) for an empty request: the proxy's
    pages name no own topic."""
    names, cursor = [], None
    for _ in range(1000):
        page = call(own, 75, 0, "DescribeTopicPartitions", {"Topics": [], "ResponsePartitionLimit": 2000,
                                                            "Cursor": cursor})
        names += [t["Name"] for t in page["Topics"]]
        cursor = page["NextCursor"]
        if cursor is None:
            break
    assert own.data in names and not set(names) & set(own.topics)


def test_describe_topic_partitions_lists_no_own_topic_and_teaches_its_id():
    import asyncio

    from kquota.proxy.own_topics import describe_topic_partitions
    from kquota.kafka.protocol.frames import response_frame

    conn = _Conn({"q", "q.usage"})
    learned = []
    conn.server.own_topics.on_id = learned.append
    p, frame = _request(75, 0, "DescribeTopicPartitions", {"Topics": [], "ResponsePartitionLimit": 10, "Cursor": None})
    asyncio.run(describe_topic_partitions(conn, p, frame, 0))
    sent, on_response = conn.sent
    assert sent == frame
    listed = {"ThrottleTimeMs": 0, "NextCursor": None, "Topics": [
        {"ErrorCode": 0, "Name": n, "TopicId": bytes([i + 1]) * 16, "IsInternal": False, "Partitions": [],
         "TopicAuthorizedOperations": 0} for i, n in enumerate(["q", "data", "q.usage"])]}
    answer = response_frame(7, 75, 0, _encode("DescribeTopicPartitionsResponse", 0, listed))
    data, _ = asyncio.run(on_response(p, bytes(answer)[4:]))
    body = _decode("DescribeTopicPartitions", 0, bytes(data)[4:], 75)
    assert [t["Name"] for t in body["Topics"]] == ["data"]
    assert learned == [b"\x01" * 16, b"\x03" * 16]


def test_a_kafka_shadow_stores_topics_are_closed_too(broker):
    """A kafka:// ``--shadow-store``'s topics are the proxy's own as ``--store``'s: a client writing
    them would write the configuration ``--promote-shadow`` enforces."""
    topic = f"shadow-quotas-{uuid.uuid4().hex[:8]}"
    shadow_store = open_store(f"kafka://{broker.address}/{topic}")
    qm, shadow_qm = kquota.QuotaManager(), kquota.QuotaManager()
    proxy = ProxyThread(("127.0.0.1", broker.port), qm, shadow=shadow_qm, shadow_store=shadow_store)
    try:
        assert set(proxy.proxy.own_topics.names) == {topic, topic + ".usage"}
        own = SimpleNamespace(address=("127.0.0.1", int(proxy.address.rpartition(":")[2])))
        before = end_offset(broker, topic)
        r = call(own, apis.PRODUCE, 8, "Produce", produce([topic]))
        assert [p["ErrorCode"] for p in r["Responses"][0]["PartitionResponses"]] == [AUTH]
        assert end_offset(broker, topic) == before
    finally:
        proxy.stop()
        shadow_store.close()
        qm.close()
        shadow_qm.close()
