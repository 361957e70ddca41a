"""Describe/AlterClientQuotas with ``topic`` entities (topic quotas, a documented kquota extension)
through the proxy in front of Apache Kafka: alter, describe by exact / default / any match,
strict, validate-only, per-entry errors (a topic mixed with a user or client-id, names Kafka
refuses as topic names, keys a topic does not take), filter errors, a store behind the proxy,
``kquota configs --bootstrap-server`` and Apache's own ``Admin`` client (its ``ClientQuotaEntity``
with entity type ``"topic"``, run as a single-file Java program against the broker's jars)."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap

import pytest
from kquota.kafka.protocol import apis
from proxy_wire import Wire
from test_proxy_ip_quota_admin import (alter, assert_alters_go_to_the_store, assert_filter_errors, component_errors, describe,
                                       entities, entry)
from test_proxy_ip_quota_admin import proxy, wire  # noqa: F401 (fixtures)

import kquota
from kquota.cli import main

P, C = "producer_byte_rate", "consumer_byte_rate"
EXACT, DEFAULT, ANY = 0, 1, 2
T = kquota.ClientQuotaEntity


def test_alter_and_describe_topic_quotas(proxy, wire):
    assert entities(describe(wire, [("topic", ANY, None)])) == {}
    assert alter(wire, [entry({"topic": "orders"}, 12_000_000, key=P), entry({"topic": None}, 2_000_000, key=C)]) \
        == [(0, None), (0, None)]
    assert proxy.qm.describe_client_quotas() == {T({"topic": "orders"}): {P: 12e6}, T({"topic": None}): {C: 2e6}}
    assert entities(describe(wire, [("topic", EXACT, "orders")])) == {(("topic", "orders"),): {P: 12e6}}
    assert entities(describe(wire, [("topic", DEFAULT, None)], strict=True)) == {(("topic", None),): {C: 2e6}}
    assert entities(describe(wire, [("topic", ANY, None)])) == {(("topic", "orders"),): {P: 12e6},
                                                                (("topic", None),): {C: 2e6}}
    assert entities(describe(wire, [("topic", EXACT, "other")])) == {}
    # A user filter never matches a topic entity, nor a topic filter a user's.
    proxy.qm.alter_client_quotas([({"user": "orders"}, {P: 5})])
    assert entities(describe(wire, [("user", ANY, None)])) == {(("user", "orders"),): {P: 5.0}}
    assert len(entities(describe(wire, []))) == 3
    assert alter(wire, [entry({"topic": "orders"}, None, key=P), entry({"topic": None}, None, key=C)]) \
        == [(0, None), (0, None)]
    assert entities(describe(wire, [("topic", ANY, None)])) == {}
    assert proxy.qm.describe_client_quotas() == {T({"user": "orders"}): {P: 5.0}}


def test_alter_errors_are_per_entry_and_validate_only_applies_nothing(proxy, wire):
    results = alter(wire, [
        entry({"user": "u", "topic": "orders"}, 1, key=P),
        entry({"topic": "orders", "client-id": None}, 1, key=P),
        entry({"topic": "a" * 250}, 1, key=P),
        entry({"topic": ".."}, 1, key=P),
        entry({"topic": "a/b"}, 1, key=P),
        entry({"topic": ""}, 1, key=P),
        entry({"topic": "orders"}, 5, key="request_percentage"),
        entry({"topic": "orders"}, 5, key="connection_creation_rate"),
        entry({"topic": "orders"}, 1.5, key=P),
        entry({"topic": "fine"}, 30, key=C),
        {"Entity": [{"EntityType": "topic", "EntityName": "x"}, {"EntityType": "topic", "EntityName": "y"}],
         "Ops": [{"Key": P, "Value": 1.0, "Remove": False}]},
    ])
    assert [c for c, _ in results] == [apis.INVALID_REQUEST] * 9 + [0, apis.INVALID_REQUEST]
    messages = [m for _, m in results]
    assert all("Topic entity should not be combined with User or ClientId" in m for m in messages[:2])
    assert "is longer than the max allowed length 249" in messages[2] and len(messages[2]) < 400
    assert "'..' is not allowed" in messages[3]
    assert "characters other than ASCII alphanumerics" in messages[4]
    assert "empty" in messages[5]
    assert "Invalid configuration key request_percentage" in messages[6]
    assert "Invalid configuration key connection_creation_rate" in messages[7]
    assert "must be a whole number of bytes per second" in messages[8]
    assert "duplicate entity entry topic" in messages[10]
    assert proxy.qm.describe_client_quotas() == {T({"topic": "fine"}): {C: 30.0}}
    checked = alter(wire, [entry({"topic": "later"}, 5, key=P), entry({"topic": "a b"}, 5, key=P)], validate_only=True)
    assert [c for c, _ in checked] == [0, apis.INVALID_REQUEST] and "Topic name is invalid" in checked[1][1]
    assert T({"topic": "later"}) not in proxy.qm.describe_client_quotas()


def test_topic_filters_as_kafkas_ip_filters(wire):
    assert_filter_errors(wire, [
        ([("topic", ANY, None), ("user", ANY, None)], apis.INVALID_REQUEST,
         "Topic filter component should not be used with user or clientId filter component"),
        ([("client-id", EXACT, "c"), ("topic", EXACT, "t")], apis.INVALID_REQUEST,
         "Invalid entity filter component combination"),
        ([("topic", ANY, None), ("ip", ANY, None)], apis.INVALID_REQUEST,
         "Invalid entity filter component combination"),
        *component_errors("topic", "t"),
        ([("topics", ANY, None)], apis.UNSUPPORTED_VERSION, "Unsupported entity type topics"),
    ])
    # An exact match of a name no topic can have matches nothing (no error: a filter, not an alter).
    assert entities(describe(wire, [("topic", EXACT, "a/b")])) == {}


def test_a_flood_of_topic_entries_is_bounded_as_other_entries(proxy, wire):
    # The same path as users': a request within the decoded-request cap (128 KiB) is answered
    # entry by entry; one above it closes the connection undecoded, for topics as for users, and
    # nothing of it is applied.
    many = [entry({"topic": f"t-{i:05d}"}, i + 1, key=P) for i in range(1000)]
    results = alter(wire, many)
    assert len(results) == 1000 and all(c == 0 for c, _ in results)
    assert len(proxy.qm.describe_client_quotas()) == 1000
    assert len(entities(describe(wire, [("topic", ANY, None)]))) == 1000
    for kind in ("topic", "user"):
        w = Wire(proxy.proxy.bootstrap_address)
        try:
            with pytest.raises(ConnectionError, match="closed by the proxy"):
                alter(w, [entry({kind: f"flood-{i:06d}"}, 1, key=P) for i in range(5000)])
        finally:
            w.close()
    assert len(proxy.qm.describe_client_quotas()) == 1000


def test_with_a_store_topic_alters_go_to_the_store(tmp_path):
    assert_alters_go_to_the_store(tmp_path, {"topic": "orders"}, P, {"topic": "bad/name"})


def test_kquota_configs_bootstrap_server_manages_topic_quotas(proxy, capsys):
    address = proxy.address
    base = ["configs", "--bootstrap-server", address]
    assert main([*base, "--alter", "--add-config", f"{P}=12000000", "--entity-type", "topics",
                 "--entity-name", "orders"]) == 0
    assert main([*base, "--alter", "--add-config", f"{C}=7", "--entity-type", "topics", "--entity-default"]) == 0
    capsys.readouterr()
    assert main([*base, "--describe", "--entity-type", "topics", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {"quotas": [{"entity": {"topic": None}, "config": {C: 7}},
                                          {"entity": {"topic": "orders"}, "config": {P: 12000000}}]}
    assert main([*base, "--describe", "--entity-type", "topics", "--entity-name", "orders"]) == 0
    assert capsys.readouterr().out.split() == ["TOPIC", "CONFIGS", "orders", f"{P}=12000000"]
    # Refused by the command line before anything is sent.
    assert main([*base, "--alter", "--add-config", "request_percentage=5", "--entity-type", "topics",
                 "--entity-name", "orders"]) == 1
    assert "Invalid configuration key request_percentage" in capsys.readouterr().err
    assert main([*base, "--alter", "--delete-config", P, "--entity-type", "topics", "--entity-name", "orders"]) == 0
    assert proxy.qm.describe_client_quotas() == {T({"topic": None}): {C: 7.0}}


ADMIN_JAVA = textwrap.dedent("""
    import java.util.*;
    import org.apache.kafka.clients.admin.*;
    import org.apache.kafka.common.quota.*;

    public class TopicQuotas {
        public static void main(String[] args) throws Exception {
            Properties props = new Properties();
            props.put("bootstrap.servers", args[0]);
            try (Admin admin = Admin.create(props)) {
                ClientQuotaEntity orders = new ClientQuotaEntity(Collections.singletonMap("topic", "orders"));
                ClientQuotaEntity bad = new ClientQuotaEntity(Collections.singletonMap("topic", "no/good"));
                Map<String, String> dflt = new HashMap<>();
                dflt.put("topic", null);
                ClientQuotaEntity deflt = new ClientQuotaEntity(dflt);
                admin.alterClientQuotas(Arrays.asList(
                    new ClientQuotaAlteration(orders,
                        Arrays.asList(new ClientQuotaAlteration.Op("producer_byte_rate", 12000000.0))),
                    new ClientQuotaAlteration(deflt,
                        Arrays.asList(new ClientQuotaAlteration.Op("consumer_byte_rate", 3000.0)))
                )).all().get();
                try {
                    admin.alterClientQuotas(Arrays.asList(new ClientQuotaAlteration(bad,
                        Arrays.asList(new ClientQuotaAlteration.Op("producer_byte_rate", 1.0))))).all().get();
                    System.out.println("bad accepted");
                } catch (Exception e) {
                    Throwable cause = e.getCause();
                    System.out.println("bad refused: " + cause.getClass().getSimpleName() + ": " + cause.getMessage());
                }
                Map<ClientQuotaEntity, Map<String, Double>> got = admin.describeClientQuotas(
                    ClientQuotaFilter.containsOnly(Arrays.asList(ClientQuotaFilterComponent.ofEntityType("topic")))).entities().get();
                TreeMap<String, String> sorted = new TreeMap<>();
                for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : got.entrySet())
                    sorted.put(String.valueOf(e.getKey().entries().get("topic")), new TreeMap<>(e.getValue()).toString());
                System.out.println("described: " + sorted);
            }
        }
    }
