"""Configuration and argument validation (kquota only)."""

import math

import pytest

BYTE_KEYS = ["producer_byte_rate", "consumer_byte_rate"]


def _types(kq):
    return kq.ClientQuotaType.PRODUCE, kq.ClientQuotaType.FETCH


def assert_rejected(kq, qm, entries, *needles, validate_only=False):
    """The call raises QuotaConfigError naming every needle, and nothing is applied."""
    P, F = _types(kq)
    before = qm.describe_client_quotas()
    tags_before = [qm.quota_metric_tags(t, u, c) for t in (P, F)
                   for u in ("alice", "bob") for c in ("c1", "c2")]
    with pytest.raises(kq.QuotaConfigError) as info:
        qm.alter_client_quotas(entries, validate_only=validate_only)
    message = str(info.value)
    for needle in needles:
        assert needle in message, (needle, message)
    assert qm.describe_client_quotas() == before
    assert [qm.quota_metric_tags(t, u, c) for t in (P, F)
            for u in ("alice", "bob") for c in ("c1", "c2")] == tags_before
    return info.value


# ============================================================================ exception types


def test_exception_hierarchy(kq):
    assert issubclass(kq.QuotaConfigError, kq.KQuotaError)
    assert issubclass(kq.QuotaConfigError, ValueError)
    assert issubclass(kq.KQuotaError, Exception)
    assert issubclass(kq.ThrottlingQuotaExceededError, kq.KQuotaError)


# ============================================================================ config values


BAD_BYTE_RATES = [
    "100", b"100", True, False, float("nan"), float("inf"), float("-inf"), -1, -1024.0, 0, 0.0,
    -0.0, 1.5, 1024.000001, 2**64, 1e300, [100], object(), 1 + 0j,
]


@pytest.mark.parametrize("key", BYTE_KEYS)
def _value_id(value) -> str:
    """A stable id (pytest -n collects on every worker, and an object's repr names its address)."""
    return type(value).__name__ if type(value) is object else repr(value)


@pytest.mark.parametrize("value", BAD_BYTE_RATES, ids=_value_id)
@pytest.mark.parametrize("entity,name", [
    ({"user": "alice"}, "alice"),
    ({"client-id": "client-x"}, "client-x"),
    ({"user": "alice", "client-id": None}, "alice"),
], ids=["user", "client", "user-default-client"])
def test_bad_byte_rate_is_rejected(kq, qm, key, value, entity, name):
    assert_rejected(kq, qm, [(entity, {key: value})], name, key)


@pytest.mark.parametrize("key", BYTE_KEYS)
@pytest.mark.parametrize("value", [1, 1024, 1024.0, 2**40, 1e15, 5e3])
def test_integral_byte_rate_is_accepted(kq, qm, key, value):
    qm.alter_client_quotas([({"user": "alice"}, {key: value})])
    described = qm.describe_client_quotas()[kq.ClientQuotaEntity({"user": "alice"})]
    assert described == {key: float(value)}
    assert type(described[key]) is float


@pytest.mark.parametrize("value", ["5", True, float("nan"), float("inf"), -1, 0, 0.0, 1100.5,
                                   1e9, [1]])
def test_bad_request_percentage_is_rejected(kq, qm, value):
    assert_rejected(kq, qm, [({"user": "alice"}, {"request_percentage": value})],
                    "alice", "request_percentage")


@pytest.mark.parametrize("value", [0.5, 1, 12.5, 1100, 1100.0])
def test_request_percentage_up_to_capacity_is_accepted(kq, qm, value):
    qm.alter_client_quotas([({"client-id": "c1"}, {"request_percentage": value})])
    assert qm.describe_client_quotas() == {
        kq.ClientQuotaEntity({"client-id": "c1"}): {"request_percentage": float(value)}}


