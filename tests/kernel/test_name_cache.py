"""The named-call cache (rust/kquota-py/src/name_cache.rs): keyed on the str objects' cached
hashes, answered by identity or by equality, invalidated by alters and expiry, bounded.

Each scenario drives three managers with the same calls: one always passes the *same* str
objects (identity hits), one passes *equal but distinct* str objects on every call (equality
hits), and one passes str *subclass* instances, which the cache never takes (the slow path of
every call). All three must return the same throttle on every call."""

import random

import pytest

import kquota
from kquota import ClientQuotaType as T

P = T.PRODUCE


class Name(str):
    """Never cached (only exact str objects are): the reference slow path."""


def fresh_copy(s: str) -> str:
    """An equal str that is a different object (CPython shares "" and one-character strings,
    so those come back as they are)."""
    if len(s) <= 1:
        return s
    out = "".join([s[:1], s[1:]])
    assert out == s and out is not s
    return out


class Trio:
    """Three managers, one per way of passing names."""

    def __init__(self, **kwargs):
        self.same = kquota.QuotaManager(**kwargs)
        self.distinct = kquota.QuotaManager(**kwargs)
        self.slow = kquota.QuotaManager(**kwargs)
        self.all = (self.same, self.distinct, self.slow)

    def alter(self, entries):
        for qm in self.all:
            qm.alter_client_quotas(entries)

    def expire(self, now):
        removed = [qm.expire_sensors(now_ms=now) for qm in self.all]
        assert removed[0] == removed[1] == removed[2]
        return removed[0]

    def call(self, method, user, client, *args):
        a = getattr(self.same, method)(*self._types(method), user, client, *args)
        b = getattr(self.distinct, method)(*self._types(method), fresh_copy(user), fresh_copy(client), *args)
        c = getattr(self.slow, method)(*self._types(method), Name(user), Name(client), *args)
        assert a == b == c, (method, user, client, args, a, b, c)
        return a

    @staticmethod
    def _types(method):
        return (P,) if method == "record_and_get_throttle_time_ms" else ()

    def close(self):
        for qm in self.all:
            qm.close()


@pytest.fixture
def trio():
    t = Trio(sensor_expiry_seconds=5.0, expiry_interval_seconds=None)
    yield t
    t.close()


USERS = [f"user-{i}" for i in range(120)] + ["ユーザー", "a b", "x" * 200]
CLIENTS = [f"client-{i}" for i in range(3)] + [""]
ALTERS = [
    [({"user": None}, {"producer_byte_rate": 4000, "request_percentage": 50, "controller_mutation_rate": 5})],
    [({"user": "user-3"}, {"producer_byte_rate": 200})],
    [({"client-id": None}, {"producer_byte_rate": 900, "request_percentage": 20})],
    [({"user": "user-5", "client-id": "client-1"}, {"producer_byte_rate": 50, "controller_mutation_rate": 1})],
    [({"user": None}, {"producer_byte_rate": None})],
    [({"user": "user-3"}, {"producer_byte_rate": 10_000}), ({"client-id": None}, {"request_percentage": None})],
]


def _round(trio, rng, now, calls=600):
    for _ in range(calls):
        now += rng.randint(0, 15)
        u, c = rng.choice(USERS), rng.choice(CLIENTS)
        kind = rng.random()
        if kind < 0.6:
            trio.call("record_and_get_throttle_time_ms", u, c, rng.randint(0, 3000), now)
        elif kind < 0.85:
            trio.call("record_request_time", u, c, rng.randint(0, 40_000_000), now)
        else:
            trio.call("record_controller_mutations", u, c, rng.randint(0, 3), now)
    return now


def test_same_throttle_for_identical_equal_and_uncached_names_across_alters_and_expiry(trio):
    rng = random.Random(16)
    now = 1_000
    for entries in ALTERS:
        trio.alter(entries)
        now = _round(trio, rng, now)
        # Idle past the expiry: every sensor goes, and the cached resolutions with them.
        now += 6_000
        assert trio.expire(now) > 0
        now = _round(trio, rng, now)
    # The cache answered (identity and equality both), and the subclass path never did.
    same, distinct, slow = (qm._name_cache_info() for qm in trio.all)
    assert same["hits"] > 1000 and distinct["hits"] > 1000
    assert slow["hits"] == 0 and slow["entries"] == 0
    # More names than the first table: it grew, and stays within its capacity.
    assert 64 < same["entries"] <= same["capacity"]


def test_a_cached_name_follows_an_alter_immediately(trio):
    user, client = "bob", "app"
    trio.alter([({"user": None}, {"producer_byte_rate": 1000})])
    for _ in range(3):
        assert trio.call("record_and_get_throttle_time_ms", user, client, 100, 0) == 0
    # A tighter quota of a new level: new tags and a new sensor on the very next call.
    trio.alter([({"user": "bob", "client-id": "app"}, {"producer_byte_rate": 10})])
    assert trio.call("record_and_get_throttle_time_ms", user, client, 100, 0) == 0
    assert trio.call("record_and_get_throttle_time_ms", user, client, 100, 0) == 10_000
    # The limit alone changes: same tags, same sensor, new bound.
    trio.alter([({"user": "bob", "client-id": "app"}, {"producer_byte_rate": 15})])
    # 200 B over W = 10 s is 20 B/s against 15: (20 - 15) / 15 * 10 s.
    assert trio.call("record_and_get_throttle_time_ms", user, client, 0, 0) == 3_333