""")


def test_apaches_admin_client_sets_and_describes_topic_quotas(kafka_broker, proxy, tmp_path):
    java = shutil.which("java")
    if java is None:
        pytest.fail("no java: Apache's Admin client needs one (the broker's own JVM)")
    src = tmp_path / "TopicQuotas.java"
    src.write_text(ADMIN_JAVA)
    r = subprocess.run([java, "-cp", f"{kafka_broker.libs}/*", str(src), proxy.address],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().split("\n")
    assert lines[0].startswith("bad refused: InvalidRequestException: ") and "Topic name is invalid" in lines[0]
    assert lines[1] == "described: {null={consumer_byte_rate=3000.0}, orders={producer_byte_rate=1.2E7}}"
    assert proxy.qm.describe_client_quotas() == {T({"topic": "orders"}): {P: 12e6}, T({"topic": None}): {C: 3000.0}}


def test_apache_kafka_itself_refuses_the_entity_type_in_one_line(broker, capsys):
    # docs/topic-quotas.md says so: topic quotas are kquota's, a Kafka broker has none.
    base = ["configs", "--bootstrap-server", broker.address]
    assert main([*base, "--describe", "--entity-type", "topics"]) == 1
    assert capsys.readouterr().err.strip() == "kquota: error: UnsupportedVersionException: Unsupported entity type topic"
    assert main([*base, "--alter", "--add-config", f"{P}=5", "--entity-type", "topics", "--entity-name", "tq-x"]) == 1
    err = capsys.readouterr().err
    assert 'Error while updating config for topic="tq-x": InvalidRequestException: Unhandled client quota entity ' \
           "type: topic" in err
