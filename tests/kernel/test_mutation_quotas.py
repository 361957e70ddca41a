"""Controller-mutation quotas (KIP-599, ``controller_mutation_rate``): Kafka's token bucket;
the bucket, permissive and strict recording, generic calls, the throttle formula, the rate
metric, limit changes and the enabled bits.

One case per rule of docs/semantics.md and docs/semantics-notes.md ("Controller-mutation
quotas"). Cases that only use the public per-request API run against both the kquota kernel and
the pure-Python oracle (tests/support/oracle.py); validation, error and sensor-count cases are
kquota-only.
"""


import pytest

from oracle import INT32_MAX
from mutation_env import KEY, C, U, _quota, _strict, _tokens
from one_window import mk, one_window, one_window_qm  # noqa: F401 (fixtures)


# ============================================================================ the bucket


@pytest.mark.parametrize("window_num, window_size_seconds, rate, burst", [
    (11, 1, 2, 22), (5, 3, 2, 30), (10, 1, 10, 100), (1, 1, 0.5, 0.5), (11, 2, 0.25, 5.5)])
def test_bucket_starts_full_at_the_burst(impl, mk, window_num, window_size_seconds, rate, burst):
    """burst = window_num * window_size_seconds * Q, full at first use."""
    qm = mk(window_num=window_num, window_size_seconds=window_size_seconds)
    _quota(qm, rate)
    assert qm.record_controller_mutations(U, C, 0, now_ms=123_456) == 0
    assert _tokens(qm, 123_456) == burst


@pytest.mark.parametrize("t0", [0, 7, 10_000_000, 2**45])
def test_bucket_is_full_at_first_use_whatever_the_clock(impl, mk, t0):
    qm = mk()
    _quota(qm, 2)
    assert qm.record_controller_mutations(U, C, 22, now_ms=t0) == 0
    assert _tokens(qm, t0) == 0.0


def test_tokens_are_none_without_a_sensor_or_a_quota(impl, mk):
    qm = mk()
    assert _tokens(qm, 0) is None  # no controller_mutation_rate anywhere
    _quota(qm, 2)
    assert _tokens(qm, 0) is None  # no sensor yet
    qm.record_controller_mutations("bob", C, 1, now_ms=0)
    assert _tokens(qm, 0, user="bob") is None  # bob's sensor has no quota
    h = qm.client(U, C)
    assert h.controller_mutation_tokens(now_ms=0) is None
    h.record_controller_mutations(1, now_ms=0)
    assert h.controller_mutation_tokens(now_ms=0) == 21.0


def test_bucket_refills_over_time_up_to_the_burst(impl, mk):
    """Q = 4/s, burst 44: empty at 0, +1 per 250 ms, never above 44."""
    qm = mk()
    _quota(qm, 4)
    qm.record_controller_mutations(U, C, 44, now_ms=0)
    assert _tokens(qm, 0) == 0.0
    assert _tokens(qm, 250) == 1.0
    assert _tokens(qm, 5_250) == 21.0
    assert _tokens(qm, 11_000) == 44.0
    assert _tokens(qm, 60_000) == 44.0


def test_refill_is_linear_between_records(impl, mk):
    qm = mk()
    _quota(qm, 10)
    assert qm.record_controller_mutations(U, C, 110, now_ms=0) == 0  # 0 left
    assert qm.record_controller_mutations(U, C, 5, now_ms=300) == 200  # 3 - 5 = -2: 200 ms
    assert _tokens(qm, 300) == -2.0
    assert _tokens(qm, 500) == 0.0


def test_backwards_time_never_refills_backwards(impl, mk):
    """Times before the sensor's latest are read as the latest (per-sensor clamp)."""
    qm = mk()
    _quota(qm, 10)
    qm.record_controller_mutations(U, C, 100, now_ms=10_000)  # 10 left
    assert _tokens(qm, 5_000) == 10.0
    assert qm.record_controller_mutations(U, C, 30, now_ms=0) == 2000  # -20 at "10 s"
    assert _tokens(qm, 11_000) == -10.0


# ============================================================================ permissive


