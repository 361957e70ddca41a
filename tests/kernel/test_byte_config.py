"""Byte-rate quota semantics (PRODUCE / FETCH): the clock, the enabled bits, tags and limits by
precedence, shared quotas and configuration changes.

One case per rule of docs/semantics.md and docs/semantics-notes.md. Unless a test needs
a kquota-only API, every case runs against both the kquota kernel and the pure-Python oracle
(tests/support/oracle.py), and for both byte-rate quota types (the ``env`` fixture,
tests/support/byte_env.py).
"""


import pytest

from oracle import INT32_MAX
from byte_env import CLIENT_DEFAULT, USER_DEFAULT, C, T, U
from byte_env import env  # noqa: F401 (fixture)


# ============================================================================ clock


@pytest.mark.parametrize("window_num", [11, 2, 1])
@pytest.mark.parametrize("times", [
    [10_000, 5_000, 12_000],
    [10_000, 0, 9_999, 10_500, 3_000],
    [50_000, 1_000, 49_000, 60_000, 59_000],
])
def test_backwards_time_is_treated_as_the_latest_time(env, window_num, times):
    """A call with an earlier now_ms behaves as if it happened at the sensor's latest time."""
    raw, clamped = env.make(window_num=window_num), env.make(window_num=window_num)
    for qm in (raw, clamped):
        env.set(qm, CLIENT_DEFAULT, 1000)
    latest = None
    for i, t in enumerate(times):
        latest = t if latest is None else max(latest, t)
        value = 3000 + 1000 * i
        got = env.rec(raw, U, C, value, t)
        want = env.rec(clamped, U, C, value, latest)
        assert got == want
        assert 0 <= got < INT32_MAX
        assert env.rate(raw, U, C, max(t - 1, 0)) == env.rate(clamped, U, C, latest)


def test_backwards_time_explicit(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert env.rec(qm, U, C, 5000, 10_000) == 0
    assert env.rec(qm, U, C, 7000, 2_000) == 2000  # as at 10000: 12000 B / 10 s
    assert env.rate(qm, U, C, 0) == 1200.0


def test_clock_clamp_is_per_sensor(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    env.rec(qm, U, "other", 0, 100_000)  # another sensor has seen t = 100 s
    env.rec(qm, U, C, 5000, 0)
    # this sensor's time is its own: at 20 s its only sample is purged
    assert env.rate(qm, U, C, 20_000) == 0.0


# ============================================================================ enabled bits


def test_records_are_noops_while_no_quota_is_configured(env):
    qm = env.make()
    assert env.rec(qm, U, C, 10**9, 0) == 0
    qm.record_no_throttle(env.qt, U, C, 10**9, now_ms=0)
    qm.unrecord(env.qt, U, C, 10**6, now_ms=0)
    assert env.rate(qm, U, C, 0) == 0.0
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) is None
    env.set(qm, {"client-id": "unrelated"}, 1000)
    assert env.rec(qm, U, C, 0, 100) == 0
    assert env.rate(qm, U, C, 100) == 0.0  # nothing from before was kept


def test_quota_of_other_type_does_not_enable_this_type(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1, key=env.other_key)
    assert env.rec(qm, U, C, 10**6, 0) == 0
    assert env.rate(qm, U, C, 0) == 0.0
    assert qm.record_and_get_throttle_time_ms(env.other_qt, U, C, 10**6, now_ms=0) > 0


def test_removing_an_absent_key_is_a_noop(env):
    qm = env.make()
    env.set(qm, {"user": U}, None)
    env.set(qm, {"user": U, "client-id": C}, None)
    assert env.tags(qm, U, C) == T("", C)
    assert env.rec(qm, U, C, 10**6, 0) == 0
    assert env.rate(qm, U, C, 0) == 0.0


def test_validate_only_enables_nothing(env):
    qm = env.make()
    qm.alter_client_quotas([({"user": U}, {env.key: 1})], validate_only=True)
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) is None
    assert env.rec(qm, U, C, 10**6, 0) == 0


def test_enabled_bits_are_sticky(env):
    qm = env.make()
    env.set(qm, {"user": U}, 1000)
    env.set(qm, {"user": U}, None)
    # still user-kind tags, now unlimited
    assert env.tags(qm, U, C) == T(U, "")
    assert env.tags(qm, "bob", C) == T("bob", "")
    assert env.limit(qm, U, C) is None
    assert env.rec(qm, U, C, 10**6, 0) == 0
    assert env.rate(qm, U, C, 0) == 10**6 / 10.0  # still recorded
    # adding a client-id quota gives mixed kinds: the 8-level walk
    env.set(qm, {"client-id": C}, 500)
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) == 500


