"""Request-time quotas (KIP-124, ``request_percentage``): the public example, the unit, the
throttle cap, network-thread time, exempt requests and the enabled bits.

One case per rule of docs/semantics.md and docs/semantics-notes.md ("Request-time
quotas"). Cases that only use the public per-request API run against both the kquota kernel and
the pure-Python oracle (tests/support/oracle.py); cases about validation, errors and sensor counts are
kquota-only.
"""


import pytest

from oracle import INT32_MAX, NANOS_TO_PERCENT
from request_env import MS, C, U, _user_quota
from one_window import mk, one_window, one_window_qm  # noqa: F401 (fixtures)


# ============================================================================ public example


def test_public_request_example(impl, mk):
    """semantics.md: user quota 1 %, 4 ms of thread time each second for 10 s, then 67.1 ms at
    10.5 s: 107.1 ms / 10.5 s = 10.2 ms/s; (1.02 - 1) / 1 * 10500 = 210 ms."""
    qm = mk()
    _user_quota(qm, 1)
    for k in range(10):
        assert qm.record_request_time(U, C, 4 * MS, now_ms=k * 1000) == 0
    assert qm.record_request_time(U, C, 67.1 * MS, now_ms=10_500) == 210


def test_public_request_example_through_a_handle(impl, mk):
    qm = mk()
    _user_quota(qm, 1)
    h = qm.client(U, C)
    for k in range(10):
        assert h.record_request_time(4 * MS, now_ms=k * 1000) == 0
    assert h.record_request_time(67.1 * MS, now_ms=10_500) == 210


def test_public_request_example_through_the_generic_call_in_percent(impl, mk):
    """The generic call takes Kafka's recorded unit (percent): same numbers."""
    qm = mk()
    _user_quota(qm, 1)
    for k in range(10):
        assert qm.record_and_get_throttle_time_ms(
            impl.REQUEST, U, C, 4 * MS * NANOS_TO_PERCENT, now_ms=k * 1000) == 0
    assert qm.record_and_get_throttle_time_ms(
        impl.REQUEST, U, C, 67.1 * MS * NANOS_TO_PERCENT, now_ms=10_500) == 210


# ============================================================================ unit: percent


def test_thread_time_is_recorded_as_percent_of_one_thread(impl, mk):
    """``nanos * (100.0 / 1e9)``: one second of thread time is 100 %; over a fresh sensor's
    W of (11 - 1) windows of 1 s that is a rate of 10 %."""
    qm = mk()
    _user_quota(qm, 1000)
    qm.record_request_time(U, C, 1_000_000_000, now_ms=0)
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=0) == 10.0


def test_percent_conversion_is_bit_identical_to_kafka(impl, mk):
    """Kafka multiplies by the constant ``100.0 / 1e9`` (not divides by 1e7): the double must be
    the same, which shows in the measured rate."""
    qm = mk()
    _user_quota(qm, 1000)
    nanos = 123_456_789
    qm.record_request_time(U, C, nanos, now_ms=0)
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=0) == nanos * (100.0 / 1e9) / 10.0


def test_measured_rate_is_in_percent(impl, mk):
    """4 ms each second for 10 s, measured at 10 s: 40 ms / 10 s = 0.4 %."""
    qm = mk()
    _user_quota(qm, 1)
    for k in range(10):
        qm.record_request_time(U, C, 4 * MS, now_ms=k * 1000)
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=10_000) == pytest.approx(0.4)


def test_max_value_in_quota_window_is_in_percent(impl, mk):
    qm = mk(window_num=5, window_size_seconds=2)
    _user_quota(qm, 3)
    assert qm.max_value_in_quota_window(impl.REQUEST, U, C) == 3 * 4 * 2
    assert qm.quota_limit(impl.REQUEST, U, C) == 3.0


# ============================================================================ throttle cap


def test_throttle_is_capped_at_one_window_during_a_long_spike(impl, mk):
    """500 ms of thread time against 1 %: uncapped (50/10 - 1) / 1 * 10000 = 40000 ms; capped at
    one window (1000 ms) for as long as the spike is in the window (ClientRequestQuotaManagerTest)."""
    qm = mk()
    _user_quota(qm, 1)
    assert qm.record_request_time(U, C, 500 * MS, now_ms=0) == 1000
    for k in range(1, 11):
        assert qm.record_request_time(U, C, 0, now_ms=k * 1000) == 1000
    assert qm.record_request_time(U, C, 0, now_ms=11_000) == 0


