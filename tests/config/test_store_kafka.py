"""The Kafka store on Apache Kafka's broker: URLs and one-line errors, the topic it creates or
refuses, its records (KRaft's ClientQuotaRecord, one batch per alter), alters that followers
see whole (two writers at once, a writer killed mid-stream, followers starting mid-write, a log
compacted by Kafka's log cleaner), and a follower that loses the cluster (on tansu), keeps its
quotas and catches up."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from proxy_support import Tansu
from waiting import free_port, run_for, wait_until
from store_helpers import fresh_kafka_url, run_cli

from kquota import ClientQuotaEntity, QuotaManager
from kquota.stores import ConfigStoreError, open_store
from kquota.stores.kafka import ALTER_HEADER, COUNT_HEADER, KafkaConfigStore, fill_cluster, parse_url
from kquota.watcher import QuotaConfigWatcher

pytestmark = pytest.mark.process

confluent_kafka = pytest.importorskip("confluent_kafka")
E = ClientQuotaEntity
WAIT = 30  # seconds: a hang guard, not a timing assertion



def admin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.address})


def create_topic(broker, name, partitions=1, config=None):
    from confluent_kafka.admin import NewTopic

    client = admin(broker)
    for f in client.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        f.result(10)


def topic_config(broker, name):
    """The configs set on the topic itself (Kafka reports every default too)."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    client = admin(broker)  # kept alive until the result arrives
    futures = client.describe_configs([ConfigResource(ResourceType.TOPIC, name)])
    return {k: v.value for k, v in next(iter(futures.values())).result(10).items()
            if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def raw_records(broker, topic):
    """Every record of the topic's partition 0: (offset, key, value, headers)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": broker.address, "group.id": "raw", "enable.partition.eof": True,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []

    def at_end() -> bool:
        m = c.poll(0.2)
        if m is None or m.error():
            return m is not None and m.error().code() == KafkaError._PARTITION_EOF
        out.append((m.offset(), m.key(), m.value(), dict(m.headers() or [])))
        return False

    try:
        if wait_until(at_end, WAIT, 0):
            return out
    finally:
        c.close()
    raise AssertionError("no end of partition")


def produce_batch(broker, topic, records):
    """``records`` ((key, value, headers) each) in one flush, as the store writes an alter."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.address, "linger.ms": 60000, "message.timeout.ms": 61000,
                  "enable.idempotence": True})
    for key, value, headers in records:
        p.produce(topic, key=key, value=value, headers=list(headers.items()), partition=0)
    assert p.flush(10) == 0


# ---------------------------------------------------------------- URLs, errors, the topic


def test_url_forms():
    assert parse_url("kafka://127.0.0.1:9092/quotas") == ("127.0.0.1:9092", "quotas")
    assert parse_url("kafka://a:1,b:2/q.x_y-z") == ("a:1,b:2", "q.x_y-z")
    assert parse_url("kafka:///quotas") == (None, "quotas")
    for bad, why in [("kafka://127.0.0.1:9092", "no topic"), ("kafka://127.0.0.1:9092/", "no topic"),
                     ("kafka://h/q", "is not HOST:PORT"), ("kafka://h:99999/q", "is not HOST:PORT"),
                     ("kafka://h:1/a/b", "not a valid Kafka topic name"), ("kafka://h:1/..", "not a valid")]:
        with pytest.raises(ConfigStoreError, match=why):
            open_store(bad)
    with pytest.raises(ConfigStoreError, match=r"names no cluster: use kafka://HOST:PORT/quotas"):
        open_store("kafka:///quotas")
    assert fill_cluster("kafka:///quotas", "127.0.0.1:9092") == "kafka://127.0.0.1:9092/quotas"
    assert fill_cluster("kafka://h:1/quotas", "127.0.0.1:9092") == "kafka://h:1/quotas"
    assert fill_cluster("sqlite:///x.db", "127.0.0.1:9092") == "sqlite:///x.db"


