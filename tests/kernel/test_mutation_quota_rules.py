"""Controller-mutation quotas (KIP-599, ``controller_mutation_rate``): tags, precedence and
validation.

One case per rule of docs/semantics.md and docs/semantics-notes.md ("Controller-mutation
quotas"). Cases that only use the public per-request API run against both the kquota kernel and
the pure-Python oracle (tests/support/oracle.py); validation, error and sensor-count cases are
kquota-only.
"""

import math

import pytest

from mutation_env import KEY, C, U, _quota, _strict, _tokens
from quota_levels import LEVEL_CHOICES, LEVELS, assert_resolves_like
from one_window import mk, one_window, one_window_qm  # noqa: F401 (fixtures)


# ============================================================================ tags and precedence

@pytest.mark.parametrize("levels", LEVEL_CHOICES)
def test_tags_and_limits_are_the_same_as_for_byte_quotas(impl, mk, levels):
    qm = mk()
    qm.alter_client_quotas([(LEVELS[i], {"consumer_byte_rate": 10 + i, KEY: 10 + i})
                            for i in levels])
    assert_resolves_like(qm, impl.CONTROLLER_MUTATION, impl.FETCH)


def test_max_value_in_quota_window(impl, mk):
    qm = mk(window_num=5, window_size_seconds=2)
    _quota(qm, 3)
    assert qm.max_value_in_quota_window(impl.CONTROLLER_MUTATION, U, C) == 3 * 4 * 2
    assert qm.max_value_in_quota_window(impl.CONTROLLER_MUTATION, "bob", C) == math.inf


def test_static_byte_defaults_do_not_apply_to_mutations(impl, mk):
    qm = mk(producer_default=100, consumer_default=100)
    assert qm.quota_limit(impl.CONTROLLER_MUTATION, U, C) is None


def test_user_quota_bucket_is_shared_by_the_users_clients(impl, mk):
    qm = mk()
    _quota(qm, 1)
    assert qm.record_controller_mutations(U, "c1", 11, now_ms=0) == 0
    assert _strict(impl, qm, 1, 0, client="c2") == 0  # 0 tokens: not in debt
    assert _strict(impl, qm, 1, 0, client="c3") == ("raised", 1000)


def test_default_user_quota_gives_each_user_their_own_bucket(impl, mk):
    qm = mk()
    _quota(qm, 1, entity={"user": None})
    assert qm.record_controller_mutations("u1", C, 12, now_ms=0) == 1000
    assert qm.record_controller_mutations("u2", C, 11, now_ms=0) == 0
    assert _tokens(qm, 0, user="u1") == -1.0
    assert _tokens(qm, 0, user="u2") == 0.0


# ============================================================================ validation


@pytest.mark.parametrize("value", [0, -0.0, -1, math.nan, math.inf, -math.inf])
def test_bad_controller_mutation_rate_is_rejected_naming_entity_and_key(kq, one_window_qm, value):
    _quota(one_window_qm, 3, entity={"user": "bob"})
    before = one_window_qm.describe_client_quotas()
    with pytest.raises(kq.QuotaConfigError) as info:
        one_window_qm.alter_client_quotas([({"user": "bob"}, {KEY: 5}),
                                ({"user": U, "client-id": C}, {KEY: value})])
    msg = str(info.value)
    assert KEY in msg and U in msg and C in msg, msg
    assert one_window_qm.describe_client_quotas() == before
    assert one_window_qm.quota_limit(kq.ClientQuotaType.CONTROLLER_MUTATION, "bob", C) == 3.0


@pytest.mark.parametrize("value", [0.001, 0.5, 1, 2.75, 1e6])
def test_positive_fractional_rates_are_accepted(kq, one_window_qm, value):
    _quota(one_window_qm, value)
    assert one_window_qm.quota_limit(kq.ClientQuotaType.CONTROLLER_MUTATION, U, C) == value


