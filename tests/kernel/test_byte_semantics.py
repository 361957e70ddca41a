"""Byte-rate quota semantics (PRODUCE / FETCH).

One case per rule of docs/semantics.md and docs/semantics-notes.md. Unless a test needs
a kquota-only API, every case runs against both the kquota kernel and the pure-Python oracle
(tests/support/oracle.py), and for both byte-rate quota types.
"""

import math

import pytest

from conftest import BYTE_KEY, OTHER
from oracle import INT32_MAX, sanitize_user

STATIC_KW = {"PRODUCE": "producer_default", "FETCH": "consumer_default"}

U, C = "alice", "c1"
CLIENT_DEFAULT = {"client-id": None}
USER_DEFAULT = {"user": None}


def T(user, client_id):
    return {"user": user, "client-id": client_id}


class Env:
    """Binds one implementation and one quota type; small helpers keep the tests readable."""

    def __init__(self, impl, qt_name):
        self.impl = impl
        self.qt_name = qt_name
        self.qt = impl.qtype(qt_name)
        self.key = BYTE_KEY[qt_name]
        self.other_qt = impl.qtype(OTHER[qt_name])
        self.other_key = BYTE_KEY[OTHER[qt_name]]
        self.made = []

    def make(self, static=None, **kwargs):
        if static is not None:
            kwargs[STATIC_KW[self.qt_name]] = static
        qm = self.impl.make(**kwargs)
        self.made.append(qm)
        return qm

    def set(self, qm, entity, value, key=None):
        qm.alter_client_quotas([(entity, {key or self.key: value})])

    def rec(self, qm, user, client_id, value, t):
        return qm.record_and_get_throttle_time_ms(self.qt, user, client_id, value, now_ms=t)

    def rate(self, qm, user, client_id, t):
        return qm.measured_rate(self.qt, user, client_id, now_ms=t)

    def tags(self, qm, user, client_id):
        return qm.quota_metric_tags(self.qt, user, client_id)

    def limit(self, qm, user, client_id):
        return qm.quota_limit(self.qt, user, client_id)


@pytest.fixture
def env(impl, qt_name):
    e = Env(impl, qt_name)
    yield e
    for qm in e.made:
        close = getattr(qm, "close", None)
        if close is not None:
            close()


# ============================================================================ public examples


def test_public_example_default_client_quota(env):
    """semantics.md: clients/<default> = 500; 400 B each second, then 2300 B at 10.5 s."""
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 500)
    for k in range(10):
        assert env.rec(qm, U, C, 400, k * 1000) == 0
    # 6300 B / 10.5 s = 600 B/s; (600 - 500) / 500 * 10500 = 2100
    assert env.rec(qm, U, C, 2300, 10_500) == 2100
    # continued as in Kafka's ClientQuotaManagerTest.testQuotaViolation: wait out the throttle,
    # keep producing 400 B/s; once the burst has rolled over there is no throttle
    t = 10_500 + 2100
    for _ in range(10):
        env.rec(qm, U, C, 400, t)
        t += 1000
    assert env.rec(qm, U, C, 0, t) == 0


@pytest.mark.parametrize("entity", [
    CLIENT_DEFAULT, {"client-id": C}, USER_DEFAULT, {"user": U},
    {"user": U, "client-id": C}, {"user": U, "client-id": None},
    {"user": None, "client-id": C}, {"user": None, "client-id": None},
], ids=str)
def test_public_example_fresh_sensor(env, entity):
    """semantics.md: quota 1000 B/s, fresh sensor: 5000@0, 5000@200ms, 1000@1s, 0@6s."""
    qm = env.make()
    env.set(qm, entity, 1000)
    got = [env.rec(qm, U, C, v, t) for v, t in [(5000, 0), (5000, 200), (1000, 1000), (0, 6000)]]
    assert got == [0, 0, 1000, 1000]


def test_public_example_static_default(env):
    """The same example against the static broker default (KIP-55 step 8)."""
    qm = env.make(static=1000)
    got = [env.rec(qm, U, C, v, t) for v, t in [(5000, 0), (5000, 200), (1000, 1000), (0, 6000)]]
    assert got == [0, 0, 1000, 1000]


