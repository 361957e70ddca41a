"""Request-time quotas (KIP-124, ``request_percentage``): tags, precedence and validation.

One case per rule of docs/semantics.md and docs/semantics-notes.md ("Request-time
quotas"). Cases that only use the public per-request API run against both the kquota kernel and
the pure-Python oracle (tests/support/oracle.py); cases about validation, errors and sensor counts are
kquota-only.
"""

import math

import pytest

from request_env import MS, C, U, _user_quota
from quota_levels import LEVEL_CHOICES, LEVELS, assert_resolves_like
from one_window import mk, one_window, one_window_qm  # noqa: F401 (fixtures)


# ============================================================================ tags and precedence

@pytest.mark.parametrize("levels", LEVEL_CHOICES)
def test_tags_and_limits_are_the_same_as_for_byte_quotas(impl, mk, levels):
    """The same entities configured with producer_byte_rate and request_percentage give the same
    tags and limits for every (user, client-id)."""
    qm = mk()
    qm.alter_client_quotas([(LEVELS[i], {"producer_byte_rate": 10 + i,
                                         "request_percentage": 10 + i}) for i in levels])
    assert_resolves_like(qm, impl.REQUEST, impl.PRODUCE)


def test_request_quotas_resolve_independently_of_byte_quotas(impl, mk):
    qm = mk()
    qm.alter_client_quotas([({"user": U}, {"producer_byte_rate": 100}),
                            ({"client-id": C}, {"request_percentage": 5})])
    assert qm.quota_metric_tags(impl.PRODUCE, U, C) == {"user": U, "client-id": ""}
    assert qm.quota_metric_tags(impl.REQUEST, U, C) == {"user": "", "client-id": C}
    assert qm.quota_limit(impl.REQUEST, U, C) == 5.0


def test_static_byte_defaults_do_not_apply_to_requests(impl, mk):
    qm = mk(producer_default=100, consumer_default=100)
    assert qm.quota_limit(impl.REQUEST, U, C) is None


def test_user_quota_is_shared_by_the_users_clients(impl, mk):
    qm = mk()
    _user_quota(qm, 1)
    qm.record_request_time(U, "c1", 60 * MS, now_ms=0)
    assert qm.record_request_time(U, "c2", 45 * MS, now_ms=0) == 500  # 10.5 % / 10 s


def test_default_user_quota_gives_each_user_their_own_sensor(impl, mk):
    qm = mk()
    qm.alter_client_quotas([({"user": None}, {"request_percentage": 1})])
    assert qm.record_request_time("u1", C, 100 * MS, now_ms=0) == 0
    assert qm.record_request_time("u2", C, 100 * MS, now_ms=0) == 0
    assert qm.record_request_time("u1", C, 5 * MS, now_ms=0) == 500


def test_limit_change_keeps_the_samples(impl, mk):
    qm = mk()
    _user_quota(qm, 10)
    assert qm.record_request_time(U, C, 105 * MS, now_ms=0) == 0
    _user_quota(qm, 1)
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=0) == pytest.approx(1.05)
    assert qm.record_request_time(U, C, 0, now_ms=0) == 500


def test_level_change_uses_a_new_sensor(impl, mk):
    qm = mk()
    qm.alter_client_quotas([({"client-id": C}, {"request_percentage": 1})])
    qm.record_request_time(U, C, 105 * MS, now_ms=0)
    _user_quota(qm, 1)  # user level now wins for alice: tags (alice, "")
    assert qm.record_request_time(U, C, 0, now_ms=0) == 0


def test_backwards_time_is_read_as_the_sensors_latest(impl, mk):
    qm = mk()
    _user_quota(qm, 1)
    qm.record_request_time(U, C, 100 * MS, now_ms=20_000)
    # at 20 s the sample above is current; "10 s" is read as 20 s, not as a record into the past
    assert qm.record_request_time(U, C, 5 * MS, now_ms=10_000) == 500
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=0) == pytest.approx(1.05)


# ============================================================================ validation


def test_request_percentage_up_to_capacity_is_accepted(kq, one_window_qm):
    one_window_qm.alter_client_quotas([({"user": U}, {"request_percentage": 1100})])
    assert one_window_qm.quota_limit(kq.ClientQuotaType.REQUEST, U, C) == 1100.0
    one_window_qm.alter_client_quotas([({"user": U}, {"request_percentage": 0.001})])
    assert one_window_qm.quota_limit(kq.ClientQuotaType.REQUEST, U, C) == 0.001


