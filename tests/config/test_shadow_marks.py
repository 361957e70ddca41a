"""Quotas marked shadow inside one store (``shadow.<config key>``): checked as their unmarked key,
kept by every store (SQLite, ZooKeeper, ``kafka://``), never taken by an enforcing manager, the
shadow configuration they stand for, ``kquota configs`` altering, describing and promoting them
(one transaction), and the proxy's admin protocol storing them (a kquota extension)."""

from __future__ import annotations

import asyncio
import json

import pytest
from store_helpers import assert_bad_nodes_skipped, store_url
from waiting import wait_until

from kquota import ClientQuotaEntity, QuotaConfigError, QuotaManager
from kquota.cli import main
from kquota.proxy.admin import QuotaAdmin
from kquota.shadow_marks import enforced_state, has_marks, promotion, shadow_state, split_marks
from kquota.stores import open_store
from kquota.validation import validate_alter
from kquota.watcher import QuotaConfigWatcher

E = ClientQuotaEntity
P, C, R = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
SP, SC = "shadow.producer_byte_rate", "shadow.consumer_byte_rate"

STATE = {
    E({"user": "etl"}): {P: 1000.0, SP: 500.0},            # a quota and its mark
    E({"client-id": "new"}): {SC: 700.0},                   # a mark alone
    E({"user": None}): {P: 9.0, C: 8.0, SC: 4.0},           # a mark beside another key
    E({"topic": "orders"}): {P: 12.0},                      # no mark
}


def test_the_views_of_a_state_with_marks():
    assert split_marks({P: 1.0, SP: 2.0, SC: None}) == ({P: 1.0}, {P: 2.0, C: None})
    assert enforced_state(STATE) == {E({"user": "etl"}): {P: 1000.0}, E({"user": None}): {P: 9.0, C: 8.0},
                                     E({"topic": "orders"}): {P: 12.0}}
    assert shadow_state(STATE) == {E({"user": "etl"}): {P: 500.0}, E({"client-id": "new"}): {C: 700.0},
                                   E({"user": None}): {P: 9.0, C: 4.0}, E({"topic": "orders"}): {P: 12.0}}
    assert has_marks(STATE) and not has_marks(enforced_state(STATE))
    assert promotion(STATE) == [(E({"user": "etl"}), {P: 500.0, SP: None}),
                                (E({"client-id": "new"}), {C: 700.0, SC: None}),
                                (E({"user": None}), {C: 4.0, SC: None})]


def test_a_store_takes_marks_checked_as_their_key_and_a_manager_never():
    assert validate_alter([({"user": "u"}, {P: 1, SP: 2, "shadow.request_percentage": None})], shadow_marks=True) == [
        (E({"user": "u"}), {P: 1.0, SP: 2.0, "shadow.request_percentage": None})]
    for ops, message in (
        ({SP: 0.5}, "key shadow.producer_byte_rate: must be a whole number of bytes per second"),
        ({SP: 0}, "key shadow.producer_byte_rate: .*must be > 0"),
        ({"shadow.request_percentage": "x"}, "key shadow.request_percentage: must be a number"),
        ({"shadow.bogus": 1}, "key shadow.bogus: unknown config key"),
        ({"shadow.shadow.producer_byte_rate": 1}, "key shadow.shadow.producer_byte_rate: unknown config key"),
    ):
        with pytest.raises(QuotaConfigError, match=message):
            validate_alter([({"user": "u"}, ops)], shadow_marks=True)
    # ip and topic entities take no mark: the shadow evaluates clients' responses.
    for entity, key in (({"ip": "10.0.0.1"}, "shadow.connection_creation_rate"), ({"topic": "t"}, SP)):
        with pytest.raises(QuotaConfigError, match=f"key {key}: a shadow mark is for client quotas"):
            validate_alter([(entity, {key: 5})], shadow_marks=True)
    # Malformed entries keep the plain check's words.
    with pytest.raises(QuotaConfigError, match="entries must be an iterable"):
        validate_alter("abc", shadow_marks=True)
    with pytest.raises(QuotaConfigError, match="appears more than once"):
        validate_alter([({"user": "u"}, {SP: 1}), ({"user": "u"}, {P: 1})], shadow_marks=True)
    # A manager enforces: a mark is an unknown key to it, and to a plain validation.
    with pytest.raises(QuotaConfigError, match="unknown config key"):
        validate_alter([({"user": "u"}, {SP: 1})])
    qm = QuotaManager(expiry_interval_seconds=None)
    try:
        with pytest.raises(QuotaConfigError, match="unknown config key"):
            qm.alter_client_quotas([({"user": "u"}, {SP: 1})])
    finally:
        qm.close()