def test_request_percentage_capacity_follows_thread_counts(kq, make_qm):
    qm = make_qm(num_io_threads=2, num_network_threads=1)
    qm.alter_client_quotas([({"user": "alice"}, {"request_percentage": 300})])
    assert_rejected(kq, qm, [({"user": "bob"}, {"request_percentage": 300.01})],
                    "bob", "request_percentage")
    assert_rejected(kq, qm, [({"user": "bob"}, {"request_percentage": 1100})],
                    "bob", "request_percentage")


@pytest.mark.parametrize("value", ["x", True, float("nan"), float("inf"), -1, 0, -0.5])
def test_bad_controller_mutation_rate_is_rejected(kq, qm, value):
    assert_rejected(kq, qm, [({"user": "alice"}, {"controller_mutation_rate": value})],
                    "alice", "controller_mutation_rate")


@pytest.mark.parametrize("value", [0.5, 1, 1e9])
def test_controller_mutation_rate_is_accepted(kq, qm, value):
    qm.alter_client_quotas([({"user": "alice"}, {"controller_mutation_rate": value})])
    assert qm.describe_client_quotas() == {
        kq.ClientQuotaEntity({"user": "alice"}): {"controller_mutation_rate": float(value)}}


@pytest.mark.parametrize("key", ["producer_rate", "Producer_byte_rate", "", "ip_connection_rate",
                                 "quota.producer.default"])
def test_unknown_key_is_rejected(kq, qm, key):
    err = assert_rejected(kq, qm, [({"user": "alice"}, {key: 100})], "alice")
    if key:
        assert key in str(err)


# ============================================================================ entities


@pytest.mark.parametrize("entity,needle", [
    ({"ip": "10.0.0.1"}, "ip"),
    ({"users": "alice"}, "users"),
    ({"user": "alice", "client": "c1"}, "client"),
    ({"clientId": "c1"}, "clientId"),
])
def test_unknown_entity_type_is_rejected(kq, qm, entity, needle):
    assert_rejected(kq, qm, [(entity, {"producer_byte_rate": 100})], needle)


@pytest.mark.parametrize("entity,needle", [
    ({"user": ""}, "user"),
    ({"client-id": ""}, "client-id"),
    ({"user": "alice", "client-id": ""}, "client-id"),
    ({"user": "", "client-id": None}, "user"),
])
def test_empty_name_is_rejected(kq, qm, entity, needle):
    assert_rejected(kq, qm, [(entity, {"producer_byte_rate": 100})], needle)


def test_empty_entity_is_rejected(kq, qm):
    assert_rejected(kq, qm, [({}, {"producer_byte_rate": 100})])


@pytest.mark.parametrize("second", ["mapping", "entity", "reordered"])
def test_same_entity_twice_in_one_call_is_rejected(kq, qm, second):
    first = {"user": "alice", "client-id": "c1"}
    other = {"mapping": dict(first), "entity": kq.ClientQuotaEntity(first),
             "reordered": {"client-id": "c1", "user": "alice"}}[second]
    assert_rejected(kq, qm, [
        ({"user": "bob"}, {"producer_byte_rate": 10}),
        (first, {"producer_byte_rate": 100}),
        (other, {"producer_byte_rate": 200}),
    ], "alice", "producer_byte_rate")
    assert_rejected(kq, qm, [
        ({"user": None}, {"consumer_byte_rate": 10}),
        ({"user": None}, {"consumer_byte_rate": None}),
    ], "consumer_byte_rate")


def test_default_and_literal_default_are_different_entities(kq, qm):
    qm.alter_client_quotas([
        ({"user": None}, {"producer_byte_rate": 1}),
        ({"user": "<default>"}, {"producer_byte_rate": 2}),
    ])
    assert len(qm.describe_client_quotas()) == 2


# ============================================================================ atomicity


def test_valid_entries_before_an_invalid_one_are_not_applied(kq, qm):
    P, _ = _types(kq)
    qm.alter_client_quotas([({"client-id": "c1"}, {"producer_byte_rate": 5})])
    assert_rejected(kq, qm, [
        ({"user": "alice"}, {"producer_byte_rate": 100}),
        ({"client-id": "c1"}, {"producer_byte_rate": None}),
        ({"user": None, "client-id": None}, {"consumer_byte_rate": 100}),
        ({"user": "bob"}, {"producer_byte_rate": -1}),
    ], "bob", "producer_byte_rate")
    assert qm.quota_limit(P, "alice", "c1") == 5
    assert qm.quota_metric_tags(P, "alice", "c1") == {"user": "", "client-id": "c1"}


