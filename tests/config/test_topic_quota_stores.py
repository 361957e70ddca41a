"""topic entities (topic quotas, a kquota extension) in the configuration: the entity and its
checks (Kafka's topic-name rules, the two byte-rate keys, never combined), every store (SQLite,
ZooKeeper at ``/config/topic-quotas/<topic>``, a ``kafka://`` topic in the ClientQuotaRecord
shape), ``kquota configs --entity-type topics`` round trips, quota files, and the bounds a flood
of topic entities meets (the same as other entities')."""

from __future__ import annotations

import json
import re

import pytest
from store_helpers import assert_bad_nodes_skipped, assert_kafka_layout, fresh_kafka_url, store_url
from test_configs_cli import cli, state
from waiting import wait_until

from callback_fakes import Counting

from kquota import ClientQuotaEntity, QuotaConfigError, QuotaManager
from kquota import ClientQuotaType as Q
from kquota.config_file import parse_quota_config
from kquota.stores import ConfigStoreError, open_store
from kquota.stores.kafka.codec import decode_key, encode_key
from kquota.stores.layout import is_quota_entity_path, parse_entity_path
from kquota.validation import validate_alter
from kquota.watcher import QuotaConfigWatcher

E = ClientQuotaEntity
P, C = "producer_byte_rate", "consumer_byte_rate"

# Kafka's Topic.validate refuses each of these (its reason in the message).
BAD_NAMES = [
    ("a" * 250, "is longer than the max allowed length 249"),
    ("..", "'..' is not allowed"),
    (".", "'.' is not allowed"),
    ("a/b", "contains one or more characters other than ASCII alphanumerics"),
    ("ordérs", "contains one or more characters other than ASCII alphanumerics"),
    ("a b", "contains one or more characters other than ASCII alphanumerics"),
    ("<default>", "contains one or more characters other than ASCII alphanumerics"),
]


# ---------------------------------------------------------------- the entity


def test_topic_entities_and_kafkas_name_rules():
    assert E({"topic": "orders"}).path == "topics/orders"
    assert E({"topic": None}).path == "topics/<default>"
    assert str(E({"topic": "orders"})) == 'topic="orders"'
    assert E({"topic": "a" * 249}).is_topic and not E({"user": "a"}).is_topic
    assert E({"topic": "Or.d_e-rs9"})["topic"] == "Or.d_e-rs9"
    for name, reason in BAD_NAMES:
        with pytest.raises(QuotaConfigError, match="Topic name is invalid: ") as e:
            E({"topic": name})
        assert reason in str(e.value)
    with pytest.raises(QuotaConfigError, match="the name is empty"):
        E({"topic": ""})
    for other in ({"user": "u"}, {"client-id": None}, {"ip": "10.0.0.1"}):
        with pytest.raises(QuotaConfigError, match="Topic entity should not be combined|IP entity should not"):
            E({"topic": "t", **other})


def test_a_hostile_name_is_one_short_line():
    for name in ("x" * 10_000_000, "é" * 1_000_000, "a\nb" * 1000):
        with pytest.raises(QuotaConfigError) as e:
            E({"topic": name})
        assert "\n" not in str(e.value) and len(str(e.value)) < 400


@pytest.mark.parametrize("ops, message", [
    ({"request_percentage": 5}, "Invalid configuration key request_percentage"),
    ({"connection_creation_rate": 5}, "Invalid configuration key connection_creation_rate"),
    ({"controller_mutation_rate": 5}, "Invalid configuration key controller_mutation_rate"),
    ({P: 0}, "must be > 0"),
    ({C: -1}, "must be > 0"),
    ({P: 1.5}, "must be a whole number of bytes per second"),
    ({P: float("inf")}, "must be a finite number"),
    ({C: 2**63}, "at most 2^63 - 1"),
    ({P: "12"}, "must be a number"),
])
def test_topic_keys_and_values_are_checked_naming_the_entity(ops, message):
    with pytest.raises(QuotaConfigError, match=re.escape(message)) as e:
        validate_alter([({"topic": "orders"}, ops)])
    assert str(e.value).startswith(f'invalid quota for entity topic="orders", key {next(iter(ops))}:')