def test_throttle_cap_follows_the_window_size(impl, mk):
    """window_size_seconds=3: the cap is 3000 ms. 5 s of thread time over W = 30 s is 16.7 %
    against 1 %: uncapped 470000 ms."""
    qm = mk(window_size_seconds=3)
    _user_quota(qm, 1)
    assert qm.record_request_time(U, C, 5_000 * MS, now_ms=0) == 3000
    assert qm.record_request_time(U, C, 0, now_ms=6000) == 3000


def test_throttle_below_the_cap_is_not_changed(impl, mk):
    """The cap is a min(): a throttle under one window is returned as computed."""
    qm = mk(window_size_seconds=3)
    _user_quota(qm, 1)
    # 310 ms over W = 30 s: 1.0333 %: (0.0333) * 30000 = 1000 ms (< 3000)
    assert qm.record_request_time(U, C, 310 * MS, now_ms=0) == 1000


def test_generic_request_record_is_capped_too(impl, mk):
    qm = mk()
    _user_quota(qm, 1)
    assert qm.record_and_get_throttle_time_ms(impl.REQUEST, U, C, 1e6, now_ms=0) == 1000
    assert qm.client(U, C).record_and_get_throttle_time_ms(impl.REQUEST, 1e6, now_ms=0) == 1000


def test_byte_throttles_are_not_capped(impl, mk):
    """Contrast: the cap is REQUEST-only (PRODUCE with a huge overshoot throttles far beyond one
    window, saturating at 2^31 - 1)."""
    qm = mk()
    qm.alter_client_quotas([({"user": U}, {"producer_byte_rate": 1})])
    assert qm.record_and_get_throttle_time_ms(impl.PRODUCE, U, C, 1e12, now_ms=0) == INT32_MAX


def test_exact_quota_is_not_a_violation(impl, mk):
    """rate == bound is acceptable: 100 ms over W = 10 s is exactly 1 %."""
    qm = mk()
    _user_quota(qm, 1)
    assert qm.record_request_time(U, C, 100 * MS, now_ms=0) == 0
    assert qm.record_request_time(U, C, 1 * MS, now_ms=0) == 100  # 10.1 % / 10 s: 0.01 * 10000


# ============================================================================ network thread time


def test_network_thread_time_is_recorded_unchecked(impl, mk):
    """Never throttles (returns None) however large."""
    qm = mk()
    _user_quota(qm, 1)
    assert qm.record_network_thread_time(U, C, 10_000 * MS, now_ms=0) is None
    assert qm.client(U, C).record_network_thread_time(10_000 * MS, now_ms=0) is None
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=0) == pytest.approx(20_000 * 0.1 / 10)


def test_network_thread_time_weighs_on_the_next_request(impl, mk):
    """105 ms of network time at 1 %: the next request, with no thread time of its own, is
    throttled (10.5 % / 10 s = 1.05 %: 0.05 * 10000 = 500 ms)."""
    qm = mk()
    _user_quota(qm, 1)
    assert qm.record_request_time(U, C, 0, now_ms=0) == 0
    qm.record_network_thread_time(U, C, 105 * MS, now_ms=0)
    assert qm.record_request_time(U, C, 0, now_ms=0) == 500


def test_network_thread_time_through_a_handle_uses_the_same_sensor(impl, mk):
    qm = mk()
    _user_quota(qm, 1)
    qm.client(U, C).record_network_thread_time(105 * MS, now_ms=0)
    assert qm.record_request_time(U, "other-client", 0, now_ms=0) == 500  # user-level: shared


def test_network_thread_time_is_not_recorded_without_request_quotas(impl, mk):
    qm = mk()
    qm.record_network_thread_time(U, C, 105 * MS, now_ms=0)
    _user_quota(qm, 1)
    assert qm.record_request_time(U, C, 0, now_ms=0) == 0


# ============================================================================ exempt


def test_exempt_rate_is_zero_before_any_record(impl, mk):
    qm = mk()
    assert qm.exempt_request_rate(now_ms=0) == 0.0
    _user_quota(qm, 1)
    assert qm.exempt_request_rate(now_ms=0) == 0.0