# ============================================================================ sampled rate


def test_fresh_sensor_window_is_padded_to_window_num_minus_one(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 10**9)
    env.rec(qm, U, C, 1000, 0)
    assert env.rate(qm, U, C, 0) == 1000 / 10.0  # W = 0 + 10 windows
    assert env.rate(qm, U, C, 2000) == 1000 / 10.0  # 2 full windows: W = 2000 + 8 * 1000
    assert env.rate(qm, U, C, 2500) == 1000 / 10.5  # 2 full windows: W = 2500 + 8 * 1000
    assert env.rate(qm, U, C, 10_999) == 1000 / 10.999  # 10 full windows: W = E


def test_window_rule_with_custom_window_config(env):
    qm = env.make(window_num=5, window_size_seconds=2)
    env.set(qm, CLIENT_DEFAULT, 10**9)
    env.rec(qm, U, C, 1000, 0)
    assert env.rate(qm, U, C, 0) == 1000 / 8.0  # W = 4 * 2000
    assert env.rate(qm, U, C, 2500) == 1000 / 8.5  # E = 2500, 1 full window: W = 2500 + 3 * 2000
    assert env.rate(qm, U, C, 9000) == 1000 / 9.0  # 4 full windows: W = E


def test_window_num_one_has_minimum_window_of_one_ms(env):
    """window_num = 1: no padding, W = max(E, 1)."""
    qm = env.make(window_num=1)
    env.set(qm, CLIENT_DEFAULT, 1000)
    # rate = 100 B / 1 ms = 100000 B/s; throttle = (100000 - 1000) / 1000 * 1 = 99
    assert env.rec(qm, U, C, 100, 0) == 99
    assert env.rate(qm, U, C, 500) == 100 / 0.5


def test_samples_are_not_aligned_to_the_clock(env):
    """A record that finds the current sample complete starts the next one at its own time."""
    qm = env.make(window_num=2)
    env.set(qm, CLIENT_DEFAULT, 10**9)
    env.rec(qm, U, C, 100, 0)
    env.rec(qm, U, C, 100, 1500)  # new sample starting at 1500 (not 1000)
    env.rec(qm, U, C, 100, 2400)  # same sample (900 ms old)
    # at 3600 the first sample is purged; oldest start = 1500, W = 2100
    assert env.rate(qm, U, C, 3600) == 200 / 2.1


def test_ring_has_window_num_plus_one_slots(env):
    qm = env.make(window_num=2)
    env.set(qm, CLIENT_DEFAULT, 10**9)
    for v, t in [(100, 0), (200, 1000), (300, 2000), (400, 3000)]:
        env.rec(qm, U, C, v, t)
    # slot 0 reused at 3000 (400); slot 1 purged (last event 2000 ms ago); slot 2 kept (300);
    # oldest start 2000 -> W = 1000
    assert env.rate(qm, U, C, 3000) == 700.0


def test_ring_grows_lazily(env):
    """Only samples that have been started take part in purge / oldest (Kafka's ArrayList)."""
    qm = env.make(window_num=2)
    env.set(qm, CLIENT_DEFAULT, 10**9)
    env.rec(qm, U, C, 100, 0)
    env.rec(qm, U, C, 0, 500)
    env.rec(qm, U, C, 0, 900)
    assert env.rate(qm, U, C, 2000) == 100 / 2.0
    env.rec(qm, U, C, 300, 2100)  # second sample created at 2100
    # at 2950 the first sample is purged (start -> 2950); oldest = 2100; W = 850 + 1000
    # (an eagerly allocated third slot, purged at 2000, would give W = 1950)
    assert env.rate(qm, U, C, 2950) == 300 / 1.85


def test_purge_boundary(env):
    """Samples whose last event is window_num * window or more in the past are reset."""
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 10**9)
    env.rec(qm, U, C, 1000, 0)
    assert env.rate(qm, U, C, 10_999) == 1000 / 10.999
    assert env.rate(qm, U, C, 11_000) == 0.0


