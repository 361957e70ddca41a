"""The hand-written per-request entry points: argument binding, the str-identity cache of named
calls, names that are not plain ASCII, and agreement with the oracle under cache pressure."""

import inspect
import random

import pytest

import kquota
from oracle import OracleQuotaManager

P = kquota.ClientQuotaType.PRODUCE
F = kquota.ClientQuotaType.FETCH


def fresh(**quota):
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 1000, "consumer_byte_rate": 1000})])
    return qm


def test_signatures_are_the_contract():
    qm = fresh()
    named = inspect.signature(kquota.QuotaManager.record_and_get_throttle_time_ms)
    assert list(named.parameters) == ["self", "quota_type", "user", "client_id", "value", "now_ms"]
    assert named.parameters["now_ms"].default is None
    handle = inspect.signature(qm.client("u", "c").record_and_get_throttle_time_ms)
    assert list(handle.parameters) == ["quota_type", "value", "now_ms"]


@pytest.mark.parametrize("call", [
    lambda qm: qm.record_and_get_throttle_time_ms(P, "alice", "c", 5000, 0),
    lambda qm: qm.record_and_get_throttle_time_ms(quota_type=P, user="alice", client_id="c", value=5000, now_ms=0),
    lambda qm: qm.record_and_get_throttle_time_ms(P, "alice", client_id="c", now_ms=0, value=5000),
    lambda qm: qm.client("alice", "c").record_and_get_throttle_time_ms(P, 5000, 0),
    lambda qm: qm.client("alice", "c").record_and_get_throttle_time_ms(value=5000, quota_type=P, now_ms=0),
    lambda qm: qm.record_and_get_throttle_time_ms("produce", "alice", "c", 5000.0, 0),
])
def test_every_way_of_passing_arguments_gives_the_same_answer(call):
    # 5000 B + 12000 B already recorded over W = 10 s against 1000 B/s.
    qm = fresh()
    qm.record_no_throttle(P, "alice", "c", 12000, now_ms=0)
    assert call(qm) == 7000


@pytest.mark.parametrize("args, kwargs, message", [
    ((P, "u", "c"), {}, "missing required argument 'value'"),
    ((P, "u", "c", 1, 0, 7), {}, "at most 5 positional"),
    ((P, "u", "c", 1), {"now": 0}, "unexpected keyword argument 'now'"),
    ((P, "u", "c", 1), {"user": "x"}, "multiple values for argument 'user'"),
    ((P, 5, "c", 1), {}, "argument 'user': must be str, not int"),
    ((P, "u", None, 1), {}, "argument 'client_id': must be str, not NoneType"),
    ((P, "u", "c", "1"), {}, "must be a real number"),
    ((P, "u", "c", 1, 1.5), {}, "now_ms"),
    ((42, "u", "c", 1), {}, "quota_type"),
])
def test_bad_arguments_raise_type_errors(args, kwargs, message):
    qm = fresh()
    with pytest.raises(TypeError, match=message):
        qm.record_and_get_throttle_time_ms(*args, **kwargs)


def test_equal_names_in_different_str_objects_share_one_sensor():
    qm = fresh()
    a1 = "".join(["al", "ice"])
    a2 = "".join(["ali", "ce"])
    assert a1 == a2 and a1 is not a2
    qm.record_no_throttle(P, a1, "c", 6000, now_ms=0)
    # The second object finds the first object's sensor: 6000 + 6000 over 10 s = 1200 B/s.
    assert qm.record_and_get_throttle_time_ms(P, a2, "c", 6000, now_ms=0) == 2000


def test_cached_named_calls_follow_configuration_changes():
    qm = fresh()
    user, client = "bob", "app"
    for _ in range(3):  # warm the identity cache
        assert qm.record_and_get_throttle_time_ms(P, user, client, 1000, now_ms=0) == 0
    assert qm.quota_metric_tags(P, user, client) == {"user": "bob", "client-id": ""}
    # A <user, client-id> quota: new tags, a fresh sensor, a lower limit.
    qm.alter_client_quotas([({"user": "bob", "client-id": "app"}, {"producer_byte_rate": 10})])
    assert qm.record_and_get_throttle_time_ms(P, user, client, 100, now_ms=0) == 0
    assert qm.record_and_get_throttle_time_ms(P, user, client, 100, now_ms=0) == 10000
    # Remove it and set users/bob. Kinds are mixed now, so the walk
    # runs and level 3 (users/bob) answers: tags (bob, ""), whose sensor still holds 3000 B.
    qm.alter_client_quotas([({"user": "bob", "client-id": "app"}, {"producer_byte_rate": None})])
    qm.alter_client_quotas([({"user": "bob"}, {"producer_byte_rate": 100})])
    assert qm.quota_metric_tags(P, user, client) == {"user": "bob", "client-id": ""}
    assert qm.record_and_get_throttle_time_ms(P, user, client, 0, now_ms=0) == 20000


def test_str_subclasses_and_unicode_names_work():
    class Name(str):
        pass

    qm = fresh()
    qm.record_no_throttle(P, Name("ユーザー"), Name("c"), 6000, now_ms=0)
    assert qm.measured_rate(P, "ユーザー", "c", now_ms=0) == 600.0
    assert qm.quota_metric_tags(P, "ユーザー", "c")["user"] == "%E3%83%A6%E3%83%BC%E3%82%B6%E3%83%BC"


def test_a_lone_surrogate_is_encoded_as_java_does():
    qm = fresh()
    broken = "a\udcffb"
    assert qm.quota_metric_tags(P, broken, "c") == {"user": "a%3Fb", "client-id": ""}
    qm.record_no_throttle(P, broken, "c", 5000, now_ms=0)
    assert qm.client(broken, "c").measured_rate(P, now_ms=0) == 500.0
    assert qm.record_and_get_throttle_time_ms(P, "a?b", "c", 0, now_ms=0) == 0


def test_many_names_through_the_identity_cache_match_the_oracle():
    """More distinct (user, client) pairs than cache slots, in random order, with config changes
    between rounds: every throttle equals the oracle's."""
    rng = random.Random(7)
    users = [f"user-{i}" for i in range(40)]
    clients = [f"client-{i}" for i in range(5)]
    qm, oracle = kquota.QuotaManager(), OracleQuotaManager()
    now = 0
    for round_ in range(6):
        entity = rng.choice([{"user": None}, {"user": rng.choice(users)}, {"client-id": None},
                             {"user": rng.choice(users), "client-id": rng.choice(clients)}])
        ops = {"producer_byte_rate": rng.randint(100, 3000)}
        qm.alter_client_quotas([(entity, ops)])
        oracle.alter_client_quotas([(entity, ops)])
        for _ in range(400):
            now += rng.randint(0, 40)
            u, c, v = rng.choice(users), rng.choice(clients), rng.randint(0, 2000)
            want = oracle.record_and_get_throttle_time_ms("PRODUCE", u, c, v, now)
            assert qm.record_and_get_throttle_time_ms(P, u, c, v, now) == want, (round_, u, c, now)