def test_permissive_records_then_reports_the_throttle(impl, mk):
    """Q = 10/s, burst 110: the spike is accepted; once in debt the throttle is the time to
    earn the debt back, and every value is recorded anyway."""
    qm = mk()
    _quota(qm, 10)
    assert qm.record_controller_mutations(U, C, 100, now_ms=0) == 0  # 10 left
    assert qm.record_controller_mutations(U, C, 30, now_ms=0) == 2000  # -20
    assert qm.record_controller_mutations(U, C, 10, now_ms=0) == 3000  # -30: still recorded
    assert _tokens(qm, 0) == -30.0
    assert qm.record_controller_mutations(U, C, 0, now_ms=1000) == 2000  # -20 after 1 s
    # mutation-rate: 140 mutations over W = 10 s
    assert qm.measured_rate(impl.CONTROLLER_MUTATION, U, C, now_ms=1000) == pytest.approx(14.0)


def test_permissive_is_the_default_mode(impl, mk):
    qm = mk()
    _quota(qm, 1)
    assert qm.record_controller_mutations(U, C, 12, now_ms=0) == 1000
    assert qm.client(U, C).record_controller_mutations(2, now_ms=0) == 3000


# ============================================================================ strict


def test_strict_accepts_until_in_debt_then_rejects_without_recording(impl, mk):
    qm = mk()
    _quota(qm, 10)
    assert _strict(impl, qm, 100, 0) == 0  # 10 left
    assert _strict(impl, qm, 30, 0) == 0  # -20: a request may take the bucket below zero
    rate = qm.measured_rate(impl.CONTROLLER_MUTATION, U, C, now_ms=0)
    assert _strict(impl, qm, 10, 0) == ("raised", 2000)
    assert _strict(impl, qm, 0, 0) == ("raised", 2000)  # even zero mutations
    assert _tokens(qm, 0) == -20.0  # nothing taken
    assert qm.measured_rate(impl.CONTROLLER_MUTATION, U, C, now_ms=0) == rate  # nothing recorded
    assert _strict(impl, qm, 10, 1000) == ("raised", 1000)  # -10 after 1 s
    assert _strict(impl, qm, 10, 2000) == 0  # 0 tokens: not in debt, accepted -> -10
    assert _tokens(qm, 2000) == -10.0


def test_strict_and_permissive_share_one_bucket(impl, mk):
    qm = mk()
    _quota(qm, 10)
    assert qm.record_controller_mutations(U, C, 120, now_ms=0) == 1000  # permissive: -10
    assert _strict(impl, qm, 1, 0) == ("raised", 1000)
    h = qm.client(U, C)
    with pytest.raises(impl.ThrottlingError) as info:
        h.record_controller_mutations(1, now_ms=500, strict=True)
    assert info.value.throttle_time_ms == 500


def test_strict_rejection_is_a_kquota_error_with_the_throttle(kq, one_window_qm):
    _quota(one_window_qm, 10)
    one_window_qm.record_controller_mutations(U, C, 120, now_ms=0)
    with pytest.raises(kq.ThrottlingQuotaExceededError) as info:
        one_window_qm.record_controller_mutations(U, C, 1, now_ms=0, strict=True)
    err = info.value
    assert isinstance(err, kq.KQuotaError)
    assert not isinstance(err, ValueError)
    assert type(err.throttle_time_ms) is int and err.throttle_time_ms == 1000
    assert "1000" in str(err)


def test_strict_is_not_enforced_without_a_quota(impl, mk):
    qm = mk()
    assert _strict(impl, qm, 1e9, 0) == 0  # no quota configured anywhere
    _quota(qm, 1, entity={"user": "bob"})
    assert _strict(impl, qm, 1e9, 0) == 0  # alice is unlimited
    assert _strict(impl, qm, 1e9, 0) == 0


# ============================================================================ generic calls


def test_generic_record_checks_first_and_returns_the_throttle(impl, mk):
    """ControllerMutationQuotaManager.recordAndGetThrottleTimeMs: checkQuotas, then record only if
    not in debt; the throttle is returned, never raised."""
    qm = mk()
    _quota(qm, 10)
    CM = impl.CONTROLLER_MUTATION
    assert qm.record_and_get_throttle_time_ms(CM, U, C, 100, now_ms=0) == 0
    assert qm.record_and_get_throttle_time_ms(CM, U, C, 30, now_ms=0) == 0  # -20
    assert qm.record_and_get_throttle_time_ms(CM, U, C, 10, now_ms=0) == 2000
    assert _tokens(qm, 0) == -20.0
    assert qm.measured_rate(CM, U, C, now_ms=0) == pytest.approx(13.0)
    assert qm.client(U, C).record_and_get_throttle_time_ms(CM, 5, now_ms=1000) == 1000