def test_invalid_key_in_the_same_entity_rejects_the_whole_call(kq, qm):
    P, F = _types(kq)
    assert_rejected(kq, qm, [
        ({"user": "alice"}, {"producer_byte_rate": 100, "consumer_byte_rate": "x"}),
    ], "alice", "consumer_byte_rate")
    # no enabled bit was set by the rejected call: records stay no-ops
    assert qm.record_and_get_throttle_time_ms(P, "alice", "c1", 10**9, now_ms=0) == 0
    assert qm.measured_rate(P, "alice", "c1", now_ms=0) == 0.0


def test_validate_only_applies_nothing(kq, qm):
    P, F = _types(kq)
    qm.alter_client_quotas([
        ({"user": "alice"}, {"producer_byte_rate": 100}),
        ({"client-id": "c1"}, {"consumer_byte_rate": 100}),
    ], validate_only=True)
    assert qm.describe_client_quotas() == {}
    assert qm.quota_limit(P, "alice", "c1") is None
    assert qm.quota_metric_tags(F, "alice", "c1") == {"user": "", "client-id": "c1"}
    assert qm.record_and_get_throttle_time_ms(P, "alice", "c1", 10**9, now_ms=0) == 0
    assert qm.record_and_get_throttle_time_ms(F, "alice", "c1", 10**9, now_ms=0) == 0
    # validate_only still validates
    assert_rejected(kq, qm, [({"user": "alice"}, {"producer_byte_rate": 0})],
                    "alice", "producer_byte_rate", validate_only=True)


def test_alter_accepts_mappings_entities_and_any_iterable(kq, make_qm):
    E = kq.ClientQuotaEntity
    a, b = make_qm(), make_qm()
    a.alter_client_quotas([({"user": "alice", "client-id": None}, {"producer_byte_rate": 10})])
    b.alter_client_quotas(
        (e, ops) for e, ops in [(E({"client-id": None, "user": "alice"}),
                                 {"producer_byte_rate": 10})])
    assert a.describe_client_quotas() == b.describe_client_quotas() == {
        E({"user": "alice", "client-id": None}): {"producer_byte_rate": 10.0}}


def test_removing_an_absent_key_is_accepted(kq, qm):
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": None})])
    assert qm.describe_client_quotas() == {}


# ============================================================================ ClientQuotaEntity


def test_client_quota_entity(kq):
    E = kq.ClientQuotaEntity
    a = E({"user": "alice", "client-id": None})
    assert a.entries == {"user": "alice", "client-id": None}
    assert a == E({"client-id": None, "user": "alice"})
    assert hash(a) == hash(E({"client-id": None, "user": "alice"}))
    assert a != E({"user": "alice"})
    assert a != E({"user": "alice", "client-id": "c1"})
    assert E({"user": None}) != E({"user": "<default>"})
    assert E({"user": None}).entries == {"user": None}
    assert E({"client-id": "c1"}).entries == {"client-id": "c1"}
    assert len({a, E({"client-id": None, "user": "alice"}), E({"user": "alice"})}) == 2
    d = {a: 1}
    assert d[E({"user": "alice", "client-id": None})] == 1
    # immutable: the returned mapping is a copy, and the entity cannot be changed
    entries = a.entries
    entries["user"] = "mallory"
    assert a.entries == {"user": "alice", "client-id": None}
    with pytest.raises(TypeError):
        a["user"] = "mallory"


# ============================================================================ per-request arguments


@pytest.fixture
def enabled_qm(qm):
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000,
                                                    "consumer_byte_rate": 1000})])
    return qm


