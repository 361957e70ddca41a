"""The ZooKeeper store against a real server: Kafka's exact layout, KIP-55's own documents,
node clean-up as AdminZkClient does it, corrupt data, transaction size, kill -9 atomicity."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from store_helpers import fresh_zk_url
from waiting import wait_until

from kquota import ClientQuotaEntity, QuotaManager
from kquota.stores import ConfigStoreError, open_store, sanitize
from kquota.watcher import QuotaConfigWatcher

E = ClientQuotaEntity
HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, os.pardir, "fixtures", "kip55", "kip55_samples.json")
WAIT = 30


@pytest.fixture
def zk():
    url = fresh_zk_url()
    store = open_store(url)
    yield store
    try:
        if store._zk.exists(store.root):
            store._zk.delete(store.root, recursive=True)
    finally:
        store.close()


def raw_get(store, rel):
    data, _ = store._zk.get(store.root + rel)
    return json.loads(data) if data else None


def raw_set(store, rel, data):
    store._zk.ensure_path(store.root + rel)
    store._zk.set(store.root + rel, data if isinstance(data, bytes) else data.encode())


def exists(store, rel):
    return store._zk.exists(store.root + rel) is not None


def notifications(store):
    path = store.root + "/config/changes"
    names = sorted(store._zk.get_children(path))
    return names, [json.loads(store._zk.get(f"{path}/{n}")[0]) for n in names]


USER1 = "user1"
USER2 = "CN=user2,O=Example Corp"  # a principal whose node name needs encoding


def load_kip55_tree(store):
    samples = json.load(open(SAMPLES))
    for node in samples["config_nodes"]:
        path = node["path"].replace("<encoded-user1>", sanitize(USER1)).replace("<encoded-user2>", sanitize(USER2))
        raw_set(store, path, node["data"])
    return samples


KIP55_STATE = {
    E({"user": None}): {"producer_byte_rate": 10000.0, "consumer_byte_rate": 20000.0},
    E({"user": USER1}): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
    E({"user": USER2}): {"producer_byte_rate": 4096.0, "consumer_byte_rate": 8192.0},
    E({"user": USER2, "client-id": "clientA"}): {"producer_byte_rate": 10.0, "consumer_byte_rate": 30.0},
    E({"user": USER2, "client-id": "clientB"}): {"producer_byte_rate": 20.0, "consumer_byte_rate": 40.0},
    E({"client-id": "clientA"}): {"producer_byte_rate": 100.0, "consumer_byte_rate": 200.0},
}


def test_reads_the_kip55_sample_tree(zk):
    load_kip55_tree(zk)
    assert zk.describe() == KIP55_STATE
    # ... and it drives a QuotaManager as KIP-55's walk-through says
    qm = QuotaManager()
    with QuotaConfigWatcher(zk, qm):
        assert qm.quota_limit("PRODUCE", USER1, "any") == 1024.0
        assert qm.quota_limit("PRODUCE", USER2, "clientA") == 10.0
        assert qm.quota_limit("PRODUCE", USER2, "clientC") == 4096.0
        assert qm.quota_limit("FETCH", "user3", "clientA") == 20000.0


def test_kip55_change_notifications_are_followed(zk):
    samples = json.load(open(SAMPLES))
    seen = set()
    got = threading.Event()

    def on_change(entities):
        seen.update(entities or ())
        if len(seen) >= 5:
            got.set()

    w = zk.watch(on_change)
    try:
        for note in samples["change_notifications"]:
            zk._zk.create(zk.root + "/config/changes/config_change_", note["data"].encode(), sequence=True)
        assert got.wait(WAIT)
    finally:
        w.stop()
    assert seen == {E({"user": None}), E({"user": "user1"}), E({"user": "user2", "client-id": "clientA"}),
                    E({"client-id": None}), E({"client-id": "clientA"})}


def test_writes_kafkas_exact_layout(zk):
    zk.alter([
        ({"user": USER1}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
        ({"user": USER2, "client-id": "client A"}, {"producer_byte_rate": 10}),
        ({"user": None, "client-id": None}, {"request_percentage": 12.5}),
        ({"client-id": None}, {"producer_byte_rate": 5}),
        ({"user": "<default>"}, {"producer_byte_rate": 6}),
    ])
    assert raw_get(zk, "/config/users/user1") == {"version": 1, "config": {"producer_byte_rate": "1024",
                                                                          "consumer_byte_rate": "2048"}}
    u2 = sanitize(USER2)
    assert u2 == "CN%3Duser2%2CO%3DExample%20Corp"
    assert raw_get(zk, f"/config/users/{u2}/clients/client%20A") == {"version": 1, "config": {"producer_byte_rate": "10"}}
    assert raw_get(zk, f"/config/users/{u2}") is None  # a parent created on the way has no data, as in Kafka
    assert raw_get(zk, "/config/users/<default>/clients/<default>") == {"version": 1, "config": {"request_percentage": "12.5"}}
    assert raw_get(zk, "/config/clients/<default>") == {"version": 1, "config": {"producer_byte_rate": "5"}}
    assert raw_get(zk, "/config/users/%3Cdefault%3E") == {"version": 1, "config": {"producer_byte_rate": "6"}}
    names, docs = notifications(zk)
    assert all(n.startswith("config_change_") and len(n) == len("config_change_") + 10 for n in names)
    assert docs == [
        {"version": 2, "entity_path": "users/user1"},
        {"version": 2, "entity_path": f"users/{u2}/clients/client%20A"},
        {"version": 2, "entity_path": "users/<default>/clients/<default>"},
        {"version": 2, "entity_path": "clients/<default>"},
        {"version": 2, "entity_path": "users/%3Cdefault%3E"},
    ]
    # Compact JSON, as Kafka's Json.encodeAsBytes
    assert zk._zk.get(zk.root + "/config/users/user1")[0] == \
        b'{"version":1,"config":{"producer_byte_rate":"1024","consumer_byte_rate":"2048"}}'


def test_empty_nodes_are_cleaned_as_kafka_does(zk):
    zk.alter([({"user": "u", "client-id": "c"}, {"producer_byte_rate": 1})])
    zk.alter([({"user": "u", "client-id": "c"}, {"producer_byte_rate": None})])
    # leaf, emptied clients container and the data-less user node all go
    assert not exists(zk, "/config/users/u")
    zk.alter([({"user": "u"}, {"producer_byte_rate": 1}), ({"user": "u", "client-id": "c"}, {"producer_byte_rate": 1}),
              ({"user": "u", "client-id": "d"}, {"producer_byte_rate": 1})])
    zk.alter([({"user": "u", "client-id": "c"}, {"producer_byte_rate": None})])
    assert not exists(zk, "/config/users/u/clients/c") and exists(zk, "/config/users/u/clients/d")
    zk.alter([({"user": "u", "client-id": "d"}, {"producer_byte_rate": None})])
    assert not exists(zk, "/config/users/u/clients")
    assert raw_get(zk, "/config/users/u") == {"version": 1, "config": {"producer_byte_rate": "1"}}  # has config: stays
    zk.alter([({"user": "u", "client-id": "c"}, {"producer_byte_rate": 1})])
    zk.alter([({"user": "u"}, {"producer_byte_rate": None})])
    # no config left but a child: the node stays with an empty config
    assert raw_get(zk, "/config/users/u") == {"version": 1, "config": {}}
    zk.alter([({"client-id": "x"}, {"producer_byte_rate": 1})])
    zk.alter([({"client-id": "x"}, {"producer_byte_rate": None})])
    assert not exists(zk, "/config/clients/x")
    assert zk.describe() == {E({"user": "u", "client-id": "c"}): {"producer_byte_rate": 1.0}}


def test_keys_kquota_does_not_own_are_kept(zk):
    raw_set(zk, "/config/users/alice", json.dumps(
        {"version": 1, "config": {"SCRAM-SHA-256": "salt=abc,stored_key=def,server_key=ghi,iterations=4096",
                                  "producer_byte_rate": "1024"}}))
    assert zk.describe() == {E({"user": "alice"}): {"producer_byte_rate": 1024.0}}
    zk.alter([({"user": "alice"}, {"producer_byte_rate": None, "consumer_byte_rate": 7})])
    assert raw_get(zk, "/config/users/alice")["config"] == {
        "SCRAM-SHA-256": "salt=abc,stored_key=def,server_key=ghi,iterations=4096", "consumer_byte_rate": "7"}
    zk.alter([({"user": "alice"}, {"consumer_byte_rate": None})])
    assert exists(zk, "/config/users/alice")  # the credential is still there
    assert zk.describe() == {}


def test_topic_and_broker_notifications_are_ignored(zk):
    seen = []
    w = zk.watch(seen.append)
    try:
        for doc in ({"version": 2, "entity_path": "topics/t1"}, {"version": 2, "entity_path": "brokers/<default>"},
                    {"version": 1, "entity_type": "topics", "entity_name": "t1"},
                    {"version": 1, "entity_type": "clients", "entity_name": "old-style"}):
            zk._zk.create(zk.root + "/config/changes/config_change_", json.dumps(doc).encode(), sequence=True)
        wait_until(lambda: seen, WAIT, 0.02)
    finally:
        w.stop()
    assert seen and set().union(*seen) == {E({"client-id": "old-style"})}


def test_corrupt_nodes_are_reported_and_skipped_without_stopping_the_watcher(zk):
    zk.alter([({"user": "good"}, {"producer_byte_rate": 1})])
    raw_set(zk, "/config/users/bad-json", b'{"version":1,"config":{')
    raw_set(zk, "/config/users/bad-value", json.dumps({"version": 1, "config": {"producer_byte_rate": "lots"}}))
    raw_set(zk, "/config/clients/bad-rate", json.dumps({"version": 1, "config": {"producer_byte_rate": "1.5"}}))
    raw_set(zk, "/config/users/bad%ZZname", json.dumps({"version": 1, "config": {"producer_byte_rate": "1"}}))
    errors = []
    assert zk.describe(on_error=lambda m, e: errors.append(m)) == {E({"user": "good"}): {"producer_byte_rate": 1.0}}
    assert len(errors) == 4
    for rel in ("/config/users/bad-json", "/config/users/bad-value", "/config/clients/bad-rate", "/config/users/bad%ZZname"):
        assert any(zk.root + rel + ":" in m for m in errors), (rel, errors)
    qm = QuotaManager()
    watcher_errors = []
    with QuotaConfigWatcher(zk, qm, on_error=watcher_errors.append) as w:
        assert qm.describe_client_quotas() == {E({"user": "good"}): {"producer_byte_rate": 1.0}}
        assert len(watcher_errors) == 4
        n = w.applied_count
        # a corrupt notification and a corrupt node change, then a good change: the good one lands
        zk._zk.create(zk.root + "/config/changes/config_change_", b"not json", sequence=True)
        raw_set(zk, "/config/users/bad-json", b"\xff\xfe")
        zk._zk.create(zk.root + "/config/changes/config_change_",
                      b'{"version":2,"entity_path":"users/bad-json"}', sequence=True)
        zk.alter([({"user": "good"}, {"producer_byte_rate": 2})])
        assert w.wait_applied(n + 1, WAIT)
        wait_until(lambda: qm.describe_client_quotas() == {E({"user": "good"}): {"producer_byte_rate": 2.0}}, WAIT, 0.02)
        assert qm.describe_client_quotas() == {E({"user": "good"}): {"producer_byte_rate": 2.0}}
        assert any("config_change_" in m and "not valid JSON" in m for m in watcher_errors), watcher_errors
        assert any(zk.root + "/config/users/bad-json" in m for m in watcher_errors[4:]), watcher_errors


def test_alter_too_large_for_one_transaction_writes_nothing(zk):
    zk.alter([({"user": "keep"}, {"producer_byte_rate": 1})])
    before_nodes = notifications(zk)[0]
    with pytest.raises(ConfigStoreError, match="split it"):
        zk.alter([({"client-id": f"client-{i:06d}"}, {"producer_byte_rate": i + 1}) for i in range(5000)])
    assert zk.describe() == {E({"user": "keep"}): {"producer_byte_rate": 1.0}}
    assert notifications(zk)[0] == before_nodes
    small = open_store(zk.url, max_transaction_bytes=2000)
    try:
        with pytest.raises(ConfigStoreError, match="2000-byte limit"):
            small.alter([({"client-id": f"c{i}"}, {"producer_byte_rate": 1}) for i in range(20)])
    finally:
        small.close()


def test_unreachable_zookeeper_names_the_url():
    with pytest.raises(ConfigStoreError, match=r"zookeeper://127\.0\.0\.1:1/x"):
        open_store("zookeeper://127.0.0.1:1/x", timeout=1)


WRITER = textwrap.dedent("""
    import sys
    from kquota.stores import open_store
    s = open_store(sys.argv[1])
    n = int(sys.argv[2])
    entries = [({"client-id": f"client-{i:05d}"}, {"producer_byte_rate": i + 1}) for i in range(n)]
    print("ready", flush=True)
    sys.stdin.readline()
    s.alter(entries)
    print("done", flush=True)