def test_static_default_sets_the_client_id_bit(env):
    qm = env.make(static=1000)
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) == 1000
    assert env.rec(qm, U, C, 20_000, 0) == 10_000
    assert env.limit(qm, U, "") is None  # ("", "") stays unlimited
    # the other type is not enabled by this type's static default
    assert qm.quota_limit(env.other_qt, U, C) is None
    assert qm.record_and_get_throttle_time_ms(env.other_qt, U, C, 10**6, now_ms=0) == 0
    assert qm.measured_rate(env.other_qt, U, C, now_ms=0) == 0.0
    # a user quota makes the kinds mixed; the static default still applies below level 8
    env.set(qm, {"user": "bob"}, 300)
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) == 1000
    assert env.tags(qm, "bob", C) == T("bob", "")
    assert env.limit(qm, "bob", C) == 300


# ============================================================================ tags and limits


def test_tags_with_only_client_id_quotas(env):
    qm = env.make()
    env.set(qm, {"client-id": C}, 100)
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) == 100
    assert env.tags(qm, "bob", "c2") == T("", "c2")
    assert env.limit(qm, "bob", "c2") is None
    assert env.tags(qm, U, "") == T("", "")
    assert env.limit(qm, U, "") is None
    env.set(qm, CLIENT_DEFAULT, 200)
    assert env.limit(qm, "bob", "c2") == 200
    assert env.limit(qm, U, "") is None  # ("", "") is unlimited, as in Kafka


def test_tags_with_only_user_quotas(env):
    qm = env.make()
    env.set(qm, {"user": U}, 100)
    assert env.tags(qm, U, C) == T(U, "")
    assert env.tags(qm, U, "") == T(U, "")
    assert env.limit(qm, U, "x") == 100
    assert env.tags(qm, "bob", C) == T("bob", "")
    assert env.limit(qm, "bob", C) is None
    env.set(qm, USER_DEFAULT, 200)
    assert env.limit(qm, "bob", C) == 200
    assert env.tags(qm, "", C) == T("", "")
    assert env.limit(qm, "", C) is None


def test_tags_with_only_user_client_id_quotas(env):
    qm = env.make()
    env.set(qm, {"user": U, "client-id": C}, 100)
    assert env.tags(qm, U, C) == T(U, C)
    assert env.limit(qm, U, C) == 100
    assert env.tags(qm, U, "c2") == T(U, "c2")
    assert env.limit(qm, U, "c2") is None
    assert env.tags(qm, U, "") == T(U, "")
    assert env.limit(qm, U, "") is None  # (u, "") looks at users/<u>, users/<default> only
    env.set(qm, {"user": None, "client-id": None}, 200)
    assert env.tags(qm, "bob", "c2") == T("bob", "c2")
    assert env.limit(qm, "bob", "c2") == 200
    assert env.limit(qm, U, "") is None


LEVELS = [  # (entity, expected tags for alice/c1), highest precedence first
    ({"user": U, "client-id": C}, T(U, C)),
    ({"user": U, "client-id": None}, T(U, C)),
    ({"user": U}, T(U, "")),
    ({"user": None, "client-id": C}, T(U, C)),
    ({"user": None, "client-id": None}, T(U, C)),
    ({"user": None}, T(U, "")),
    ({"client-id": C}, T("", C)),
    ({"client-id": None}, T("", C)),
]


def test_precedence_of_all_levels(env):
    qm = env.make(static=9000)
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) == 9000
    # add levels from the lowest precedence up: each new one wins
    for i in reversed(range(len(LEVELS))):
        entity, tags = LEVELS[i]
        env.set(qm, entity, 1000 + i + 1)
        assert env.tags(qm, U, C) == tags, entity
        assert env.limit(qm, U, C) == 1000 + i + 1, entity
        assert qm.max_value_in_quota_window(env.qt, U, C) == (1000 + i + 1) * 10
    # remove them from the highest down: the next one takes over
    for i in range(len(LEVELS)):
        env.set(qm, LEVELS[i][0], None)
        if i + 1 < len(LEVELS):
            entity, tags = LEVELS[i + 1]
            assert env.tags(qm, U, C) == tags, entity
            assert env.limit(qm, U, C) == 1000 + i + 2, entity
    assert env.tags(qm, U, C) == T("", C)
    assert env.limit(qm, U, C) == 9000  # static default
    qm2 = env.make()
    for entity, _ in LEVELS:
        env.set(qm2, entity, 5)
    for entity, _ in LEVELS:
        env.set(qm2, entity, None)
    assert env.tags(qm2, U, C) == T("", C)
    assert env.limit(qm2, U, C) is None  # unlimited
    assert env.rec(qm2, U, C, 10**9, 0) == 0


def test_precedence_for_other_users_and_clients(env):
    qm = env.make()
    env.set(qm, {"user": U, "client-id": C}, 1)
    env.set(qm, {"user": U}, 3)
    env.set(qm, {"user": None, "client-id": C}, 4)
    env.set(qm, {"client-id": "c2"}, 7)
    assert (env.tags(qm, U, "c2"), env.limit(qm, U, "c2")) == (T(U, ""), 3)
    assert (env.tags(qm, "bob", C), env.limit(qm, "bob", C)) == (T("bob", C), 4)
    assert (env.tags(qm, "bob", "c2"), env.limit(qm, "bob", "c2")) == (T("", "c2"), 7)
    assert (env.tags(qm, "bob", "c3"), env.limit(qm, "bob", "c3")) == (T("", "c3"), None)