def test_configs_cli_errors_are_one_line(broker):
    port = free_port()  # nothing listens there
    never = f"never-made-{uuid.uuid4().hex[:8]}"
    cases = [
        (["--store", "kafka:///quotas", "--describe"], "names no cluster"),
        (["--store", f"kafka://127.0.0.1:{port}/quotas", "--describe"], "cannot reach the Kafka store"),
        (["--store", f"kafka://{broker.address}/{never}", "--describe"], "does not exist (nothing was created)"),
    ]
    for args, message in cases:
        r = run_cli(*args, env_extra={"PYTHONWARNINGS": "ignore"})
        assert r.returncode == 1, r
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], r.stderr
        assert r.stdout == ""
    assert never not in admin(broker).list_topics(timeout=10).topics


def test_the_topic_is_created_compacted_with_one_partition(broker):
    url = fresh_kafka_url(broker)
    topic = parse_url(url)[1]
    with open_store(url) as store:
        store.alter([({"user": "a"}, {"producer_byte_rate": 1})])
    assert topic_config(broker, topic)["cleanup.policy"] == "compact"
    assert len(admin(broker).list_topics(timeout=10).topics[topic].partitions) == 1
    with open_store(url) as again:  # opening an existing store topic is fine
        assert again.describe() == {E({"user": "a"}): {"producer_byte_rate": 1.0}}


@pytest.mark.parametrize("partitions,config,message", [
    (1, {"cleanup.policy": "delete"}, "cleanup.policy=delete;"),
    (1, {"cleanup.policy": "compact,delete"}, "cleanup.policy=compact,delete;"),
    (1, {}, "cleanup.policy=delete;"),  # Kafka's default, which it reports
    (3, {"cleanup.policy": "compact"}, "has 3 partitions"),
])
def test_an_unfit_topic_is_refused_untouched(broker, partitions, config, message):
    topic = f"unfit-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, partitions, config)
    produce_batch(broker, topic, [(b"theirs", b"data", {})])
    for read_only in (False, True):
        with pytest.raises(ConfigStoreError, match=message):
            open_store(f"kafka://{broker.address}/{topic}", read_only=read_only)
    assert [r[1:3] for r in raw_records(broker, topic)] == [(b"theirs", b"data")]
    assert topic_config(broker, topic) == config


