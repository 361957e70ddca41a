"""``ClientQuotaType`` is a real ``enum.IntEnum`` defined in Python: the enum protocol,
pickling, its Kafka attributes taken from the core, the one argument conversion, and the members
(never bare ints) coming back from the native side."""

import copy
import enum
import pickle

import pytest

import kquota
from kquota import ClientQuotaCallback, ClientQuotaType as Q, QuotaValueError
from kquota import _kquota
from kquota.quota_type import coerce_quota_type


def test_is_a_python_int_enum():
    assert issubclass(Q, enum.IntEnum) and isinstance(Q.FETCH, enum.Enum)
    assert Q["FETCH"] is Q.FETCH and Q(1) is Q.FETCH
    assert len(list(Q)) == 4
    assert [(t.name, t.value) for t in Q] == [("PRODUCE", 0), ("FETCH", 1), ("REQUEST", 2), ("CONTROLLER_MUTATION", 3)]
    assert Q.PRODUCE < Q.FETCH < Q.REQUEST < Q.CONTROLLER_MUTATION
    assert sorted([Q.REQUEST, Q.PRODUCE]) == [Q.PRODUCE, Q.REQUEST]
    assert Q.FETCH == 1 and hash(Q.FETCH) == hash(1)
    assert Q.members() == list(Q)
    with pytest.raises(ValueError):
        Q(4)
    with pytest.raises(KeyError):
        Q["BOGUS"]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickles_and_copies_to_the_same_member(protocol):
    for t in Q:
        assert pickle.loads(pickle.dumps(t, protocol)) is t
        assert copy.copy(t) is t and copy.deepcopy(t) is t


def test_str_names_the_member():
    assert str(Q.PRODUCE) == "ClientQuotaType.PRODUCE"
    assert f"{Q.FETCH}" == "ClientQuotaType.FETCH"
    assert repr(Q.REQUEST) == "<ClientQuotaType.REQUEST: 2>"


def test_kafka_attributes_come_from_the_core():
    table = _kquota._quota_types()
    assert [(name, value) for name, value, _, _ in table] == [(t.name, t.value) for t in Q]
    assert [t.config_key for t in Q] == [key for _, _, key, _ in table] == list(kquota.CONFIG_KEYS)
    assert [t.metric_group for t in Q] == ["Produce", "Fetch", "Request", "ControllerMutation"]


@pytest.mark.parametrize("value, member", [
    (Q.FETCH, Q.FETCH), ("fetch", Q.FETCH), ("Controller_Mutation", Q.CONTROLLER_MUTATION),
])
def test_coerce_accepts_members_and_names(value, member):
    assert coerce_quota_type(value) is member
    if isinstance(value, str):
        assert Q.from_name(value) is member


@pytest.mark.parametrize("value, error", [
    ("bogus", QuotaValueError), ("\udc80", QuotaValueError),
    (1, TypeError), (True, TypeError), (None, TypeError), (1.0, TypeError),
])
def test_coerce_refuses_what_the_record_calls_refuse(value, error):
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    with pytest.raises(error) as native:
        qm.record_and_get_throttle_time_ms(value, "u", "c", 1, now_ms=0)
    with pytest.raises(error) as handle:
        qm.client("u", "c").record_and_get_throttle_time_ms(value, 1, now_ms=0)
    with pytest.raises(error) as generic:
        qm.quota_limit(value, "u", "c")
    with pytest.raises(error) as coerced:
        coerce_quota_type(value)
    assert str(native.value) == str(handle.value) == str(generic.value) == str(coerced.value)
    with pytest.raises(error):
        qm.delay_queue(value)


def test_every_entry_point_takes_members():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    qm.alter_client_quotas([({"user": "u"}, {"producer_byte_rate": 10, "consumer_byte_rate": 10})])
    h = qm.client("u", "c")
    for t in (Q.PRODUCE, Q.FETCH):
        assert qm.record_and_get_throttle_time_ms(t, "u", "c", 1000, now_ms=0) > 0
        assert h.record_and_get_throttle_time_ms(t, 1000, now_ms=0) > 0
        assert qm.quota_limit(t, "u", "c") == h.quota_limit(t) == 10
    assert qm.quota_limit(Q.REQUEST, "u", "c") is None


class Recording(ClientQuotaCallback):
    def __init__(self):
        self.seen = []

    def quota_metric_tags(self, quota_type, principal, client_id):
        self.seen.append(quota_type)
        return {"user": principal.name, "client-id": ""}

    def quota_limit(self, quota_type, metric_tags):
        self.seen.append(quota_type)
        return 1000.0

    def quota_reset_required(self, quota_type):
        self.seen.append(quota_type)
        return False


def test_members_come_back_from_the_native_side():
    cb = Recording()
    qm = kquota.QuotaManager(callback=cb, expiry_interval_seconds=None)
    qm.record_and_get_throttle_time_ms(Q.FETCH, "u", "c", 1, now_ms=0)
    qm.client("u", "c").record_request_time(1000, now_ms=0)
    assert cb.seen and all(type(t) is Q for t in cb.seen)
    assert Q.FETCH in cb.seen and Q.REQUEST in cb.seen
    assert qm.delay_queue("fetch").quota_type is Q.FETCH
    assert qm.delay_queue(Q.FETCH) is qm.delay_queue("FETCH")


@pytest.mark.parametrize("change, message", [
    ((7, "", 0, "", "producer_byte_rate", 1.0), "unknown entity kind 7"),
    ((2, "u", 9, "", "producer_byte_rate", 1.0), "unknown entity kind 9"),
    ((2, "u", 0, "", "bogus_rate", 1.0), "key bogus_rate: unknown config key"),
])
def test_native_alter_refuses_unknown_kinds_and_keys_with_quota_config_error(change, message):
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    with pytest.raises(kquota.QuotaConfigError, match=message):
        qm._alter([change])
    assert qm.describe_client_quotas() == {}


def test_unknown_quota_types_raise_quota_value_error_everywhere():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    calls = [
        lambda: qm.quota_limit("BOGUS", "u", "c"),
        lambda: qm.quota_metric_tags("BOGUS", "u", "c"),
        lambda: qm.sensor_count("BOGUS"),
        lambda: qm.delay_queue("BOGUS"),
        lambda: qm.client("u", "c").quota_limit("BOGUS"),
        lambda: qm.record_no_throttle("BOGUS", "u", "c", 1),
    ]
    messages = set()
    for call in calls:
        with pytest.raises(QuotaValueError) as e:
            call()
        messages.add(str(e.value))
    assert messages == {'unknown quota type "BOGUS"; expected one of PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION'}


@pytest.mark.process
def test_first_native_read_of_a_member_loads_the_members_in_a_fresh_interpreter():
    # Importing kquota does not load the members into the native side; the first per-request
    # call meets a member before the identity cache is filled and must still take it.
    import subprocess
    import sys

    code = (
        "import kquota\n"
        "qm = kquota.QuotaManager(expiry_interval_seconds=None)\n"
        "qm.alter_client_quotas([({'user': 'u'}, {'producer_byte_rate': 10})])\n"
        "h = qm.client('u', 'c')\n"
        "print(h.record_and_get_throttle_time_ms(kquota.ClientQuotaType.PRODUCE, 1000, 0),\n"
        "      qm.record_and_get_throttle_time_ms(kquota.ClientQuotaType.PRODUCE, 'u', 'c', 1000, 0))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    first, second = map(int, out.stdout.split())
    assert 0 < first < second