BAD_COUNTS = [-1, -0.5, math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("mutations", BAD_COUNTS)
@pytest.mark.parametrize("call", ["permissive", "strict", "handle", "handle_strict"])
def test_bad_mutation_counts_raise_value_error_and_record_nothing(kq, one_window_qm, call, mutations):
    _quota(one_window_qm, 10)
    one_window_qm.record_controller_mutations(U, C, 50, now_ms=0)
    h = one_window_qm.client(U, C)
    calls = {
        "permissive": lambda: one_window_qm.record_controller_mutations(U, C, mutations, now_ms=0),
        "strict": lambda: one_window_qm.record_controller_mutations(U, C, mutations, now_ms=0, strict=True),
        "handle": lambda: h.record_controller_mutations(mutations, now_ms=0),
        "handle_strict": lambda: h.record_controller_mutations(mutations, now_ms=0, strict=True),
    }
    count = one_window_qm.sensor_count(kq.ClientQuotaType.CONTROLLER_MUTATION)
    with pytest.raises(kq.QuotaValueError) as info:
        calls[call]()
    assert isinstance(info.value, ValueError) and isinstance(info.value, kq.KQuotaError)
    assert one_window_qm.sensor_count(kq.ClientQuotaType.CONTROLLER_MUTATION) == count
    assert _tokens(one_window_qm, 0) == 60.0
    assert one_window_qm.measured_rate(kq.ClientQuotaType.CONTROLLER_MUTATION, U, C, now_ms=0) == 5.0


def test_bad_counts_on_a_fresh_pair_create_no_sensor(kq, one_window_qm):
    _quota(one_window_qm, 10)
    for bad in BAD_COUNTS:
        with pytest.raises(kq.QuotaValueError):
            one_window_qm.record_controller_mutations("bob", "fresh", bad, now_ms=0)
    assert one_window_qm.sensor_count(kq.ClientQuotaType.CONTROLLER_MUTATION) == 0


def test_bad_counts_raise_even_without_mutation_quotas(kq, one_window_qm):
    with pytest.raises(kq.QuotaValueError):
        one_window_qm.record_controller_mutations(U, C, -1, now_ms=0)
    with pytest.raises(kq.QuotaValueError):
        one_window_qm.record_controller_mutations(U, C, math.nan, now_ms=0, strict=True)


@pytest.mark.parametrize("case", ["str_count", "none_count", "strict_str", "strict_none",
                                  "handle_str_count", "handle_strict_str"])
def test_wrong_argument_types_raise_type_error(kq, one_window_qm, case):
    _quota(one_window_qm, 10)
    h = one_window_qm.client(U, C)
    calls = {
        "str_count": lambda: one_window_qm.record_controller_mutations(U, C, "5", now_ms=0),
        "none_count": lambda: one_window_qm.record_controller_mutations(U, C, None, now_ms=0),
        "strict_str": lambda: one_window_qm.record_controller_mutations(U, C, 5, now_ms=0, strict="yes"),
        "strict_none": lambda: one_window_qm.record_controller_mutations(U, C, 5, now_ms=0, strict=None),
        "handle_str_count": lambda: h.record_controller_mutations("5", now_ms=0),
        "handle_strict_str": lambda: h.record_controller_mutations(5, now_ms=0, strict="yes"),
    }
    with pytest.raises(TypeError):
        calls[case]()
    assert one_window_qm.sensor_count(kq.ClientQuotaType.CONTROLLER_MUTATION) == 0


def test_zero_and_fractional_counts_are_accepted(kq, one_window_qm):
    _quota(one_window_qm, 10)
    assert one_window_qm.record_controller_mutations(U, C, 0, now_ms=0) == 0
    assert one_window_qm.record_controller_mutations(U, C, 0.5, now_ms=0, strict=True) == 0
    assert one_window_qm.controller_mutation_tokens(U, C, now_ms=0) == 109.5


def test_now_ms_none_reads_the_kernel_clock(kq, one_window_qm):
    _quota(one_window_qm, 10)
    assert one_window_qm.record_controller_mutations(U, C, 5) == 0
    assert one_window_qm.record_controller_mutations(U, C, 5, strict=True) == 0
    tokens = one_window_qm.controller_mutation_tokens(U, C)
    assert 100.0 <= tokens <= 110.0


def test_mutation_rate_uses_the_broker_metrics_window_as_kafka_does(kq, make_qm):
    qm = make_qm()
    qm.alter_client_quotas([({"user": U}, {KEY: 2})])
    qm.record_controller_mutations(U, C, 30, now_ms=0)
    # Kafka: W = max(E, (2 - 1) * 30 s) = 30 s -> 30 / 30 = 1.0 per second (kquota: 3.0)
    assert qm.measured_rate(kq.ClientQuotaType.CONTROLLER_MUTATION, U, C, now_ms=0) == 1.0


@pytest.mark.parametrize("now_ms, error", [("5", TypeError), (1.5, TypeError),
                                           (2**50, "QuotaValueError"), (-(2**50), "QuotaValueError")])
def test_bad_now_ms_is_rejected_by_every_mutation_call(kq, one_window_qm, now_ms, error):
    error = getattr(kq, error) if isinstance(error, str) else error
    _quota(one_window_qm, 10)
    h = one_window_qm.client(U, C)
    for call in (lambda: one_window_qm.record_controller_mutations(U, C, 1, now_ms=now_ms),
                 lambda: one_window_qm.record_controller_mutations(U, C, 1, now_ms=now_ms, strict=True),
                 lambda: one_window_qm.controller_mutation_tokens(U, C, now_ms=now_ms),
                 lambda: h.record_controller_mutations(1, now_ms=now_ms),
                 lambda: h.controller_mutation_tokens(now_ms=now_ms)):
        with pytest.raises(error):
            call()
    assert one_window_qm.sensor_count(kq.ClientQuotaType.CONTROLLER_MUTATION) == 0


def test_wrong_name_types_raise_type_error(kq, one_window_qm):
    _quota(one_window_qm, 10)
    with pytest.raises(TypeError):
        one_window_qm.record_controller_mutations(5, C, 1, now_ms=0)
    with pytest.raises(TypeError):
        one_window_qm.controller_mutation_tokens(U, None, now_ms=0)
    assert one_window_qm.sensor_count(kq.ClientQuotaType.CONTROLLER_MUTATION) == 0


def test_a_handle_follows_configuration_changes(impl, mk):
    qm = mk()
    h = qm.client(U, C)
    assert h.record_controller_mutations(1e6, now_ms=0, strict=True) == 0  # not enabled
    _quota(qm, 1)
    assert h.record_controller_mutations(12, now_ms=0) == 1000
    _quota(qm, 2)  # same tags, new limit: the bucket is kept, burst 22
    assert h.controller_mutation_tokens(now_ms=0) == -1.0
    assert h.controller_mutation_tokens(now_ms=1000) == 1.0
    qm.alter_client_quotas([({"user": U, "client-id": C}, {KEY: 5})])  # new level: new bucket
    assert h.record_controller_mutations(55, now_ms=1000, strict=True) == 0
    assert h.controller_mutation_tokens(now_ms=1000) == 0.0