""")


def test_kill_9_mid_alter_leaves_old_or_new_state(zk):
    zk.alter([({"client-id": "client-00000"}, {"producer_byte_rate": 999}), ({"user": "keep"}, {"producer_byte_rate": 5})])
    old = zk.describe()
    n = 2500
    new = dict(old)
    new.update({E({"client-id": f"client-{i:05d}"}): {"producer_byte_rate": float(i + 1)} for i in range(n)})
    for delay in (0.0, 0.05, 0.15, 0.3):
        p = subprocess.Popen([sys.executable, "-c", WRITER, zk.url, str(n)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        p.stdin.write("go\n")
        p.stdin.flush()
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        state = zk.describe()
        assert state == old or state == new, f"mixed state after a kill at {delay} s: {len(state)} entities"
        if state == new:
            break


def test_old_change_notifications_are_purged(zk, monkeypatch):
    from kquota.stores.zookeeper import notifications as zkmod

    for i in range(5):
        zk.alter([({"user": f"u{i}"}, {"producer_byte_rate": 1})])
    assert len(notifications(zk)[0]) == 5  # young: kept
    monkeypatch.setattr(zkmod, "CHANGE_EXPIRATION_MS", -60_000)  # everything counts as expired
    zk._next_purge = 0.0
    zk.alter([({"user": "last"}, {"producer_byte_rate": 1})])
    assert notifications(zk)[0] == []
    assert len(zk.describe()) == 6