def test_record_no_throttle_takes_tokens_without_a_check(impl, mk):
    qm = mk()
    _quota(qm, 10)
    CM = impl.CONTROLLER_MUTATION
    assert qm.record_no_throttle(CM, U, C, 150, now_ms=0) is None
    assert _tokens(qm, 0) == -40.0
    assert qm.record_no_throttle(CM, U, C, 10, now_ms=0) is None  # taken even in debt
    assert _tokens(qm, 0) == -50.0
    assert qm.measured_rate(CM, U, C, now_ms=0) == pytest.approx(16.0)


def test_unrecord_gives_tokens_back_up_to_the_burst(impl, mk):
    """TokenBucketTest.testUnrecord: min(burst, tokens + v); the rate records -v."""
    qm = mk()
    _quota(qm, 10)
    CM = impl.CONTROLLER_MUTATION
    qm.record_controller_mutations(U, C, 100, now_ms=0)  # 10 left
    qm.unrecord(CM, U, C, 50, now_ms=0)
    assert _tokens(qm, 0) == 60.0
    assert qm.measured_rate(CM, U, C, now_ms=0) == pytest.approx(5.0)
    qm.client(U, C).unrecord(CM, 1000, now_ms=0)
    assert _tokens(qm, 0) == 110.0
    assert qm.measured_rate(CM, U, C, now_ms=0) == pytest.approx(-95.0)


# ============================================================================ throttle formula


@pytest.mark.parametrize("over, expected", [(0.5, 1), (1.5, 2), (2.5, 3), (2.25, 2), (2.75, 3)])
def test_throttle_rounds_half_up_like_java(impl, mk, over, expected):
    """round(-tokens / Q * 1000) with Java's half-up (Python's round(2.5) would give 2).
    Q = 1000/s so the throttle is exactly the debt in ms."""
    qm = mk()
    _quota(qm, 1000)
    assert qm.record_controller_mutations(U, C, 11_000 + over, now_ms=0) == expected


def test_throttle_saturates_at_int32_max(impl, mk):
    qm = mk()
    _quota(qm, 0.001)
    assert qm.record_controller_mutations(U, C, 1e9, now_ms=0) == INT32_MAX
    assert _strict(impl, qm, 1, 0) == ("raised", INT32_MAX)


def test_throttle_is_zero_at_exactly_zero_tokens(impl, mk):
    qm = mk()
    _quota(qm, 10)
    assert qm.record_controller_mutations(U, C, 110, now_ms=0) == 0
    assert _strict(impl, qm, 1, 0) == 0


# ============================================================================ rate metric


def test_mutation_rate_reports_what_was_recorded(impl, mk):
    """30 mutations at t = 0 over W = (11 - 1) windows of 1 s: 3.0 per second."""
    qm = mk()
    _quota(qm, 2)
    qm.record_controller_mutations(U, C, 30, now_ms=0)
    assert qm.measured_rate(impl.CONTROLLER_MUTATION, U, C, now_ms=0) == 3.0
    assert qm.measured_rate(impl.CONTROLLER_MUTATION, U, C, now_ms=11_000) == 0.0


def test_unlimited_client_records_the_rate_and_leaves_no_bucket(impl, mk):
    qm = mk()
    _quota(qm, 1)
    assert qm.record_controller_mutations("bob", C, 1000, now_ms=0) == 0
    assert qm.measured_rate(impl.CONTROLLER_MUTATION, "bob", C, now_ms=0) == 100.0
    assert _tokens(qm, 0, user="bob") is None


# ============================================================================ limit changes