def test_records_mirror_client_quota_record_one_batch_per_alter(broker):
    url = fresh_kafka_url(broker)
    with open_store(url) as store:
        store.alter([({"user": "alice", "client-id": None}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
                     ({"client-id": "x/y"}, {"request_percentage": 50.5})])
        store.alter([({"user": "alice", "client-id": None}, {"producer_byte_rate": None})])
    records = raw_records(broker, parse_url(url)[1])
    assert [json.loads(r[1]) for r in records] == [
        {"entity": [{"entityType": "user", "entityName": "alice"}, {"entityType": "client-id", "entityName": None}],
         "key": "producer_byte_rate"},
        {"entity": [{"entityType": "user", "entityName": "alice"}, {"entityType": "client-id", "entityName": None}],
         "key": "consumer_byte_rate"},
        {"entity": [{"entityType": "client-id", "entityName": "x/y"}], "key": "request_percentage"},
        {"entity": [{"entityType": "user", "entityName": "alice"}, {"entityType": "client-id", "entityName": None}],
         "key": "producer_byte_rate"},
    ]
    assert records[0][1] == records[3][1]  # the same key bytes: compaction keeps the latest only
    assert [r[2] for r in records] == [b'{"value":1024.0}', b'{"value":2048.0}', b'{"value":50.5}', None]
    assert [r[0] for r in records] == [0, 1, 2, 3]
    first, second = {r[3][ALTER_HEADER] for r in records[:3]}, {records[3][3][ALTER_HEADER]}
    assert len(first) == 1 and first != second
    assert [r[3][COUNT_HEADER] for r in records] == [b"3", b"3", b"3", b"1"]


def test_an_alter_above_one_batch_is_refused_before_writing(broker):
    url = fresh_kafka_url(broker)
    with KafkaConfigStore(broker.address, parse_url(url)[1], max_alter_bytes=20_000) as store:
        big = [({"user": f"user-{i:05d}"}, {"producer_byte_rate": i + 1}) for i in range(200)]
        with pytest.raises(ConfigStoreError, match="split it into smaller alters"):
            store.alter(big)
        store.alter(big[:20])
        assert len(store.describe()) == 20
    assert len(raw_records(broker, parse_url(url)[1])) == 20


# ---------------------------------------------------------------- atomicity for followers


WRITER = textwrap.dedent("""
    import sys, time
    from kquota.stores import open_store
    url, base, entities, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    store = open_store(url)
    print("ready", flush=True)
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
        v = base + n
        store.alter([({"user": f"u{j}"}, {"producer_byte_rate": v, "consumer_byte_rate": v}) for j in range(entities)])
    store.close()
    print(n, flush=True)
""")


def whole(state, entities):
    """Whether ``state`` is the result of one whole alter: every entity, both keys, one value."""
    values = {v for config in state.values() for v in config.values()}
    return not state or (len(state) == entities and all(len(c) == 2 for c in state.values()) and len(values) == 1)


def test_followers_see_whole_alters_of_two_writers_one_killed(broker):
    url = fresh_kafka_url(broker)
    entities = 40
    open_store(url).close()  # the topic
    qm = QuotaManager(expiry_interval_seconds=None)
    mixed = []
    follower = open_store(url)
    watcher = QuotaConfigWatcher(
        follower, qm, on_applied=lambda _e: None if whole(qm.describe_client_quotas(), entities)
        else mixed.append(qm.describe_client_quotas())).start()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, url, str(base), str(entities), str(seconds)],
                                stdout=subprocess.PIPE, text=True)
               for base, seconds in ((1_000_000, 3.0), (2_000_000, 30.0))]
    late = []
    try:
        for w in writers:
            assert w.stdout.readline().strip() == "ready"
        def follow_once():  # a follower that starts while both write
            with open_store(url, read_only=True) as reader:
                state = reader.describe()
                late.append(state)
                assert whole(state, entities), state

        run_for(4, follow_once)
        writers[1].send_signal(signal.SIGKILL)  # mid-stream: it alters in a tight loop
        writers[1].wait(10)
        assert writers[0].wait(30) == 0
        alters = int(writers[0].stdout.read().split()[0])
        final = open_store(url, read_only=True)
        try:
            state = final.describe()
        finally:
            final.close()
        assert whole(state, entities)
        records = raw_records(broker, parse_url(url)[1])
        assert len(records) % (2 * entities) == 0  # the killed writer left no part of an alter
        assert wait_until(lambda: qm.describe_client_quotas() == state)
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait()
        watcher.stop()
        follower.close()
    assert alters > 5 and len(late) >= 3 and len({json.dumps(sorted(map(str, s.items()))) for s in late}) > 1
    # Each alter's records are contiguous: one writer's batch is never cut by the other's.
    ids = [r[3][ALTER_HEADER] for r in records]
    runs = [ids[i:i + 2 * entities] for i in range(0, len(ids), 2 * entities)]
    assert all(len(set(run)) == 1 for run in runs)
    assert not mixed, mixed[:1]


