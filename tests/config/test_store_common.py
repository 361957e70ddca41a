"""The ConfigStore contract, for every store (SQLite always; ZooKeeper with a live server; Kafka on
Apache Kafka's broker)."""

import math
import threading

import pytest

from kquota import ClientQuotaEntity, QuotaConfigError, QuotaManager
from kquota.stores import ConfigStoreError, open_store

pytestmark = pytest.mark.process

E = ClientQuotaEntity


def test_alter_and_describe_round_trip(store):
    store.alter([
        ({"user": "alice"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
        ({"user": None, "client-id": None}, {"consumer_byte_rate": 2048}),
        ({"user": "user 2", "client-id": "clientA"}, {"producer_byte_rate": 10}),
        ({"client-id": None}, {"request_percentage": 50.5}),
        ({"user": "<default>"}, {"controller_mutation_rate": 12.25}),
        ({"client-id": "x/y"}, {"producer_byte_rate": 2**62}),
    ])
    assert store.describe() == {
        E({"user": "alice"}): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        E({"user": None, "client-id": None}): {"consumer_byte_rate": 2048.0},
        E({"user": "user 2", "client-id": "clientA"}): {"producer_byte_rate": 10.0},
        E({"client-id": None}): {"request_percentage": 50.5},
        E({"user": "<default>"}): {"controller_mutation_rate": 12.25},
        E({"client-id": "x/y"}): {"producer_byte_rate": float(2**62)},
    }
    only = store.describe([E({"user": "alice"}), E({"user": "nobody"})])
    assert only == {E({"user": "alice"}): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}}


def test_removal_and_update(store):
    store.alter([({"user": "a"}, {"producer_byte_rate": 1, "consumer_byte_rate": 2}),
                 ({"user": "a", "client-id": "c"}, {"producer_byte_rate": 3})])
    store.alter([({"user": "a"}, {"producer_byte_rate": None, "consumer_byte_rate": 5}),
                 ({"user": "b"}, {"producer_byte_rate": None})])  # removing an unset key: no-op
    assert store.describe() == {E({"user": "a"}): {"consumer_byte_rate": 5.0},
                                E({"user": "a", "client-id": "c"}): {"producer_byte_rate": 3.0}}
    store.alter([({"user": "a"}, {"consumer_byte_rate": None})])
    assert store.describe() == {E({"user": "a", "client-id": "c"}): {"producer_byte_rate": 3.0}}
    store.alter([({"user": "a", "client-id": "c"}, {"producer_byte_rate": None})])
    assert store.describe() == {}


def test_kafka_tolerance_values_are_kept_exactly(store):
    store.alter([({"user": "a"}, {"producer_byte_rate": 1235.0000001})])
    assert store.describe()[E({"user": "a"})]["producer_byte_rate"] == 1235.0000001


@pytest.mark.parametrize(
    "entries",
    [
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": "bad"}, {"producer_byte_rate": 1.5})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": "bad"}, {"no_such_key": 1})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": ""}, {"producer_byte_rate": 1})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"group": "t"}, {"producer_byte_rate": 1})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"topic": "a/b"}, {"producer_byte_rate": 1})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"topic": "t"}, {"request_percentage": 1})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": "x"}, {"consumer_byte_rate": math.nan})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": "x"}, {"consumer_byte_rate": True})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": "x"}, {"request_percentage": 5000})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": "ok"}, {"consumer_byte_rate": 1})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": "x"}, {"consumer_byte_rate": -1})],
        [({"user": "ok"}, {"producer_byte_rate": 1}), ({"user": "x"}, {"consumer_byte_rate": "10"})],
    ],
)
def test_bad_alter_changes_nothing(store, entries):
    store.alter([({"client-id": "before"}, {"producer_byte_rate": 7})])
    before = store.describe()
    with pytest.raises(QuotaConfigError):
        store.alter(entries)
    assert store.describe() == before


def test_two_handles_see_each_others_writes(store):
    other = open_store(store.url)
    try:
        store.alter([({"user": "a"}, {"producer_byte_rate": 1})])
        assert other.describe() == {E({"user": "a"}): {"producer_byte_rate": 1.0}}
        other.alter([({"user": "a"}, {"producer_byte_rate": 2})])
        assert store.describe() == {E({"user": "a"}): {"producer_byte_rate": 2.0}}
    finally:
        other.close()


def test_concurrent_alters_lose_nothing(store):
    # Several writers (own connections) each set their own entity many times.
    def writer(i):
        s = open_store(store.url)
        try:
            for n in range(1, 16):
                s.alter([({"user": f"u{i}"}, {"producer_byte_rate": n}),
                         ({"user": "shared", "client-id": f"c{i}"}, {"consumer_byte_rate": n})])
        finally:
            s.close()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state = store.describe()
    for i in range(4):
        assert state[E({"user": f"u{i}"})] == {"producer_byte_rate": 15.0}
        assert state[E({"user": "shared", "client-id": f"c{i}"})] == {"consumer_byte_rate": 15.0}


def test_watch_reports_changed_entities(store):
    seen = []
    got = threading.Event()

    def on_change(entities):
        seen.append(entities)
        if entities is None or entities:  # an empty set is a heartbeat: nothing changed
            got.set()

    w = store.watch(on_change)
    try:
        store.alter([({"user": "a"}, {"producer_byte_rate": 1}), ({"client-id": None}, {"producer_byte_rate": 2})])
        assert got.wait(20)
        changed = set()
        for entities in seen:
            changed |= set(entities or ())
        assert {E({"user": "a"}), E({"client-id": None})} <= changed
    finally:
        w.stop()


def test_store_state_applies_to_a_manager(store):
    store.alter([({"user": "a"}, {"producer_byte_rate": 1024})])
    qm = QuotaManager()
    qm.alter_client_quotas(list(store.describe().items()))
    assert qm.quota_limit("PRODUCE", "a", "x") == 1024.0


def test_closed_store_errors(store):
    store.close()
    with pytest.raises(ConfigStoreError):
        store.describe()