def test_validate_alter_takes_topics_with_the_other_entities():
    assert validate_alter([({"topic": "orders"}, {P: 12_000_000, C: None}), ({"topic": None}, {C: 1}),
                           ({"user": "u"}, {"request_percentage": 5})]) == [
        (E({"topic": "orders"}), {P: 12e6, C: None}), (E({"topic": None}), {C: 1.0}),
        (E({"user": "u"}), {"request_percentage": 5.0})]
    with pytest.raises(QuotaConfigError, match="appears more than once"):
        validate_alter([({"topic": "t"}, {P: 1}), ({"topic": "t"}, {C: 1})])


def test_layout_paths_are_kquotas_own_not_kafkas_topic_configs():
    assert parse_entity_path("topic-quotas/orders") == E({"topic": "orders"})
    assert parse_entity_path("topic-quotas/<default>") == E({"topic": None})
    assert is_quota_entity_path("topic-quotas/orders")
    # Kafka's own topic-config notifications are not ours.
    assert not is_quota_entity_path("topics/orders")
    for bad in ("topic-quotas/a%2Fb", "topic-quotas/..", "topic-quotas/" + "a" * 250, "topic-quotas/"):
        with pytest.raises(ValueError, match="invalid quota entity path"):
            parse_entity_path(bad)


def test_kafka_store_records_are_client_quota_records_of_entity_type_topic():
    key = encode_key(E({"topic": "orders"}), P)
    assert json.loads(key) == {"entity": [{"entityType": "topic", "entityName": "orders"}], "key": P}
    assert json.loads(encode_key(E({"topic": None}), C)) == {"entity": [{"entityType": "topic", "entityName": None}],
                                                            "key": C}
    assert decode_key(key) == (E({"topic": "orders"}), P)


# ---------------------------------------------------------------- QuotaManager


def test_the_manager_applies_topic_entities_with_the_others():
    with QuotaManager(expiry_interval_seconds=None) as qm:
        qm.alter_client_quotas([({"topic": "orders"}, {P: 12_000_000, C: 24_000_000}), ({"topic": None}, {P: 1000}),
                                ({"user": "orders"}, {P: 5})])
        assert qm.describe_client_quotas() == {E({"topic": "orders"}): {P: 12e6, C: 24e6},
                                               E({"topic": None}): {P: 1000.0}, E({"user": "orders"}): {P: 5.0}}
        # A topic quota is not a client quota: the user's bound is its own, the topic's untouched.
        assert qm.quota_limit(Q.PRODUCE, "orders", "app") == 5.0
        assert qm.quota_limit(Q.PRODUCE, "someone", "app") is None
        qm.alter_client_quotas([({"topic": "orders"}, {P: None, C: None})])
        assert qm.describe_client_quotas() == {E({"topic": None}): {P: 1000.0}, E({"user": "orders"}): {P: 5.0}}
        assert "entities=2" in repr(qm)


@pytest.mark.parametrize("bad", [
    ({"topic": "a/b"}, {P: 1}),
    ({"topic": "x"}, {"request_percentage": 1}),
    ({"topic": "x"}, {P: 1.5}),
    ({"user": "u"}, {"request_percentage": 10**9}),   # refused by the kernel, after the topics were checked
    ({"user": "u", "topic": "x"}, {P: 1}),
])
def test_a_bad_entry_anywhere_applies_nothing(bad):
    with QuotaManager(expiry_interval_seconds=None) as qm:
        qm.alter_client_quotas([({"topic": "keep"}, {P: 1})])
        before = qm.describe_client_quotas()
        with pytest.raises(QuotaConfigError):
            qm.alter_client_quotas([({"topic": "new"}, {P: 7}), ({"topic": "keep"}, {P: None}),
                                    ({"user": "v"}, {P: 3}), bad])
        assert qm.describe_client_quotas() == before