@pytest.mark.process
def test_every_store_keeps_marks_and_refuses_a_bad_one_whole(store):
    store.alter([({"user": "etl"}, {P: 1000, SP: 500}), ({"client-id": "new"}, {SC: 700}),
                 ({"topic": "orders"}, {P: 12})])
    want = {E({"user": "etl"}): {P: 1000.0, SP: 500.0}, E({"client-id": "new"}): {SC: 700.0},
            E({"topic": "orders"}): {P: 12.0}}
    assert store.describe() == want
    with pytest.raises(QuotaConfigError, match="shadow.producer_byte_rate"):
        store.alter([({"user": "fine"}, {P: 1}), ({"user": "etl"}, {SP: 1.5})])
    with pytest.raises(QuotaConfigError, match="a shadow mark is for client quotas"):
        store.alter([({"user": "fine"}, {P: 1}), ({"topic": "orders"}, {SP: 1})])
    assert store.describe() == want  # nothing of either alter written
    store.alter([({"user": "etl"}, {SP: None})])
    assert store.describe()[E({"user": "etl"})] == {P: 1000.0}


@pytest.mark.process  # ZooKeeper
def test_zookeeper_keeps_a_mark_in_the_entitys_config_node_and_skips_a_bad_one(tmp_path):
    s = open_store(store_url("zookeeper", tmp_path))
    try:
        s.alter([({"user": "etl"}, {P: 1000, SP: 500})])
        assert json.loads(s._zk.get(s._p("users/etl"))[0]) == {"version": 1, "config": {P: "1000", SP: "500"}}
        errors = assert_bad_nodes_skipped(s, {"users/half": b'{"version":1,"config":{"shadow.producer_byte_rate":"1.5"}}'},
                                          {E({"user": "etl"}): {P: 1000.0, SP: 500.0}})
        assert len(errors) == 1 and "shadow.producer_byte_rate" in errors[0]
    finally:
        s.close()


@pytest.mark.process
def test_a_watching_manager_takes_the_enforced_quotas_and_a_shadow_one_the_marks(tmp_path):
    url = store_url("sqlite", tmp_path)
    writer, reader = open_store(url), open_store(url)
    qm, shadow_qm = QuotaManager(expiry_interval_seconds=None), QuotaManager(expiry_interval_seconds=None)
    try:
        with QuotaConfigWatcher(reader, qm) as w, QuotaConfigWatcher(reader, shadow_qm, view=shadow_state) as sw:
            writer.alter([(e, c) for e, c in STATE.items()])
            assert wait_until(lambda: qm.describe_client_quotas() == enforced_state(STATE)), qm.describe_client_quotas()
            assert wait_until(lambda: shadow_qm.describe_client_quotas() == shadow_state(STATE)), \
                shadow_qm.describe_client_quotas()
            # A mark removed: the shadow follows; the enforced manager was never told of it.
            writer.alter([({"user": "etl"}, {SP: None})])
            assert wait_until(lambda: shadow_qm.describe_client_quotas()[E({"user": "etl"})] == {P: 1000.0})
            assert qm.describe_client_quotas() == enforced_state(STATE)
            assert not w.errors and not sw.errors
    finally:
        reader.close()
        writer.close()
        qm.close()
        shadow_qm.close()