def test_limit_change_keeps_the_bucket_and_refills_to_the_new_burst(impl, mk):
    qm = mk()
    _quota(qm, 10)
    qm.record_controller_mutations(U, C, 100, now_ms=0)  # 10 left
    _quota(qm, 1)  # burst 11
    assert _tokens(qm, 0) == 10.0
    assert _tokens(qm, 5_000) == 11.0  # capped at the new burst
    _quota(qm, 100)  # burst 1100, refills at the new rate
    assert _tokens(qm, 6_000) == 111.0
    assert _tokens(qm, 60_000) == 1100.0


def test_lowering_the_limit_caps_the_tokens_at_the_new_burst(impl, mk):
    qm = mk()
    _quota(qm, 10)
    qm.record_controller_mutations(U, C, 0, now_ms=0)  # full: 110
    _quota(qm, 2)
    assert _tokens(qm, 0) == 22.0
    assert qm.record_controller_mutations(U, C, 24, now_ms=0) == 1000


def test_a_bucket_in_debt_stays_in_debt_across_a_limit_change(impl, mk):
    qm = mk()
    _quota(qm, 10)
    qm.record_controller_mutations(U, C, 130, now_ms=0)  # -20
    _quota(qm, 20)
    assert _strict(impl, qm, 1, 0) == ("raised", 1000)  # -20 / 20 per second


def test_level_change_uses_a_new_full_bucket(impl, mk):
    qm = mk()
    _quota(qm, 1, entity={"client-id": C})
    qm.record_controller_mutations(U, C, 100, now_ms=0)
    _quota(qm, 1)  # user level wins now: tags (alice, ""), a new sensor
    assert qm.record_controller_mutations(U, C, 11, now_ms=0) == 0


def test_a_record_while_unlimited_refills_the_bucket_as_kafka_does(kq, one_window_qm):
    _quota(one_window_qm, 1)
    assert one_window_qm.record_controller_mutations(U, C, 16, now_ms=0) == 5000  # -5
    one_window_qm.alter_client_quotas([({"user": U}, {KEY: None})])  # tags stay (alice, ""): unlimited
    assert one_window_qm.record_controller_mutations(U, C, 100, now_ms=1000) == 0
    _quota(one_window_qm, 1)
    # Kafka: min(burst 11, ~9.2e15 - 100) = 11 tokens, the strict request passes.
    assert one_window_qm.record_controller_mutations(U, C, 1, now_ms=1000, strict=True) == 0
    assert one_window_qm.controller_mutation_tokens(U, C, now_ms=1000) == 10.0


def test_bucket_refills_on_a_negative_clock(kq, one_window_qm):
    _quota(one_window_qm, 2)  # burst 22
    assert one_window_qm.record_controller_mutations(U, C, 30, now_ms=-100_000) == 4000  # -8
    assert one_window_qm.controller_mutation_tokens(U, C, now_ms=-90_000) == 12.0  # -8 + 2 * 10


def test_bucket_on_a_negative_clock_starts_full(impl, mk):
    qm = mk()
    _quota(qm, 2)
    assert qm.record_controller_mutations(U, C, 22, now_ms=-100_000) == 0
    assert _tokens(qm, -100_000) == 0.0


# ============================================================================ enabled bits


def test_nothing_is_recorded_without_mutation_quotas(impl, mk):
    qm = mk(producer_default=1, consumer_default=1)
    qm.alter_client_quotas([({"user": U}, {"request_percentage": 1})])
    assert qm.record_controller_mutations(U, C, 1e6, now_ms=0) == 0
    assert _strict(impl, qm, 1e6, 0) == 0
    assert qm.record_and_get_throttle_time_ms(impl.CONTROLLER_MUTATION, U, C, 1e6, now_ms=0) == 0
    assert qm.measured_rate(impl.CONTROLLER_MUTATION, U, C, now_ms=0) == 0.0
    assert _tokens(qm, 0) is None


def test_no_mutation_sensor_without_mutation_quotas(kq, one_window_qm):
    one_window_qm.alter_client_quotas([({"user": U}, {"producer_byte_rate": 1})])
    one_window_qm.record_controller_mutations(U, C, 5, now_ms=0)
    one_window_qm.record_controller_mutations(U, C, 5, now_ms=0, strict=True)
    assert one_window_qm.sensor_count(kq.ClientQuotaType.CONTROLLER_MUTATION) == 0