def test_validate_only_and_callbacks_leave_topics_alone():
    cb = Counting()
    with QuotaManager(expiry_interval_seconds=None, callback=cb) as qm:
        qm.alter_client_quotas([({"topic": "orders"}, {P: 5})], validate_only=True)
        assert qm.describe_client_quotas() == {}
        qm.alter_client_quotas([({"topic": "orders"}, {P: 5}), ({"user": "u"}, {C: 9})])
        qm.alter_client_quotas([({"topic": "orders"}, {P: None})])
        # Kafka's ClientQuotaCallback sees client quotas only.
        assert [(t, dict(e.entries), v) for t, e, v in cb.updates] == [(Q.FETCH, {"user": "u"}, 9.0)]
        assert cb.removes == []


@pytest.mark.process
@pytest.mark.parametrize("kind", ["sqlite", "zookeeper"])
def test_a_live_topic_alter_reaches_a_watching_manager(kind, tmp_path):
    url = store_url(kind, tmp_path)
    writer, reader = open_store(url), open_store(url)
    qm = QuotaManager(expiry_interval_seconds=None)
    try:
        with QuotaConfigWatcher(reader, qm) as w:
            writer.alter([({"topic": "orders"}, {P: 3}), ({"topic": None}, {C: 4})])
            want = {E({"topic": "orders"}): {P: 3.0}, E({"topic": None}): {C: 4.0}}
            assert wait_until(lambda: qm.describe_client_quotas() == want), qm.describe_client_quotas()
            writer.alter([({"topic": "orders"}, {P: None})])
            assert wait_until(lambda: qm.describe_client_quotas() == {E({"topic": None}): {C: 4.0}}), \
                qm.describe_client_quotas()
            assert not w.errors
    finally:
        reader.close()
        writer.close()
        qm.close()


# ---------------------------------------------------------------- every store


@pytest.mark.process
def test_round_trip_in_every_store(store):
    store.alter([({"topic": "orders"}, {P: 12_000_000, C: 24_000_000}), ({"topic": None}, {P: 1_000_000}),
                 ({"user": "orders"}, {P: 5}), ({"topic": "a" * 249}, {C: 7})])
    assert store.describe() == {
        E({"topic": "orders"}): {P: 12e6, C: 24e6}, E({"topic": None}): {P: 1e6},
        E({"user": "orders"}): {P: 5.0}, E({"topic": "a" * 249}): {C: 7.0}}
    assert store.describe([E({"topic": "orders"}), E({"topic": "nothing"})]) == {E({"topic": "orders"}): {P: 12e6, C: 24e6}}
    store.alter([({"topic": "orders"}, {P: None}), ({"topic": None}, {P: None}), ({"topic": "a" * 249}, {C: 8})])
    assert store.describe() == {E({"topic": "orders"}): {C: 24e6}, E({"user": "orders"}): {P: 5.0},
                                E({"topic": "a" * 249}): {C: 8.0}}
    # A bad entry anywhere in an alter: nothing of it is written.
    with pytest.raises(QuotaConfigError, match="request_percentage"):
        store.alter([({"topic": "fine"}, {P: 1}), ({"topic": "orders"}, {"request_percentage": 5})])
    assert E({"topic": "fine"}) not in store.describe()


@pytest.mark.process
def test_a_flood_of_topic_entities_meets_the_stores_bounds(tmp_path, request):
    zk = open_store(store_url("zookeeper", tmp_path), max_transaction_bytes=20_000)
    kafka = open_store(fresh_kafka_url(request.getfixturevalue("broker")), max_alter_bytes=20_000)
    try:
        for s in (zk, kafka):
            big = [({"topic": f"topic-{i:05d}"}, {P: i + 1}) for i in range(500)]
            with pytest.raises(ConfigStoreError, match="split it into smaller alters"):
                s.alter(big)
            assert s.describe() == {}
            s.alter(big[:20])
            assert len(s.describe()) == 20
    finally:
        zk.close()
        kafka.close()