def test_limit_is_looked_up_from_the_tags(env):
    """users/<u>/clients/<default> picks tags (u, c); with an empty client-id that is (u, "")
    whose limit comes from users/<u> or users/<default> only (Kafka's DefaultQuotaCallback)."""
    qm = env.make()
    env.set(qm, {"user": U, "client-id": None}, 100)
    env.set(qm, CLIENT_DEFAULT, 50)
    assert env.tags(qm, U, C) == T(U, C)
    assert env.limit(qm, U, C) == 100
    assert env.tags(qm, U, "") == T(U, "")
    assert env.limit(qm, U, "") is None
    assert env.tags(qm, "bob", "") == T("", "")
    assert env.limit(qm, "bob", "") is None
    assert env.tags(qm, "bob", C) == T("", C)
    assert env.limit(qm, "bob", C) == 50


# ============================================================================ sharing


def test_clients_of_a_user_share_the_user_sensor(env):
    qm = env.make()
    env.set(qm, {"user": U}, 1000)
    assert env.rec(qm, U, "c1", 6000, 0) == 0
    assert env.rec(qm, U, "c2", 6000, 0) == 2000  # 12000 B / 10 s = 1200 B/s
    assert env.rate(qm, U, "c3", 0) == 1200.0
    assert env.rate(qm, "bob", "c1", 0) == 0.0


def test_default_user_entity_gives_each_user_its_own_copy(env):
    qm = env.make()
    env.set(qm, USER_DEFAULT, 1000)
    assert env.rec(qm, U, C, 6000, 0) == 0
    assert env.rec(qm, "bob", C, 6000, 0) == 0
    assert env.rate(qm, U, "other", 0) == 600.0
    assert env.rate(qm, "bob", "other", 0) == 600.0
    assert env.rec(qm, U, "c2", 6000, 0) == 2000


def test_client_id_quota_is_shared_across_users(env):
    qm = env.make()
    env.set(qm, {"client-id": C}, 1000)
    assert env.rec(qm, U, C, 6000, 0) == 0
    assert env.rec(qm, "bob", C, 6000, 0) == 2000


def test_default_client_entity_gives_each_client_its_own_copy(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert env.rec(qm, U, "c1", 6000, 0) == 0
    assert env.rec(qm, U, "c2", 6000, 0) == 0
    assert env.rec(qm, "bob", "c1", 6000, 0) == 2000  # same client-id: shared


@pytest.mark.parametrize("entity", [{"user": U, "client-id": None},
                                    {"user": None, "client-id": None}], ids=str)
def test_user_client_default_gives_each_pair_its_own_copy(env, entity):
    qm = env.make()
    env.set(qm, entity, 1000)
    assert env.rec(qm, U, "c1", 6000, 0) == 0
    assert env.rec(qm, U, "c2", 6000, 0) == 0
    assert env.rec(qm, U, "c1", 6000, 0) == 2000


# ============================================================================ config changes


def test_level_change_uses_another_sensor(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert env.rec(qm, U, C, 9000, 0) == 0
    env.set(qm, {"user": U}, 1000)  # tags (alice, "") now: a new, empty sensor
    assert env.tags(qm, U, C) == T(U, "")
    assert env.rate(qm, U, C, 100) == 0.0
    assert env.rec(qm, U, C, 9000, 100) == 0  # 9000 B / 10 s
    env.set(qm, {"user": U}, None)  # back to ("", c1): the old sensor with its 9000 B
    assert env.tags(qm, U, C) == T("", C)
    assert env.rate(qm, U, C, 200) == 9000 / 10.2
    assert env.rec(qm, U, C, 2000, 200) == 800  # (11000 / 10.2 - 1000) / 1000 * 10200


def test_limit_change_keeps_the_samples(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert env.rec(qm, U, C, 9000, 0) == 0
    env.set(qm, CLIENT_DEFAULT, 500)
    assert env.rate(qm, U, C, 100) == 9000 / 10.1
    assert env.rec(qm, U, C, 0, 100) == 7900  # (9000 / 10.1 - 500) / 500 * 10100
    env.set(qm, {"client-id": C}, 100_000)  # same tags ("", c1), other level: same sensor
    assert env.rate(qm, U, C, 100) == 9000 / 10.1
    assert env.rec(qm, U, C, 0, 100) == 0


def test_removing_the_applied_limit_makes_the_sensor_unlimited(env):
    qm = env.make()
    env.set(qm, {"client-id": C}, 1000)
    assert env.rec(qm, U, C, 20_000, 0) == 10_000
    env.set(qm, {"client-id": C}, None)
    assert env.limit(qm, U, C) is None
    assert env.rec(qm, U, C, 20_000, 0) == 0
    assert env.rate(qm, U, C, 0) == 4000.0


