"""The ``kafka://`` store against Apache Kafka's own broker (``kafka_broker``): the topic the store
creates is compacted and Kafka's log cleaner really compacts it (an alter's batch shortened by
compaction, tombstones removed) while a new handle still reads every quota right; the store over
SASL_SSL and SSL with the broker's real credentials; and the broker's ACLs: a user who may not
create or write the topic gets one clear error, and nothing changes."""

from __future__ import annotations

import time
import uuid

import pytest
from waiting import wait_until

from kquota import ClientQuotaEntity
from kquota.stores import ConfigStoreError, open_store

pytest.importorskip("confluent_kafka")
E = ClientQuotaEntity


def topic_name(kind: str) -> str:
    return f"kq-store-{kind}-{uuid.uuid4().hex[:8]}"


def topic_configs(kafka_broker, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(kafka_broker.admin_config())
    future = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=30)
    return {k: v.value for k, v in next(iter(future.values())).result(30).items()}


def records_in(kafka_broker, topic: str) -> list[str]:
    """The user named by each record partition 0 of ``topic`` holds, from its start to its end
    (tombstones too)."""
    import json

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**kafka_broker.admin_config(), "group.id": f"count-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, low)])
        users: list[str] = []

        def at_end() -> bool:
            msg = c.poll(1)
            if msg is None:
                return False
            if msg.error():
                if msg.error().code() == msg.error()._PARTITION_EOF:
                    return True
                raise AssertionError(msg.error())
            users.append(json.loads(msg.key())["entity"][0]["entityName"])
            return False

        if wait_until(at_end, 60, 0):
            return users
        raise AssertionError(f"{topic}: not read to its end ({high}) within 60 s")
    finally:
        c.close()


def test_the_store_creates_a_compacted_topic_and_kafka_compacts_it(kafka_broker):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic = topic_name("compact")
    url = f"kafka://{kafka_broker.listeners['PLAINTEXT']}/{topic}"
    store = open_store(url, timeout=30)
    try:
        configs = topic_configs(kafka_broker, topic)
        assert configs["cleanup.policy"] == "compact"
        # Segments roll after 100 ms and any dirty share is cleaned, so the cleaner runs within
        # seconds (the broker's log.cleaner.backoff.ms is 1 s); removals go at once.
        admin = AdminClient(kafka_broker.admin_config())
        fast = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in
                {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0",
                 "min.compaction.lag.ms": "0"}.items()]
        for f in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                                 incremental_configs=fast)]).values():
            f.result(30)
        # One alter of two users (one batch), then alice alone 40 times: compaction keeps bob's
        # record of the first batch without alice's, which later alters superseded.
        store.alter([({"user": "alice"}, {"producer_byte_rate": 1.0}), ({"user": "bob"}, {"consumer_byte_rate": 7.0})])
        for rate in range(2, 42):
            store.alter([({"user": "alice"}, {"producer_byte_rate": float(rate)})])
        store.alter([({"user": "gone"}, {"producer_byte_rate": 5.0})])
        store.alter([({"user": "gone"}, {"producer_byte_rate": None})])  # a tombstone
        left: list[str] = []

        def compacted() -> bool:
            time.sleep(0.2)
            # a record after segment.ms rolls the segment holding the rest; the cleaner does the rest
            store.alter([({"user": "carol"}, {"producer_byte_rate": 9.0})])
            left[:] = records_in(kafka_broker, topic)
            # alice's 41 records down to her last; bob's kept from the first batch; gone's
            # record and its tombstone both cleaned away
            return left.count("alice") == 1 and left.count("bob") == 1 and "gone" not in left

        assert wait_until(compacted, 120), f"Kafka did not compact {topic}: {left}"
    finally:
        store.close()
    with open_store(url, timeout=30, read_only=True) as again:
        assert again.describe() == {E({"user": "alice"}): {"producer_byte_rate": 41.0},
                                    E({"user": "bob"}): {"consumer_byte_rate": 7.0},
                                    E({"user": "carol"}): {"producer_byte_rate": 9.0}}


def sasl_ssl(kafka_broker, user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(kafka_broker.tls.truststore),
            "ssl.truststore.password": kafka_broker.tls.password, "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                f'username="{user}" password="{password}";'}


def ssl(kafka_broker, user: str) -> dict[str, str]:
    cert = kafka_broker.tls.cert(user)
    return {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(kafka_broker.tls.ca_pem),
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(cert.p12),
            "ssl.keystore.password": kafka_broker.tls.password}


@pytest.mark.parametrize("listener", ["SASL_SSL", "SSL"])
def test_the_store_over_tls_with_the_brokers_credentials(kafka_broker, listener):
    security = sasl_ssl(kafka_broker, "admin", "admin-secret") if listener == "SASL_SSL" else ssl(kafka_broker, "admin")
    url = f"kafka://{kafka_broker.listeners[listener]}/{topic_name(listener.lower())}"
    with open_store(url, timeout=30, security=security, security_source="admin.properties") as store:
        store.alter([({"user": "alice", "client-id": "app"}, {"producer_byte_rate": 2048.0})])
        assert store.describe() == {E({"user": "alice", "client-id": "app"}): {"producer_byte_rate": 2048.0}}
    with open_store(url, timeout=30, security=security, read_only=True) as again:
        assert again.describe() == {E({"user": "alice", "client-id": "app"}): {"producer_byte_rate": 2048.0}}


def test_a_wrong_password_is_one_clear_error(kafka_broker):
    url = f"kafka://{kafka_broker.listeners['SASL_SSL']}/{topic_name('badpw')}"
    with pytest.raises(ConfigStoreError) as e:
        open_store(url, timeout=10, security=sasl_ssl(kafka_broker, "admin", "wrong"), security_source="a.properties")
    assert "\n" not in str(e.value)
    assert "Authentication failed" in str(e.value) or "AUTHENTICATION" in str(e.value), e.value


def test_the_brokers_acls_hold_a_user_without_create_or_write(kafka_broker):
    topic = topic_name("acl")
    url = f"kafka://{kafka_broker.listeners['SASL_SSL']}/{topic}"
    alice = sasl_ssl(kafka_broker, "alice", "alice-secret")
    # alice may not create the topic (no CREATE): one clear line, no topic
    with pytest.raises(ConfigStoreError) as e:
        open_store(url, timeout=30, security=alice)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(e.value) and "\n" not in str(e.value), e.value
    # admin creates it; alice may read it and its configs, but not write it
    with open_store(url, timeout=30, security=sasl_ssl(kafka_broker, "admin", "admin-secret")) as admin_store:
        admin_store.alter([({"user": "bob"}, {"producer_byte_rate": 100.0})])
    kafka_broker.allow("User:alice", topic, ("DESCRIBE", "READ", "DESCRIBE_CONFIGS"))
    with open_store(url, timeout=30, security=alice) as store:
        assert store.describe() == {E({"user": "bob"}): {"producer_byte_rate": 100.0}}
        with pytest.raises(ConfigStoreError) as e:
            store.alter([({"user": "bob"}, {"producer_byte_rate": 1.0})])
        assert "\n" not in str(e.value)
        assert "authoriz" in str(e.value).lower(), e.value
    with open_store(url, timeout=30, security=alice, read_only=True) as again:
        assert again.describe() == {E({"user": "bob"}): {"producer_byte_rate": 100.0}}