def test_a_compacted_log_is_published_only_where_it_is_whole(broker):
    # What compaction leaves of: X = {a: 1, b: 1}, Y = {a: 2, c: 2}, Z = {c: 3}: X's record for
    # b, Y's for a, Z's for c (the next test has Kafka's log cleaner leave just that). Followers
    # must never publish b=1 without a=2 (X alone never had it) nor a=2 without c (Y always had c).
    url = fresh_kafka_url(broker)
    topic = parse_url(url)[1]
    key = lambda user: json.dumps({"entity": [{"entityType": "user", "entityName": user}],  # noqa: E731
                                   "key": "producer_byte_rate"}, separators=(",", ":")).encode()
    compacted = [
        (key("b"), b'{"value":1.0}', {ALTER_HEADER: b"X", COUNT_HEADER: b"2"}),
        (key("a"), b'{"value":2.0}', {ALTER_HEADER: b"Y", COUNT_HEADER: b"2"}),
        (key("c"), b'{"value":3.0}', {ALTER_HEADER: b"Z", COUNT_HEADER: b"1"}),
    ]
    expected = {E({"user": "a"}): {"producer_byte_rate": 2.0}, E({"user": "b"}): {"producer_byte_rate": 1.0},
                E({"user": "c"}): {"producer_byte_rate": 3.0}}
    store = open_store(url)  # an empty store, followed while the compacted records arrive
    seen, states = [], []

    def on_change(entities):
        seen.append(entities)
        if entities is None or entities:
            states.append(store.describe())

    w = store.watch(on_change)
    try:
        produce_batch(broker, topic, compacted)
        assert wait_until(lambda: states and states[-1] == expected)
        assert [s for s in seen if s] == [] and None in seen  # one publication, at the end of the log
        assert all(s == expected for s in states)
    finally:
        w.stop()
        store.close()
    with open_store(url, read_only=True) as fresh:  # and from the start
        assert fresh.describe() == expected


def test_kafkas_log_cleaner_leaves_what_the_followers_expect(broker):
    """The store's alters X = {a: 1, b: 1}, Y = {a: 2, c: 2}, Z = {c: 3}, then W = {d: 4},
    compacted by Kafka's log cleaner: X's record for b, Y's for a, Z's for c and W's, each with
    its alter's headers (the previous test's log), and a follower starting on that log reads the
    latest state whole."""
    topic = f"kquota-test-{uuid.uuid4().hex[:12]}"
    # Segments roll after 100 ms and any dirty share is cleanable (the broker's cleaner looks
    # every second): the closed segments are compacted within seconds.
    create_topic(broker, topic, config={"cleanup.policy": "compact", "segment.ms": "100",
                                        "min.cleanable.dirty.ratio": "0.01"})
    url = f"kafka://{broker.address}/{topic}"
    alters = [{"a": 1, "b": 1}, {"a": 2, "c": 2}, {"c": 3}, {"d": 4}]  # W's alter closes Z's segment
    with open_store(url) as writer:
        for alter in alters:
            writer.alter([({"user": user}, {"producer_byte_rate": value}) for user, value in alter.items()])
            time.sleep(0.15)  # past segment.ms: the next alter starts a segment (the active one is never cleaned)

    def left():
        """(user, value, its alter's record count, its alter's id) of each record left."""
        return [(json.loads(r[1])["entity"][0]["entityName"], json.loads(r[2])["value"], r[3][COUNT_HEADER],
                 r[3][ALTER_HEADER]) for r in raw_records(broker, topic)]

    want = [("b", 1.0, b"2"), ("a", 2.0, b"2"), ("c", 3.0, b"1"), ("d", 4.0, b"1")]
    assert wait_until(lambda: [x[:3] for x in left()] == want, WAIT), left()  # compacted by Kafka
    assert len({x[3] for x in left()}) == 4  # four alters' records: X's, Y's, Z's, W's
    with open_store(url, read_only=True) as fresh:
        assert fresh.describe() == {E({"user": u}): {"producer_byte_rate": float(v)}
                                    for u, v in (("a", 2), ("b", 1), ("c", 3), ("d", 4))}


# ---------------------------------------------------------------- a follower that loses the cluster


