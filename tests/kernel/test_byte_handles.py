"""Byte-rate quota semantics (PRODUCE / FETCH): sanitization, per-type quotas, client handles,
describe, and Kafka's own precedence test.

One case per rule of docs/semantics.md and docs/semantics-notes.md. Unless a test needs
a kquota-only API, every case runs against both the kquota kernel and the pure-Python oracle
(tests/support/oracle.py), and for both byte-rate quota types (the ``env`` fixture,
tests/support/byte_env.py).
"""


import pytest

from oracle import sanitize_user
from byte_env import CLIENT_DEFAULT, USER_DEFAULT, C, T, U
from byte_env import env  # noqa: F401 (fixture)


# ============================================================================ sanitization


@pytest.mark.parametrize("name,sanitized", [
    ("alice", "alice"),
    ("a.b-c_d", "a.b-c_d"),
    ("a b", "a%20b"),
    ("a*b", "a%2Ab"),
    ("a+b", "a%2Bb"),
    ("a~b", "a%7Eb"),
    ("José", "Jos%C3%A9"),
    ("日本", "%E6%97%A5%E6%9C%AC"),
    ("😀", "%F0%9F%98%80"),
    ("<default>", "%3Cdefault%3E"),
    ("CN=x,OU=y", "CN%3Dx%2COU%3Dy"),
    ("a%20b/c", "a%2520b%2Fc"),
    ("", ""),
])
def test_user_tag_is_sanitized(env, name, sanitized):
    assert sanitize_user(name) == sanitized
    qm = env.make()
    env.set(qm, USER_DEFAULT, 1000)
    assert env.tags(qm, name, C) == T(sanitized, "")
    qm2 = env.make()
    env.set(qm2, {"user": None, "client-id": None}, 1000)
    assert env.tags(qm2, name, C) == T(sanitized, C)


@pytest.mark.parametrize("name", ["a b", "José", "a*b", "a+b", "日本", "x~y"])
def test_configured_user_matches_the_raw_principal_name(env, name):
    qm = env.make()
    env.set(qm, {"user": name}, 100)
    env.set(qm, USER_DEFAULT, 200)
    assert env.limit(qm, name, C) == 100
    assert env.tags(qm, name, C) == T(sanitize_user(name), "")
    # the sanitized form is a different principal
    assert env.limit(qm, sanitize_user(name), C) == (100 if sanitize_user(name) == name else 200)


def test_user_literally_named_default_is_an_ordinary_user(env):
    qm = env.make()
    env.set(qm, {"user": "<default>"}, 100)
    assert env.limit(qm, U, C) is None
    assert env.limit(qm, "<default>", C) == 100
    env.set(qm, USER_DEFAULT, 200)
    assert env.limit(qm, U, C) == 200
    assert env.limit(qm, "<default>", C) == 100
    assert env.tags(qm, "<default>", C) == T("%3Cdefault%3E", "")


def test_client_id_tag_is_raw(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    for client_id in ["c d*+~é", "<default>", "a/b%20"]:
        assert env.tags(qm, U, client_id) == T("", client_id)
        assert env.limit(qm, U, client_id) == 1000
    env.set(qm, {"client-id": "<default>"}, 5)  # a literal client-id, not the default entity
    assert env.limit(qm, U, "<default>") == 5
    assert env.limit(qm, U, "x") == 1000


# ============================================================================ per-type


def test_quota_types_resolve_independently(env):
    qm = env.make()
    env.set(qm, {"user": U}, 100)  # this type: user level
    env.set(qm, {"client-id": C}, 200, key=env.other_key)  # other type: client level
    assert env.tags(qm, U, C) == T(U, "")
    assert qm.quota_metric_tags(env.other_qt, U, C) == T("", C)
    assert env.limit(qm, U, C) == 100
    assert qm.quota_limit(env.other_qt, U, C) == 200
    assert env.rec(qm, U, C, 2000, 0) == 10_000  # 200 B/s vs 100 over W = 10 s
    assert qm.measured_rate(env.other_qt, U, C, now_ms=0) == 0.0
    assert qm.record_and_get_throttle_time_ms(env.other_qt, U, C, 2000, now_ms=0) == 0
    assert env.rate(qm, U, C, 0) == 200.0


def test_request_quota_does_not_enable_byte_quotas(env):
    qm = env.make()
    qm.alter_client_quotas([({"user": U}, {"request_percentage": 50,
                                           "controller_mutation_rate": 10})])
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) is None
    assert env.rec(qm, U, C, 10**6, 0) == 0
    assert env.rate(qm, U, C, 0) == 0.0