def test_exempt_time_goes_to_one_shared_unthrottled_sensor(impl, mk):
    """All exempt time adds up in one sensor, whoever sent it, and never touches a client's
    request-time sensor."""
    qm = mk()
    _user_quota(qm, 1)
    qm.record_exempt_request_time(600 * MS, now_ms=0)
    qm.record_exempt_request_time(400 * MS, now_ms=0)
    assert qm.exempt_request_rate(now_ms=0) == pytest.approx(10.0)  # 1 s = 100 % over W = 10 s
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=0) == 0.0
    assert qm.record_request_time(U, C, 0, now_ms=0) == 0  # the client is not throttled


def test_exempt_rate_is_a_sampled_rate(impl, mk):
    """The exempt sensor is a Rate over the quota windows; old samples age out."""
    qm = mk()
    _user_quota(qm, 1)
    qm.record_exempt_request_time(1_000 * MS, now_ms=0)
    assert qm.exempt_request_rate(now_ms=5_000) == pytest.approx(10.0)
    assert qm.exempt_request_rate(now_ms=11_000) == 0.0


def test_exempt_time_is_not_recorded_while_request_quotas_are_disabled(impl, mk):
    """``maybeRecordExempt`` records only ``if (quotasEnabled)``; other types' quotas do not
    count."""
    qm = mk()
    qm.alter_client_quotas([({"user": U}, {"producer_byte_rate": 100,
                                           "controller_mutation_rate": 5})])
    qm.record_exempt_request_time(1_000 * MS, now_ms=0)
    assert qm.exempt_request_rate(now_ms=0) == 0.0
    _user_quota(qm, 1)
    qm.record_exempt_request_time(1_000 * MS, now_ms=0)
    assert qm.exempt_request_rate(now_ms=0) == pytest.approx(10.0)


def test_exempt_time_is_still_recorded_after_the_request_quota_is_removed(impl, mk):
    """The enabled bits are sticky (until restart), so exempt recording continues."""
    qm = mk()
    _user_quota(qm, 1)
    qm.alter_client_quotas([({"user": U}, {"request_percentage": None})])
    qm.record_exempt_request_time(1_000 * MS, now_ms=0)
    assert qm.exempt_request_rate(now_ms=0) == pytest.approx(10.0)


def test_exempt_sensor_clock_never_goes_backwards(impl, mk):
    qm = mk()
    _user_quota(qm, 1)
    qm.record_exempt_request_time(1_000 * MS, now_ms=5_000)
    late = qm.exempt_request_rate(now_ms=5_000)
    assert qm.exempt_request_rate(now_ms=0) == late


def test_exempt_time_does_not_create_client_sensors(kq, one_window_qm):
    _user_quota(one_window_qm, 1)
    one_window_qm.record_exempt_request_time(1_000 * MS, now_ms=0)
    assert one_window_qm.sensor_count(kq.ClientQuotaType.REQUEST) == 0


# ============================================================================ enabled bits


def test_nothing_is_recorded_without_request_quotas(impl, mk):
    """Kafka's ``quotasEnabled``: no request_percentage ever configured -> throttle 0, no rate,
    even with other types' quotas in place."""
    qm = mk(producer_default=1)
    qm.alter_client_quotas([({"user": U}, {"consumer_byte_rate": 1})])
    assert qm.record_request_time(U, C, 10_000 * MS, now_ms=0) == 0
    assert qm.record_and_get_throttle_time_ms(impl.REQUEST, U, C, 1e6, now_ms=0) == 0
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=0) == 0.0


def test_no_request_sensor_without_request_quotas(kq, one_window_qm):
    one_window_qm.alter_client_quotas([({"user": U}, {"producer_byte_rate": 1})])
    one_window_qm.record_request_time(U, C, 10_000 * MS, now_ms=0)
    one_window_qm.record_network_thread_time(U, C, 10_000 * MS, now_ms=0)
    assert one_window_qm.sensor_count(kq.ClientQuotaType.REQUEST) == 0


def test_unlimited_client_is_recorded_but_never_throttled(impl, mk):
    """Request quotas enabled for alice only (user level): bob's time is recorded under his own
    tags, without a limit."""
    qm = mk()
    _user_quota(qm, 1)
    assert qm.record_request_time("bob", C, 10_000 * MS, now_ms=0) == 0
    assert qm.quota_limit(impl.REQUEST, "bob", C) is None
    assert qm.measured_rate(impl.REQUEST, "bob", C, now_ms=0) == pytest.approx(100.0)