class Relay:
    """A loopback TCP relay to the broker that can be cut (connections closed, port refused)
    and restored on the same port."""

    def __init__(self, port, upstream):
        self.port, self.upstream = port, upstream
        self.socks, self.lock = [], threading.Lock()
        self.listener = None
        self.restore()

    def restore(self):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener):
        while True:
            try:
                a, _ = listener.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:  # the broker is gone (the test is ending)
                a.close()
                continue
            with self.lock:
                self.socks += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.listener.close()
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def test_a_follower_that_loses_the_cluster_keeps_its_quotas_and_catches_up():
    """On tansu, which advertises the relay's port: Kafka's shared broker advertises its own, and
    the store's clients would go around the relay the test cuts."""
    relay_port = free_port()
    broker = Tansu(advertised_port=relay_port)  # every client reaches it through the relay
    relay = Relay(relay_port, broker.port)
    url = f"kafka://127.0.0.1:{relay_port}/quotas"
    writer, follower = open_store(url), open_store(url)
    qm = QuotaManager(expiry_interval_seconds=None)
    errors = []
    watcher = QuotaConfigWatcher(follower, qm, on_error=errors.append)

    def age():
        return {m.name: m.value for m in qm.metrics() if m.group == "ConfigWatcher"}["config-sync-age-seconds"]

    try:
        writer.alter([({"user": "alice"}, {"producer_byte_rate": 1000})])
        watcher.start()
        assert qm.quota_limit("PRODUCE", "alice", "c") == 1000
        time.sleep(3)  # the measured span: nothing changes for 3 s
        assert age() < 2.5  # yet the follower confirmed it is current
        relay.cut()
        assert wait_until(lambda: age() > 4), age()  # it says how stale it is
        assert qm.quota_limit("PRODUCE", "alice", "c") == 1000  # and kept the quota meanwhile
        assert wait_until(lambda: any("lost the Kafka cluster" in e for e in errors)), errors
        relay.restore()
        assert wait_until(lambda: _alter_ok(writer, [({"user": "alice"}, {"producer_byte_rate": 2000})]), interval=0.5)
        assert wait_until(lambda: qm.quota_limit("PRODUCE", "alice", "c") == 2000)
        assert wait_until(lambda: age() < 2.5)
    finally:
        watcher.stop()
        follower.close()
        writer.close()
        relay.cut()
        broker.stop()


def _alter_ok(store, entries):
    try:
        store.alter(entries)
        return True
    except ConfigStoreError:
        return False


def test_unreadable_records_are_reported_and_skipped(broker):
    url = fresh_kafka_url(broker)
    topic = parse_url(url)[1]
    with open_store(url) as store:
        store.alter([({"user": "ok"}, {"producer_byte_rate": 5}), ({"user": "bad"}, {"producer_byte_rate": 6})])
        bad_key = json.dumps({"entity": [{"entityType": "user", "entityName": "bad"}], "key": "producer_byte_rate"},
                             separators=(",", ":")).encode()
        produce_batch(broker, topic, [
            (b"not json", b"{}", {}),
            (bad_key, b'{"value":1.5}', {}),  # a byte rate must be whole
            (json.dumps({"entity": [{"entityType": "group", "entityName": "t"}], "key": "k"}).encode(), b"{}", {}),
        ])
        errors = []
        state = store.describe(on_error=lambda message, entity: errors.append((message, entity)))
        # The unreadable entity keeps no state here (a watcher keeps what it had); the rest is read.
        assert state == {E({"user": "ok"}): {"producer_byte_rate": 5.0}}
        assert len(errors) == 3 and all(url in m and "skipping the record at offset" in m for m, _ in errors)
        assert sorted(str(e) for _, e in errors if e is not None) == [str(E({"user": "bad"}))]
        store.alter([({"user": "bad"}, {"producer_byte_rate": 7})])  # a valid record for the key heals it
        errors.clear()
        assert store.describe([{"user": "bad"}], on_error=lambda m, e: errors.append(m)) == {
            E({"user": "bad"}): {"producer_byte_rate": 7.0}}
        assert errors == []