def test_configs_alters_describes_and_promotes_marks_in_one_transaction(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/q.db"
    assert main(["configs", "--store", url, "--alter", "--add-config", f"{P}=1000,{SP}=500", "--user", "etl"]) == 0
    assert main(["configs", "--store", url, "--alter", "--add-config", f"{SC}=700",
                 "--entity-type", "clients", "--entity-name", "new"]) == 0
    assert main(["configs", "--store", url, "--alter", "--add-config", f"{C}=9", "--user", "plain"]) == 0
    capsys.readouterr()
    assert main(["configs", "--store", url, "--describe"]) == 0
    out = capsys.readouterr().out
    assert f"{P}=1000,{SP}=500" in out and f"{SC}=700" in out
    # A bad mark: one line, nothing written.
    assert main(["configs", "--store", url, "--alter", "--add-config", f"{SP}=0.5", "--user", "etl"]) == 1
    assert "key shadow.producer_byte_rate: must be a whole number" in capsys.readouterr().err
    assert main(["configs", "--store", url, "--promote-shadow"]) == 0
    assert "Promoted 2 quotas marked shadow" in capsys.readouterr().out
    with open_store(url) as s:
        assert s.describe() == {E({"user": "etl"}): {P: 500.0}, E({"client-id": "new"}): {C: 700.0},
                                E({"user": "plain"}): {C: 9.0}}
    # Nothing marked any more: refused in one line, nothing changed.
    assert main(["configs", "--store", url, "--promote-shadow"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no quota in" in err[0] and "is marked shadow" in err[0], err


def test_promoting_a_shadow_store_leaves_the_marks_of_both_stores_alone(tmp_path, capsys):
    enforced, shadow = f"sqlite:///{tmp_path}/e.db", f"sqlite:///{tmp_path}/s.db"
    with open_store(enforced) as e, open_store(shadow) as s:
        e.alter([({"user": "etl"}, {P: 1000, SP: 500})])
        s.alter([({"user": "etl"}, {P: 2000, SC: 3})])
    assert main(["configs", "--promote-shadow", "--store", enforced, "--shadow-store", shadow]) == 0
    assert "1 entity changed" in capsys.readouterr().out
    with open_store(enforced) as e:
        assert e.describe() == {E({"user": "etl"}): {P: 2000.0, SP: 500.0}}


@pytest.mark.process
def test_the_proxys_admin_protocol_stores_marks_and_describes_them(tmp_path):
    from kquota.kafka.client_quotas import wire_entity

    store = open_store(store_url("sqlite", tmp_path))
    qm = QuotaManager(expiry_interval_seconds=None)
    admin = QuotaAdmin(qm, store, admin_principals=["admin"])
    try:
        entity = wire_entity(E({"user": "etl"}))

        def alter(key: str, value: float, validate_only: bool = False) -> dict:
            req = {"Entries": [{"Entity": entity, "Ops": [{"Key": key, "Value": value, "Remove": False}]}],
                   "ValidateOnly": validate_only}
            return asyncio.run(admin.alter(req, "admin"))["Entries"][0]

        assert alter(SP, 500, validate_only=True)["ErrorCode"] == 0
        assert store.describe() == {}
        assert alter(SP, 500)["ErrorCode"] == 0
        bad = alter(SP, 0.5)
        assert bad["ErrorCode"] == 42 and "shadow.producer_byte_rate" in bad["ErrorMessage"]  # INVALID_REQUEST
        assert store.describe() == {E({"user": "etl"}): {SP: 500.0}}
        described = asyncio.run(admin.describe({"Components": [], "Strict": False}, "admin"))
        assert [v["Key"] for v in described["Entries"][0]["Values"]] == [SP]
    finally:
        store.close()
        qm.close()


def test_the_pipeline_replays_a_stores_enforced_quotas_not_its_marks(tmp_path):
    from kquota.pipeline.quotas import load_quotas

    url = store_url("sqlite", tmp_path)
    with open_store(url) as s:
        s.alter([(e, c) for e, c in STATE.items()])
    assert dict(load_quotas(url)) == enforced_state(STATE)