@pytest.mark.parametrize("value", [1100.5, 1101, 1e9, 0, -0.0, -1, math.nan, math.inf,
                                   -math.inf])
def test_bad_request_percentage_is_rejected_naming_entity_and_key(kq, one_window_qm, value):
    one_window_qm.alter_client_quotas([({"user": "bob"}, {"producer_byte_rate": 7})])
    before = one_window_qm.describe_client_quotas()
    with pytest.raises(kq.QuotaConfigError) as info:
        one_window_qm.alter_client_quotas([({"user": "bob"}, {"request_percentage": 5}),
                                ({"user": U, "client-id": C}, {"request_percentage": value})])
    msg = str(info.value)
    assert "request_percentage" in msg and U in msg and C in msg, msg
    assert one_window_qm.describe_client_quotas() == before  # nothing applied, not even bob's change
    assert one_window_qm.quota_limit(kq.ClientQuotaType.REQUEST, "bob", C) is None


@pytest.mark.parametrize("io, net, ok, bad", [(2, 1, 300, 300.01), (1, 1, 200, 200.5),
                                              (16, 8, 2400, 2401)])
def test_capacity_follows_the_thread_counts(kq, make_qm, io, net, ok, bad):
    qm = make_qm(num_io_threads=io, num_network_threads=net)
    qm.alter_client_quotas([({"user": U}, {"request_percentage": ok})])
    with pytest.raises(kq.QuotaConfigError, match="request_percentage"):
        qm.alter_client_quotas([({"user": U}, {"request_percentage": bad})])
    assert qm.quota_limit(kq.ClientQuotaType.REQUEST, U, C) == ok


def test_rejected_validate_only_and_rejected_call_record_nothing(kq, one_window_qm):
    with pytest.raises(kq.QuotaConfigError):
        one_window_qm.alter_client_quotas([({"user": U}, {"request_percentage": 2000})], validate_only=True)
    with pytest.raises(kq.QuotaConfigError):
        one_window_qm.alter_client_quotas([({"user": U}, {"request_percentage": 2000})])
    # the enabled bits are not set by a rejected call either: exempt time is not recorded
    one_window_qm.record_exempt_request_time(1_000 * MS, now_ms=0)
    assert one_window_qm.exempt_request_rate(now_ms=0) == 0.0