@pytest.mark.process  # ZooKeeper
def test_zookeeper_layout(tmp_path):
    s = open_store(store_url("zookeeper", tmp_path))
    try:
        s.alter([({"topic": "orders"}, {P: 12_000_000}), ({"topic": None}, {C: 5})])
        assert_kafka_layout(s, {"topic-quotas/orders": {"version": 1, "config": {P: "12000000"}},
                                "topic-quotas/<default>": {"version": 1, "config": {C: "5"}}})
        # Kafka's own topic configs are not touched.
        zk, root = s._zk, s._p("")
        assert zk.exists(f"{root}/topics/orders") is None and zk.exists(f"{root}/topics") is None
        # Nodes another writer left with a bad name or value are reported and skipped.
        errors = assert_bad_nodes_skipped(s, {
            "topic-quotas/bad!name": b'{"version":1,"config":{"producer_byte_rate":"3"}}',
            "topic-quotas/half": b'{"version":1,"config":{"producer_byte_rate":"1.5"}}',
        }, {E({"topic": "orders"}): {P: 12e6}, E({"topic": None}): {C: 5.0}})
        assert len(errors) == 2 and any("bad!name" in m for m in errors)
        s.alter([({"topic": "orders"}, {P: None})])
        assert zk.exists(f"{root}/topic-quotas/orders") is None  # emptied, deleted as Kafka does
    finally:
        s.close()


@pytest.mark.process
def test_a_store_watch_reports_topic_entities_and_not_kafkas_topic_configs(store):
    seen = []
    w = store.watch(seen.append)
    try:
        if store.url.startswith("zookeeper:"):
            # Kafka's own topic-config change (a topic named like ours): not a quota change.
            store._zk.create(store._p("changes/config_change_"), b'{"version":2,"entity_path":"topics/orders"}',
                             sequence=True)
        store.alter([({"topic": "orders"}, {P: 1}), ({"topic": None}, {C: 2})])
        want = {E({"topic": "orders"}), E({"topic": None})}
        wait_until(lambda: set().union(*(x for x in seen if x)) == want, timeout=20)
    finally:
        w.stop()
    assert set().union(*(x for x in seen if x)) == want


# ---------------------------------------------------------------- kquota configs


@pytest.fixture(params=["sqlite", "zookeeper"])
def url(request, tmp_path):
    return store_url(request.param, tmp_path)


def test_configs_topics_round_trip(capsys, url):
    base = ["--store", url, "--alter"]
    code, out, _ = cli(capsys, *base, "--add-config", f"{P}=12000000,{C}=24000000", "--entity-type", "topics",
                       "--entity-name", "orders")
    assert code == 0 and out == 'Completed updating config for topic="orders".\n'
    assert cli(capsys, *base, "--add-config", f"{P}=2000000", "--entity-type", "topics", "--entity-default")[0] == 0
    assert cli(capsys, *base, "--add-config", f"{P}=5", "--user", "u")[0] == 0
    assert state(url) == {E({"topic": "orders"}): {P: 12e6, C: 24e6}, E({"topic": None}): {P: 2e6},
                          E({"user": "u"}): {P: 5.0}}
    code, out, _ = cli(capsys, "--store", url, "--describe", "--entity-type", "topics")
    assert code == 0 and "user" not in out.lower().split("\n")[0]
    lines = out.strip().split("\n")
    assert lines[0].split() == ["TOPIC", "CONFIGS"]
    assert lines[1].split() == ["<default>", f"{P}=2000000"]
    assert lines[2].split() == ["orders", f"{P}=12000000,{C}=24000000"]
    code, out, _ = cli(capsys, "--store", url, "--describe", "--entity-type", "topics", "--entity-name", "orders",
                       "--json")
    assert json.loads(out) == {"quotas": [{"entity": {"topic": "orders"}, "config": {P: 12000000, C: 24000000}}]}
    code, out, _ = cli(capsys, "--store", url, "--describe", "--entity-type", "topics", "--entity-name", "none")
    assert out == "no quotas for topics/none\n"
    code, out, _ = cli(capsys, "--store", url, "--describe")
    assert "USER" in out and "TOPIC" in out
    assert cli(capsys, *base, "--delete-config", P, "--entity-type", "topics", "--entity-default")[0] == 0
    assert cli(capsys, *base, "--delete-config", f"{P},{C}", "--entity-type", "topics", "--entity-name", "orders")[0] == 0
    assert state(url) == {E({"user": "u"}): {P: 5.0}}
    # A --describe --json document reads back as the store's state, and feeds --quota-file.
    assert cli(capsys, *base, "--add-config", f"{C}=9", "--entity-type", "topics", "--entity-name", "t.1")[0] == 0
    code, out, _ = cli(capsys, "--store", url, "--describe", "--json")
    assert dict(parse_quota_config(json.loads(out))) == state(url)


