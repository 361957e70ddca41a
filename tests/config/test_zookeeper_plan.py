"""The ZooKeeper alter plan and node codec, without a ZooKeeper: pure functions over node state."""

import json

import pytest

from kquota import ClientQuotaEntity
from kquota.stores.layout import entity_path
from kquota.stores.zookeeper import CorruptNode, NodeState, Op, decode_config, encode_config, plan, quota_values
from kquota.stores.zookeeper.notifications import notification_entity_path, sequence_number
from kquota.stores.zookeeper.plan import paths_to_read

ROOT = "/config"
NOTIFY = "/config/changes/config_change_"


def node_path(entity):
    return f"{ROOT}/{entity_path(entity)}"


def E(**kw):
    return ClientQuotaEntity({k.replace("_", "-"): v for k, v in kw.items()})


def state(nodes=None, children=None, exists=None):
    """A NodeState from ``{path: config dict or raw bytes, with version 3}``."""
    data = {}
    for p, v in (nodes or {}).items():
        data[p] = None if v is None else (v if isinstance(v, bytes) else encode_config(v), 3)
    return NodeState(data, children or {}, exists or {})


def notes(ops):
    return [json.loads(op.data)["entity_path"] for op in ops if op.kind == "notify"]


def test_new_user_quota_creates_its_node_and_one_notification():
    alice = E(user="alice")
    ops = plan([(alice, {"producer_byte_rate": 1024.0})], node_path, NOTIFY,
               state({"/config/users/alice": None}, {"/config/users/alice": []}))
    assert ops == [
        Op("create", "/config/users/alice", b'{"version":1,"config":{"producer_byte_rate":"1024"}}', -1),
        Op("notify", NOTIFY, b'{"version":2,"entity_path":"users/alice"}', -1),
    ]


def test_pair_creates_parents_first_without_data():
    e = E(user="a b", client_id="c")
    data_paths, child_paths = paths_to_read([(e, {})], node_path)
    assert data_paths == ["/config/users/a%20b", "/config/users/a%20b/clients/c"]
    assert child_paths == ["/config/users/a%20b", "/config/users/a%20b/clients", "/config/users/a%20b/clients/c"]
    ops = plan([(e, {"consumer_byte_rate": 5.0})], node_path, NOTIFY, state({p: None for p in data_paths}))
    assert [(op.kind, op.path, op.data) for op in ops[:3]] == [
        ("create", "/config/users/a%20b", b""),
        ("create", "/config/users/a%20b/clients", b""),
        ("create", "/config/users/a%20b/clients/c", encode_config({"consumer_byte_rate": "5"})),
    ]
    assert notes(ops) == ["users/a%20b/clients/c"]


def test_change_sets_with_the_version_read_and_keeps_foreign_keys():
    bob = E(user="bob")
    scram = {"SCRAM-SHA-256": "salt=...", "producer_byte_rate": "10"}
    ops = plan([(bob, {"producer_byte_rate": 20.0})], node_path, NOTIFY,
               state({"/config/users/bob": scram}, {"/config/users/bob": []}))
    assert ops[0] == Op("set", "/config/users/bob",
                        encode_config({"SCRAM-SHA-256": "salt=...", "producer_byte_rate": "20"}), 3)


def test_unchanged_value_writes_nothing_but_still_notifies():
    bob = E(user="bob")
    ops = plan([(bob, {"producer_byte_rate": 10.0})], node_path, NOTIFY,
               state({"/config/users/bob": {"producer_byte_rate": "10"}}, {"/config/users/bob": []}))
    assert [op.kind for op in ops] == ["notify"]


def test_removing_the_last_key_cleans_leaf_container_and_empty_user_like_kafka():
    e = E(user="u", client_id="c")
    nodes = {"/config/users/u": b"", "/config/users/u/clients/c": {"request_percentage": "50"}}
    children = {"/config/users/u": ["clients"], "/config/users/u/clients": ["c"], "/config/users/u/clients/c": []}
    ops = plan([(e, {"request_percentage": None})], node_path, NOTIFY,
               state(nodes, children, {"/config/users/u/clients": True}))
    # Leaves first, each with the version read (-1 for the container, which was not read).
    assert [(op.kind, op.path, op.version) for op in ops] == [
        ("delete", "/config/users/u/clients/c", 3),
        ("delete", "/config/users/u/clients", -1),
        ("delete", "/config/users/u", 3),
        ("notify", NOTIFY, -1),
    ]


def test_user_node_with_its_own_quota_or_other_clients_stays():
    e = E(user="u", client_id="c")
    nodes = {"/config/users/u": {"producer_byte_rate": "1"}, "/config/users/u/clients/c": {"request_percentage": "5"}}
    children = {"/config/users/u": ["clients"], "/config/users/u/clients": ["c", "d"], "/config/users/u/clients/c": []}
    ops = plan([(e, {"request_percentage": None})], node_path, NOTIFY,
               state(nodes, children, {"/config/users/u/clients": True}))
    assert [(op.kind, op.path) for op in ops] == [("delete", "/config/users/u/clients/c"), ("notify", NOTIFY)]


def test_node_with_children_keeps_an_empty_config():
    u = E(user="u")
    nodes = {"/config/users/u": {"producer_byte_rate": "1"}}
    ops = plan([(u, {"producer_byte_rate": None})], node_path, NOTIFY,
               state(nodes, {"/config/users/u": ["clients"]}))
    assert ops[0] == Op("set", "/config/users/u", encode_config({}), 3)


def test_corrupt_node_is_replaced():
    u = E(user="u")
    ops = plan([(u, {"producer_byte_rate": 7.0})], node_path, NOTIFY,
               state({"/config/users/u": b"{not json"}, {"/config/users/u": []}))
    assert ops[0] == Op("set", "/config/users/u", encode_config({"producer_byte_rate": "7"}), 3)


def test_codec():
    assert decode_config(None) == {} and decode_config(b"  ") == {}
    assert decode_config(b'{"version":1,"config":{"a":"1","b":2}}') == {"a": "1", "b": "2"}
    for bad in (b"[1]", b'{"config":[]}', b'{"config":{"a":true}}', b"\xff"):
        with pytest.raises(CorruptNode):
            decode_config(bad)
    assert quota_values(E(user="u"), {"producer_byte_rate": " 1024 ", "SCRAM": "x"}) == {"producer_byte_rate": 1024.0}
    for bad in ("abc", "inf", "1.5", "-1"):
        with pytest.raises(CorruptNode):
            quota_values(E(user="u"), {"producer_byte_rate": bad})


def test_notifications():
    assert sequence_number("config_change_0000000012") == 12
    assert sequence_number("other") == -1 and sequence_number("config_change_x") == -1
    assert notification_entity_path(b'{"version":2,"entity_path":"users/a"}') == "users/a"
    assert notification_entity_path(b'{"version":1,"entity_type":"clients","entity_name":"c"}') == "clients/c"
    for bad in (b"x", b"[]", b'{"version":3}', b'{"version":2}'):
        with pytest.raises(ValueError):
            notification_entity_path(bad)