BAD_NANOS = [-1, -0.5, math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("nanos", BAD_NANOS)
@pytest.mark.parametrize("call", ["request", "network", "handle_request", "handle_network",
                                  "exempt"])
def test_bad_nanoseconds_raise_value_error_and_record_nothing(kq, one_window_qm, call, nanos):
    _user_quota(one_window_qm, 1)
    one_window_qm.record_request_time(U, C, 50 * MS, now_ms=0)
    one_window_qm.record_exempt_request_time(50 * MS, now_ms=0)
    h = one_window_qm.client(U, C)
    calls = {
        "request": lambda: one_window_qm.record_request_time(U, "fresh", nanos, now_ms=0),
        "network": lambda: one_window_qm.record_network_thread_time(U, "fresh", nanos, now_ms=0),
        "handle_request": lambda: h.record_request_time(nanos, now_ms=0),
        "handle_network": lambda: h.record_network_thread_time(nanos, now_ms=0),
        "exempt": lambda: one_window_qm.record_exempt_request_time(nanos, now_ms=0),
    }
    count = one_window_qm.sensor_count(kq.ClientQuotaType.REQUEST)
    with pytest.raises(kq.QuotaValueError) as info:
        calls[call]()
    assert isinstance(info.value, ValueError) and isinstance(info.value, kq.KQuotaError)
    assert one_window_qm.sensor_count(kq.ClientQuotaType.REQUEST) == count
    assert one_window_qm.measured_rate(kq.ClientQuotaType.REQUEST, U, C, now_ms=0) == pytest.approx(0.5)
    assert one_window_qm.exempt_request_rate(now_ms=0) == pytest.approx(0.5)


def test_bad_nanoseconds_raise_even_while_request_quotas_are_disabled(kq, one_window_qm):
    for call in (lambda: one_window_qm.record_request_time(U, C, -1, now_ms=0),
                 lambda: one_window_qm.record_network_thread_time(U, C, math.nan, now_ms=0),
                 lambda: one_window_qm.record_exempt_request_time(math.inf, now_ms=0)):
        with pytest.raises(kq.QuotaValueError):
            call()


@pytest.mark.parametrize("nanos", ["5", None, b"5", [5]])
def test_wrong_nanosecond_types_raise_type_error(kq, one_window_qm, nanos):
    _user_quota(one_window_qm, 1)
    h = one_window_qm.client(U, C)
    for call in (lambda: one_window_qm.record_request_time(U, C, nanos, now_ms=0),
                 lambda: one_window_qm.record_network_thread_time(U, C, nanos, now_ms=0),
                 lambda: one_window_qm.record_exempt_request_time(nanos, now_ms=0),
                 lambda: h.record_request_time(nanos, now_ms=0),
                 lambda: h.record_network_thread_time(nanos, now_ms=0)):
        with pytest.raises(TypeError):
            call()
    assert one_window_qm.sensor_count(kq.ClientQuotaType.REQUEST) == 0


def test_zero_and_fractional_nanoseconds_are_accepted(kq, one_window_qm):
    _user_quota(one_window_qm, 1)
    assert one_window_qm.record_request_time(U, C, 0, now_ms=0) == 0
    assert one_window_qm.record_request_time(U, C, 0.5, now_ms=0) == 0
    one_window_qm.record_exempt_request_time(0, now_ms=0)


def test_now_ms_none_reads_the_kernel_clock(kq, one_window_qm):
    _user_quota(one_window_qm, 1)
    assert one_window_qm.record_request_time(U, C, 1 * MS) == 0
    one_window_qm.record_network_thread_time(U, C, 1 * MS)
    one_window_qm.record_exempt_request_time(1 * MS)
    assert one_window_qm.exempt_request_rate() > 0.0
    assert one_window_qm.measured_rate(kq.ClientQuotaType.REQUEST, U, C) > 0.0


def test_exempt_rate_uses_the_broker_metrics_window_as_kafka_does(make_qm):
    qm = make_qm()
    _user_quota(qm, 1)
    qm.record_exempt_request_time(1_000 * MS, now_ms=0)
    # Kafka: 100 % over W = max(E, (2 - 1) * 30 s) = 30 s -> 3.33 % (kquota: 10.0)
    assert qm.exempt_request_rate(now_ms=0) == pytest.approx(100 / 30)


@pytest.mark.parametrize("now_ms, error", [("5", TypeError), (1.5, TypeError),
                                           (2**50, "QuotaValueError"), (-(2**50), "QuotaValueError")])
def test_bad_now_ms_is_rejected_by_every_request_time_call(kq, one_window_qm, now_ms, error):
    error = getattr(kq, error) if isinstance(error, str) else error
    _user_quota(one_window_qm, 1)
    h = one_window_qm.client(U, C)
    for call in (lambda: one_window_qm.record_request_time(U, C, 1, now_ms=now_ms),
                 lambda: one_window_qm.record_network_thread_time(U, C, 1, now_ms=now_ms),
                 lambda: one_window_qm.record_exempt_request_time(1, now_ms=now_ms),
                 lambda: one_window_qm.exempt_request_rate(now_ms=now_ms),
                 lambda: h.record_request_time(1, now_ms=now_ms),
                 lambda: h.record_network_thread_time(1, now_ms=now_ms)):
        with pytest.raises(error):
            call()
    assert one_window_qm.sensor_count(kq.ClientQuotaType.REQUEST) == 0


def test_wrong_name_types_raise_type_error(kq, one_window_qm):
    _user_quota(one_window_qm, 1)
    with pytest.raises(TypeError):
        one_window_qm.record_request_time(5, C, 1, now_ms=0)
    with pytest.raises(TypeError):
        one_window_qm.record_network_thread_time(U, None, 1, now_ms=0)
    assert one_window_qm.sensor_count(kq.ClientQuotaType.REQUEST) == 0


def test_a_handle_follows_configuration_changes(impl, mk):
    """A handle made before any request quota exists records correctly once one is configured,
    and follows a later level change."""
    qm = mk()
    h = qm.client(U, C)
    assert h.record_request_time(1_000 * MS, now_ms=0) == 0  # not enabled: nothing recorded
    _user_quota(qm, 1)
    assert h.record_request_time(105 * MS, now_ms=0) == 500
    qm.alter_client_quotas([({"user": U, "client-id": C}, {"request_percentage": 2})])
    assert h.record_request_time(105 * MS, now_ms=0) == 0  # (alice, c1): a fresh sensor at 2 %
    assert qm.measured_rate(impl.REQUEST, U, C, now_ms=0) == pytest.approx(1.05)