def test_samples_are_summed_in_slot_order(env):
    """f64 addition order matters: slot 0 first, even when slot 0 holds the newest sample."""
    qm = env.make(window_num=3)
    env.set(qm, CLIENT_DEFAULT, 10**9)
    for v, t in [(0, 0), (0.2, 1000), (0.0, 1999), (0.3, 2000), (0.0, 3000), (0.1, 4000)]:
        qm.record_no_throttle(env.qt, U, C, v, now_ms=t)
    # slots: [0.1 @4000, 0.2 @1000, 0.3 @2000, 0.0 @3000]; oldest 1000 -> W = 3000
    expected = (((0.0 + 0.1) + 0.2) + 0.3 + 0.0) / 3.0
    assert expected != (0.2 + 0.3 + 0.0 + 0.1) / 3.0
    assert env.rate(qm, U, C, 4000) == expected


def test_value_is_recorded_before_the_check(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    # 20000 B on a fresh sensor: 2000 B/s over W = 10 s -> (2000 - 1000) / 1000 * 10000
    assert env.rec(qm, U, C, 20_000, 0) == 10_000


def test_rate_equal_to_bound_is_acceptable(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert env.rec(qm, U, C, 10_000, 0) == 0  # exactly 1000 B/s
    assert env.rec(qm, U, C, 1, 0) == 1  # 1000.1 B/s -> 0.1 / 1000 * 10000 = 1


def test_byte_rate_throttle_is_not_bounded_by_a_window(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert env.rec(qm, U, C, 1_000_000, 0) == 990_000


@pytest.mark.parametrize("limit,value,expected", [(800, 8010, 13), (2000, 20005, 3)])
def test_throttle_rounds_half_up(env, limit, value, expected):
    """Java Math.round: 12.5 -> 13 and 2.5 -> 3 (Python's round() would give 12 and 2)."""
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, limit)
    assert env.rec(qm, U, C, value, 0) == expected


@pytest.mark.parametrize("value,expected", [
    (2**20, 1_048_566_000),  # (104857.6 - 1) / 1 * 10000, below 2**31 - 1
    (3_000_000, INT32_MAX),  # 2_999_990_000 ms: Kafka's .toInt would wrap to a negative
    (10**12, INT32_MAX),
    (1e300, INT32_MAX),
])
def test_throttle_saturates_at_int32_max(env, value, expected):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1)
    assert env.rec(qm, U, C, value, 0) == expected


def test_unlimited_is_recorded_but_never_throttled(env):
    qm = env.make()
    env.set(qm, {"user": "bob"}, 1000)  # user mode: alice's tags (alice, "") -> unlimited
    assert env.limit(qm, U, C) is None
    assert env.rec(qm, U, C, 10**9, 0) == 0
    assert env.rec(qm, U, C, 10**9, 100) == 0
    assert env.rate(qm, U, C, 100) == 2 * 10**9 / 10.1


def test_unrecord_lowers_the_rate(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert env.rec(qm, U, C, 12_000, 0) == 2000
    assert qm.unrecord(env.qt, U, C, 12_000, now_ms=100) is None
    assert env.rate(qm, U, C, 100) == 0.0
    env.rec(qm, U, C, 5000, 200)
    qm.unrecord(env.qt, U, C, 2000, now_ms=300)
    assert env.rate(qm, U, C, 300) == 3000 / 10.3
    assert env.rec(qm, U, C, 0, 300) == 0


def test_record_no_throttle_records_without_checking(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert qm.record_no_throttle(env.qt, U, C, 20_000, now_ms=0) is None
    assert env.rate(qm, U, C, 0) == 2000.0
    # the next checked request pays for it
    assert env.rec(qm, U, C, 0, 0) == 10_000


def test_measured_rate(env):
    qm = env.make()
    assert env.rate(qm, U, C, 0) == 0.0  # no quota, no sensor
    env.set(qm, CLIENT_DEFAULT, 500)
    assert env.rate(qm, U, C, 0) == 0.0  # no sensor yet
    for k in range(10):
        env.rec(qm, U, C, 400, k * 1000)
    assert env.rate(qm, U, C, 9000) == 4000 / 10.0
    assert env.rate(qm, U, C, 10_500) == 4000 / 10.5
    assert env.rate(qm, U, "c2", 10_500) == 0.0  # another sensor, never recorded
    assert env.rate(qm, U, C, 11_500) == 3600 / 10.5  # first sample purged, oldest = 1000


def test_max_value_in_quota_window(env):
    qm = env.make()
    assert qm.max_value_in_quota_window(env.qt, U, C) == math.inf  # quotas not enabled
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert qm.max_value_in_quota_window(env.qt, U, C) == 1000 * 10 * 1
    assert qm.max_value_in_quota_window(env.qt, U, "") == math.inf  # ("", "") is unlimited
    qm2 = env.make(window_num=5, window_size_seconds=2)
    env.set(qm2, {"user": U}, 1000)
    assert qm2.max_value_in_quota_window(env.qt, U, C) == 1000 * 4 * 2
    assert qm2.max_value_in_quota_window(env.qt, "bob", C) == math.inf
    qm3 = env.make(window_num=1, static=1000)
    assert qm3.max_value_in_quota_window(env.qt, U, C) == 0.0


def test_time_at_quota_ms_is_value_over_the_limit(make_qm, kq):
    """The proxy's mute after a Fetch response larger than the quota window: value / limit."""
    qm = make_qm(window_num=2)
    qm.alter_client_quotas([({"client-id": "c"}, {"consumer_byte_rate": 300_000})])
    h = qm.client("ANONYMOUS", "c")
    assert h.time_at_quota_ms(kq.ClientQuotaType.FETCH, 990_000) == 3300
    assert h.time_at_quota_ms("FETCH", 1) == 0  # 1/300 ms, rounded like Kafka's throttles
    assert qm.client("ANONYMOUS", "free").time_at_quota_ms("FETCH", 10**9) == 0  # unlimited
    # The same limit the window cap uses (a user quota here).
    qm.alter_client_quotas([({"user": "u"}, {"consumer_byte_rate": 1000})])
    assert qm.client("u", "x").time_at_quota_ms("FETCH", 2500) == 2500


def test_fetch_answer_kafka_empty_only_up_to_a_tenth_of_the_window():
    """The proxy's answer to a recorded Fetch response (the kernel's Fetch response step asks it)."""
    from kquota._kquota import fetch_answer

    assert fetch_answer(100, 1000, 0) == "deliver"
    assert fetch_answer(100, 1000, 7) == "empty"  # Kafka's throttled answer
    assert fetch_answer(101, 1000, 7) == "mute"  # more than a tenth: delivered and muted
    assert fetch_answer(1000, 1000, 0) == "deliver"
    assert fetch_answer(1001, 1000, 0) == "mute"  # more than the whole window: always
    assert fetch_answer(10**12, math.inf, 0) == "deliver"  # no quota


def test_peek_throttle_time_ms_records_nothing(make_qm, kq):
    """What the proxy asks before reading past unanswered Produce requests."""
    qm = make_qm(window_num=11)
    qm.alter_client_quotas([({"client-id": "c"}, {"producer_byte_rate": 1000})])
    h = qm.client("ANONYMOUS", "c")
    h.record_and_get_throttle_time_ms(kq.ClientQuotaType.PRODUCE, 9000, now_ms=0)
    assert h.peek_throttle_time_ms("PRODUCE", 3000, now_ms=1000) == 2000  # 12 kB over 10 s
    assert h.peek_throttle_time_ms("PRODUCE", 0, now_ms=1000) == 0
    assert qm.measured_rate(kq.ClientQuotaType.PRODUCE, "ANONYMOUS", "c", now_ms=1000) == 900.0
    assert h.record_and_get_throttle_time_ms("PRODUCE", 3000, now_ms=1000) == 2000
    with pytest.raises(ValueError, match="token bucket"):
        h.peek_throttle_time_ms("CONTROLLER_MUTATION", 1)


def test_sensor_idle_for_an_hour_behaves_like_a_fresh_one(env):
    qm = env.make()
    env.set(qm, CLIENT_DEFAULT, 1000)
    assert env.rec(qm, U, C, 9000, 0) == 0
    t = 3_600_001
    assert env.rate(qm, U, C, t) == 0.0
    got = [env.rec(qm, U, C, v, t + dt) for v, dt in [(5000, 0), (5000, 200), (1000, 1000),
                                                        (0, 6000)]]
    assert got == [0, 0, 1000, 1000]


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