# ============================================================================ handles


def _script(env, qm, call):
    """A fixed scenario; `call(name, *args)` performs one per-request call for alice/c1."""
    out = [call("rec", 5000, 0), call("tags"), call("limit")]
    env.set(qm, CLIENT_DEFAULT, 1000)
    out += [call("rec", 5000, 100), call("rec", 5000, 200), call("tags"), call("limit"),
            call("max")]
    env.set(qm, {"user": U}, 400)  # level change
    out += [call("tags"), call("limit"), call("rate", 300), call("rec", 6000, 300)]
    env.set(qm, {"user": U}, 2000)  # limit change
    out += [call("rec", 6000, 400), call("nothrottle", 30000, 500), call("rec", 0, 600)]
    call("unrecord", 30000, 700)
    out += [call("rate", 800), call("max")]
    env.set(qm, {"user": U}, None)
    out += [call("tags"), call("limit"), call("rec", 1000, 900), call("rate", 900)]
    return out


def test_handle_gives_the_same_results_as_named_calls(env):
    named, handled = env.make(), env.make()
    h = handled.client(U, C)  # created before any configuration
    qt = env.qt

    def via_names(name, *args):
        return {
            "rec": lambda v, t: named.record_and_get_throttle_time_ms(qt, U, C, v, now_ms=t),
            "nothrottle": lambda v, t: named.record_no_throttle(qt, U, C, v, now_ms=t),
            "unrecord": lambda v, t: named.unrecord(qt, U, C, v, now_ms=t),
            "rate": lambda t: named.measured_rate(qt, U, C, now_ms=t),
            "tags": lambda: named.quota_metric_tags(qt, U, C),
            "limit": lambda: named.quota_limit(qt, U, C),
            "max": lambda: named.max_value_in_quota_window(qt, U, C),
        }[name](*args)

    def via_handle(name, *args):
        return {
            "rec": lambda v, t: h.record_and_get_throttle_time_ms(qt, v, now_ms=t),
            "nothrottle": lambda v, t: h.record_no_throttle(qt, v, now_ms=t),
            "unrecord": lambda v, t: h.unrecord(qt, v, now_ms=t),
            "rate": lambda t: h.measured_rate(qt, now_ms=t),
            "tags": lambda: h.quota_metric_tags(qt),
            "limit": lambda: h.quota_limit(qt),
            "max": lambda: h.max_value_in_quota_window(qt),
        }[name](*args)

    a = _script(env, named, via_names)
    b = _script(env, handled, via_handle)
    assert a == b
    # spot-check the scenario itself
    assert a[:3] == [0, T("", C), None]
    assert a[5] == T("", C) and a[6] == 1000 and a[7] == 10_000
    assert a[8] == T(U, "") and a[9] == 400 and a[10] == 0.0 and a[11] == 5000


def test_handle_follows_configuration_changes(env):
    qm = env.make()
    h = qm.client(U, C)
    assert h.record_and_get_throttle_time_ms(env.qt, 10**6, now_ms=0) == 0
    env.set(qm, {"client-id": C}, 1000)
    assert h.quota_metric_tags(env.qt) == T("", C)
    assert h.quota_limit(env.qt) == 1000
    assert h.record_and_get_throttle_time_ms(env.qt, 20_000, now_ms=0) == 10_000
    env.set(qm, {"user": U, "client-id": C}, 500)
    assert h.quota_metric_tags(env.qt) == T(U, C)
    assert h.quota_limit(env.qt) == 500
    assert h.measured_rate(env.qt, now_ms=0) == 0.0
    assert h.record_and_get_throttle_time_ms(env.qt, 10_000, now_ms=0) == 10_000
    assert h.max_value_in_quota_window(env.qt) == 5000
    env.set(qm, {"user": U, "client-id": C}, None)
    assert h.quota_metric_tags(env.qt) == T("", C)
    assert h.measured_rate(env.qt, now_ms=0) == 2000.0


def test_handles_of_one_user_share_the_user_sensor(env):
    qm = env.make()
    env.set(qm, {"user": U}, 1000)
    h1, h2 = qm.client(U, "c1"), qm.client(U, "c2")
    assert h1.record_and_get_throttle_time_ms(env.qt, 6000, now_ms=0) == 0
    assert h2.record_and_get_throttle_time_ms(env.qt, 6000, now_ms=0) == 2000
    assert qm.measured_rate(env.qt, U, "c9", now_ms=0) == 1200.0


# ============================================================================ describe (kquota)