def _record_calls(kq, qm):
    P = kq.ClientQuotaType.PRODUCE
    h = qm.client("alice", "c1")
    return {
        "record": lambda v: qm.record_and_get_throttle_time_ms(P, "alice", "c1", v, now_ms=0),
        "no_throttle": lambda v: qm.record_no_throttle(P, "alice", "c1", v, now_ms=0),
        "unrecord": lambda v: qm.unrecord(P, "alice", "c1", v, now_ms=0),
        "handle_record": lambda v: h.record_and_get_throttle_time_ms(P, v, now_ms=0),
        "handle_no_throttle": lambda v: h.record_no_throttle(P, v, now_ms=0),
        "handle_unrecord": lambda v: h.unrecord(P, v, now_ms=0),
    }


@pytest.mark.parametrize("call", ["record", "no_throttle", "unrecord", "handle_record",
                                  "handle_no_throttle", "handle_unrecord"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), -1, -0.5, -1e300],
                         ids=repr)
def test_bad_record_value_raises_value_error(kq, enabled_qm, call, value):
    P = kq.ClientQuotaType.PRODUCE
    with pytest.raises(ValueError):
        _record_calls(kq, enabled_qm)[call](value)
    assert enabled_qm.measured_rate(P, "alice", "c1", now_ms=0) == 0.0


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.5, 10**6])
def test_good_record_values_are_accepted(kq, enabled_qm, value):
    for call in _record_calls(kq, enabled_qm).values():
        call(value)


@pytest.mark.parametrize("case", [
    "user_int", "client_int", "value_str", "value_none", "now_str", "quota_type_int",
    "quota_type_none", "handle_quota_type_int", "handle_value_str", "handle_now_str",
    "client_user_int", "tags_quota_type_int", "limit_user_int", "rate_now_str",
])
def test_wrong_argument_types_raise_type_error(kq, enabled_qm, case):
    qm = enabled_qm
    P = kq.ClientQuotaType.PRODUCE
    h = qm.client("alice", "c1")
    calls = {
        "user_int": lambda: qm.record_and_get_throttle_time_ms(P, 5, "c1", 1, now_ms=0),
        "client_int": lambda: qm.record_and_get_throttle_time_ms(P, "alice", 5, 1, now_ms=0),
        "value_str": lambda: qm.record_and_get_throttle_time_ms(P, "alice", "c1", "x", now_ms=0),
        "value_none": lambda: qm.record_and_get_throttle_time_ms(P, "alice", "c1", None,
                                                                 now_ms=0),
        "now_str": lambda: qm.record_and_get_throttle_time_ms(P, "alice", "c1", 1, now_ms="x"),
        "quota_type_int": lambda: qm.record_and_get_throttle_time_ms(42, "alice", "c1", 1,
                                                                     now_ms=0),
        "quota_type_none": lambda: qm.record_and_get_throttle_time_ms(None, "alice", "c1", 1,
                                                                      now_ms=0),
        "handle_quota_type_int": lambda: h.record_and_get_throttle_time_ms(42, 1, now_ms=0),
        "handle_value_str": lambda: h.record_and_get_throttle_time_ms(P, "x", now_ms=0),
        "handle_now_str": lambda: h.record_and_get_throttle_time_ms(P, 1, now_ms="x"),
        "client_user_int": lambda: qm.client(5, "c1"),
        "tags_quota_type_int": lambda: qm.quota_metric_tags(42, "alice", "c1"),
        "limit_user_int": lambda: qm.quota_limit(P, 5, "c1"),
        "rate_now_str": lambda: qm.measured_rate(P, "alice", "c1", now_ms="x"),
    }
    with pytest.raises(TypeError):
        calls[case]()
    assert qm.measured_rate(P, "alice", "c1", now_ms=0) == 0.0


def test_now_ms_none_reads_the_kernel_clock(kq, enabled_qm):
    P = kq.ClientQuotaType.PRODUCE
    assert enabled_qm.record_and_get_throttle_time_ms(P, "alice", "c1", 100) == 0
    rate = enabled_qm.measured_rate(P, "alice", "c1")
    assert math.isclose(rate, 10.0, rel_tol=0.05)