def test_a_cached_name_after_expiry_records_into_a_fresh_sensor(trio):
    trio.alter([({"user": None}, {"producer_byte_rate": 1000})])
    for _ in range(5):
        trio.call("record_and_get_throttle_time_ms", "carol", "c", 6000, 0)
    assert trio.call("record_and_get_throttle_time_ms", "carol", "c", 0, 0) > 0
    assert trio.expire(10_000) == 1
    assert all(qm.sensor_count(P) == 0 for qm in trio.all)
    # The old sensor's 30,000 B are gone with it: a fresh window admits this.
    assert trio.call("record_and_get_throttle_time_ms", "carol", "c", 100, 10_000) == 0
    assert all(qm.measured_rate(P, "carol", "c", now_ms=10_000) == 10.0 for qm in trio.all)


def test_the_cache_is_bounded_and_keeps_no_evicted_name_alive():
    import sys

    # The cache holds at most twice the sensor cap (in whole sets of four).
    qm = kquota.QuotaManager(max_sensors=1000, expiry_interval_seconds=None)
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 1e9})])
    first = fresh_copy("first-user")
    base = sys.getrefcount(first)
    qm.record_and_get_throttle_time_ms(P, first, "c", 1, 0)
    assert sys.getrefcount(first) == base + 1  # held by the cache
    # Far more (user, client) pairs than the cache holds.
    for i in range(100_000):
        qm.record_and_get_throttle_time_ms(P, f"u{i}", "c", 1, 0)
    info = qm._name_cache_info()
    assert info["capacity"] <= 2048 and info["entries"] <= info["capacity"]
    # Evicted entries released their strings at once.
    assert sys.getrefcount(first) == base
    qm.close()


def test_a_callback_that_calls_back_into_the_kernel_takes_the_slow_path():
    """The cache's lookup closure may run a Python callback; a named call made from inside it
    must not touch the table the outer call is reading."""

    class Reentrant(kquota.ClientQuotaCallback):
        qm = None

        def quota_metric_tags(self, quota_type, principal, client_id):
            return {"user": principal.name, "client-id": ""}

        def quota_limit(self, quota_type, metric_tags):
            if self.qm is not None and metric_tags["user"] != "inner":
                for i in range(200):  # enough puts to grow the table under the outer lookup
                    self.qm.record_and_get_throttle_time_ms(P, "inner", f"c{i}", 1, 0)
            return 1000.0

    cb = Reentrant()
    qm = kquota.QuotaManager(callback=cb, expiry_interval_seconds=None)
    user, client = "outer", "c"
    assert qm.record_and_get_throttle_time_ms(P, user, client, 100, 0) == 0
    cb.qm = qm
    for v in range(3):
        qm._invalidate([P], tags=False)  # the next call asks quota_limit again, inside the lookup
        assert qm.record_and_get_throttle_time_ms(P, user, client, 100, 0) == 0
    assert qm.measured_rate(P, user, client, now_ms=0) == 40.0
    assert qm._name_cache_info()["hits"] >= 3
    qm.close()


def test_same_throttle_when_names_outnumber_the_cache_across_alters_and_expiry():
    """A cache far smaller than the live names (max_sensors=40: room for 128 entries, names
    beyond the sensor cap share overflow sensors): entries are replaced, swept out after alters
    and expiry, and regrown, and every call still answers exactly as the uncached path."""
    trio = Trio(max_sensors=40, sensor_expiry_seconds=5.0, expiry_interval_seconds=None)
    try:
        rng = random.Random(1616)
        now = 1_000
        for entries in ALTERS:
            trio.alter(entries)
            now = _round(trio, rng, now, calls=1_500)
            now += 6_000
            trio.expire(now)
            now = _round(trio, rng, now, calls=500)
        same, distinct, slow = (qm._name_cache_info() for qm in trio.all)
        assert same["capacity"] == distinct["capacity"] == 128
        assert same["hits"] > 0 and distinct["hits"] > 0 and slow["hits"] == 0
    finally:
        trio.close()


def test_every_live_name_is_cached_below_the_cap():
    """With fewer live names than the cache holds, each of them is answered from the cache on
    its next call: none is left to the slow path for lack of a place (two candidate buckets,
    growth when both are full)."""
    qm = kquota.QuotaManager(max_sensors=5_000, expiry_interval_seconds=None)
    try:
        qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 1e9})])
        names = [(f"user-{i}", f"client-{i}") for i in range(5_000)]
        for u, c in names:
            qm.record_and_get_throttle_time_ms(P, u, c, 1, 0)
        before = qm._name_cache_info()
        assert before["entries"] == len(names)
        for u, c in names:
            qm.record_and_get_throttle_time_ms(P, u, c, 1, 0)
        assert qm._name_cache_info()["hits"] - before["hits"] == len(names)
        # An alter makes every entry stale: each name resolves once more, then hits again.
        qm.alter_client_quotas([({"user": "user-7"}, {"producer_byte_rate": 5})])
        for u, c in names:
            qm.record_and_get_throttle_time_ms(P, u, c, 1, 0)
        mid = qm._name_cache_info()
        for u, c in names:
            qm.record_and_get_throttle_time_ms(P, u, c, 1, 0)
        after = qm._name_cache_info()
        assert after["hits"] - mid["hits"] == len(names)
        assert after["entries"] == len(names) <= after["capacity"]
        assert qm.record_and_get_throttle_time_ms(P, "user-7", "client-7", 100, 0) > 0
    finally:
        qm.close()