@pytest.mark.parametrize("args, message", [
    (["--entity-type", "topics", "--entity-name", "a" * 250], "is longer than the max allowed length 249"),
    (["--entity-type", "topics", "--entity-name", ".."], "'..' is not allowed"),
    (["--entity-type", "topics", "--entity-name", "a/b"], "characters other than ASCII alphanumerics"),
    (["--entity-type", "topics", "--entity-name", ""], "an entity name is empty"),
    (["--entity-type", "topics"], "needs --entity-name or --entity-default"),
    (["--entity-type", "topics", "--entity-type", "users", "--entity-name", "t", "--entity-name", "u"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--entity-type", "topics", "--entity-type", "ips", "--entity-name", "t", "--entity-default"],
     "Only 'users' and 'clients' entity types may be specified together"),
])
def test_bad_topic_entities_are_refused_and_nothing_is_written(capsys, url, args, message):
    assert cli(capsys, "--store", url, "--alter", "--add-config", f"{P}=1", "--entity-type", "topics",
               "--entity-name", "keep")[0] == 0
    before = state(url)
    code, out, err = cli(capsys, "--store", url, "--alter", "--add-config", f"{P}=5", *args)
    assert code != 0 and message in err and out == "" and err.count("\n") == 1
    assert state(url) == before


@pytest.mark.parametrize("config, message", [
    ("request_percentage=5", "Invalid configuration key request_percentage"),
    ("connection_creation_rate=5", "Invalid configuration key connection_creation_rate"),
    (f"{P}=1.5", "must be a whole number"),
    (f"{P}=0", "must be > 0"),
])
def test_bad_topic_configs_are_refused_and_nothing_is_written(capsys, url, config, message):
    assert cli(capsys, "--store", url, "--alter", "--add-config", f"{P}=1", "--entity-type", "topics",
               "--entity-default")[0] == 0
    before = state(url)
    code, out, err = cli(capsys, "--store", url, "--alter", "--add-config", config, "--entity-type", "topics",
                         "--entity-name", "orders")
    assert code != 0 and message in err and 'topic="orders"' in err and out == "" and err.count("\n") == 1
    assert state(url) == before


# ---------------------------------------------------------------- quota files


def test_quota_files_take_topic_entities():
    doc = {"quotas": [{"entity": {"topic": "orders"}, "config": {P: 12_000_000}},
                      {"entity": {"topic": None}, "config": {C: 5}}]}
    assert parse_quota_config(doc) == [(E({"topic": "orders"}), {P: 12e6}), (E({"topic": None}), {C: 5.0})]
    for entity, config, message in [
        ({"topic": "a/b"}, {P: 1}, "Topic name is invalid"),
        ({"topic": "t", "user": "u"}, {P: 1}, "should not be combined"),
        ({"topic": "t"}, {"request_percentage": 1}, r'quotas\[0\] \(topic="t"\), key request_percentage: Invalid'),
        ({"topic": "t"}, {P: 1.5}, "must be a whole number"),
    ]:
        with pytest.raises(QuotaConfigError, match=message):
            parse_quota_config({"quotas": [{"entity": entity, "config": config}]})