def test_describe_client_quotas_round_trip(kq, qm):
    E = kq.ClientQuotaEntity
    assert qm.describe_client_quotas() == {}
    qm.alter_client_quotas([
        ({"user": "alice"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048.0}),
        (E({"user": None, "client-id": None}), {"request_percentage": 12.5}),
        ({"client-id": "c1"}, {"controller_mutation_rate": 0.5}),
        ({"user": "<default>"}, {"producer_byte_rate": 7}),
        ({"user": "a b", "client-id": None}, {"consumer_byte_rate": 9}),
    ])
    expected = {
        E({"user": "alice"}): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        E({"user": None, "client-id": None}): {"request_percentage": 12.5},
        E({"client-id": "c1"}): {"controller_mutation_rate": 0.5},
        E({"user": "<default>"}): {"producer_byte_rate": 7.0},
        E({"user": "a b", "client-id": None}): {"consumer_byte_rate": 9.0},
    }
    got = qm.describe_client_quotas()
    assert got == expected
    for ops in got.values():
        assert all(type(v) is float for v in ops.values())
    assert E({"user": "<default>"}) != E({"user": None})
    # update, remove one key, remove all keys of an entity
    qm.alter_client_quotas([
        ({"user": "alice"}, {"producer_byte_rate": None, "consumer_byte_rate": 4096}),
        ({"client-id": "c1"}, {"controller_mutation_rate": None}),
        ({"user": "bob"}, {"producer_byte_rate": None}),  # absent: no-op
    ])
    expected[E({"user": "alice"})] = {"consumer_byte_rate": 4096.0}
    del expected[E({"client-id": "c1"})]
    assert qm.describe_client_quotas() == expected
    # the description can be fed back to a fresh manager
    fresh = kq.QuotaManager()
    fresh.alter_client_quotas(list(expected.items()))
    assert fresh.describe_client_quotas() == expected


# ============================================================================ Kafka's own test


def test_kafka_quota_config_precedence(env):
    """Port of Kafka's ClientQuotaManagerTest.testQuotaConfigPrecedence (time never advances;
    each check records value * window_num and expects a throttle or none)."""
    qm = env.make()
    D = None

    def update(user, client_id, bound):
        entity = {}
        if user != "-":
            entity["user"] = user
        if client_id != "-":
            entity["client-id"] = client_id
        env.set(qm, entity, bound)

    def check(user, client_id, bound, value, throttle):
        assert env.limit(qm, user, client_id) == bound, (user, client_id)
        assert qm.max_value_in_quota_window(env.qt, user, client_id) == 10 * bound
        got = env.rec(qm, user, client_id, value * 11, 0)
        assert (got > 0) if throttle else (got == 0), (user, client_id, value, got)

    update(D, "-", 1000)
    update("-", D, 2000)
    update(D, D, 3000)
    update("userA", "-", 4000)
    update("userA", "client1", 5000)
    update("userB", "-", 6000)
    update("userB", "client1", 7000)
    update("userB", D, 8000)
    update("userC", "-", 10000)
    update("-", "client1", 9000)

    check("userA", "client1", 5000, 4500, False)
    check("userA", "client2", 4000, 4500, True)
    check("userA", "client3", 4000, 0, True)
    check("userA", "client1", 5000, 0, False)
    check("userB", "client1", 7000, 8000, True)
    check("userB", "client2", 8000, 7000, False)
    check("userB", "client3", 8000, 7000, False)
    check("userD", "client1", 3000, 3500, True)
    check("userD", "client2", 3000, 2500, False)
    check("userE", "client1", 3000, 2500, False)

    update(D, D, None)
    check("userD", "client1", 1000, 0, False)
    check("userE", "client4", 1000, 1500, True)
    check("userF", "client4", 1000, 800, False)
    check("userF", "client5", 1000, 800, True)

    update(D, "-", None)
    check("userF", "client4", 2000, 0, False)
    check("userF", "client5", 2000, 0, False)
    check("userF", "client5", 2000, 2500, True)
    check("userG", "client5", 2000, 0, True)

    update("userA", "-", 8000)
    update("userA", "client1", 10000)
    check("userA", "client2", 8000, 0, False)
    check("userA", "client2", 8000, 4500, True)
    check("userA", "client1", 10000, 0, False)
    check("userA", "client1", 10000, 6000, True)
    update("userA", "client1", None)
    check("userA", "client6", 8000, 0, True)
    update("userA", "client6", 11000)
    check("userA", "client6", 11000, 8500, False)
    update("userA", D, 12000)
    update("userA", "client6", None)
    check("userA", "client6", 12000, 4000, True)
