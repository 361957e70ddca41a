"""kquota.plugins.QuotaGroupsCallback end to end through QuotaManager."""

import pytest

import kquota
from callback_fakes import CountsLimitCalls
from kquota import ClientQuotaType as Q
from kquota.plugins import QuotaGroupsCallback

BIG = 10_000_000
MAX_THROTTLE = 2**31 - 1

CONFIGS = {
    "groups": {
        "analytics": {
            "users": ["alice", "bob", "svc-*"],
            "client_ids": ["etl-*"],
            "quotas": {"producer_byte_rate": 1000, "consumer_byte_rate": 5000},
        },
        "ingest": {
            "users": ["svc-ingest-*"],
            "client_ids": ["loader"],
            "quotas": {"producer_byte_rate": 0},
        },
    }
}


class CountingGroups(CountsLimitCalls, QuotaGroupsCallback):
    def __init__(self):
        super().__init__()
        self.tag_calls = 0

    def quota_metric_tags(self, quota_type, principal, client_id):
        self.tag_calls += 1
        return super().quota_metric_tags(quota_type, principal, client_id)


def manager(configs=CONFIGS, **kw):
    return kquota.QuotaManager(callback=QuotaGroupsCallback(), callback_configs=configs, **kw)


def test_members_share_one_sensor_and_its_throttle():
    qm = manager()
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "alice", "a-1", BIG, now_ms=0) > 0
    # bob and an etl client of some other user never sent much, but share alice's sensor
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "bob", "b-1", 1, now_ms=1) > 0
    assert qm.client("carol", "etl-7").record_and_get_throttle_time_ms(Q.PRODUCE, 1, 2) > 0
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "carol", "other", BIG, now_ms=3) == 0
    assert qm.sensor_count(Q.PRODUCE) == 2  # the group's and carol's own
    for user, client in [("alice", "x"), ("bob", "y"), ("carol", "etl-1"), ("svc-orders", "z")]:
        assert qm.quota_metric_tags(Q.PRODUCE, user, client) == {"quota-group": "analytics"}
        assert qm.quota_limit(Q.PRODUCE, user, client) == 1000.0
    assert qm.measured_rate(Q.PRODUCE, "bob", "y", now_ms=3) == qm.measured_rate(Q.PRODUCE, "alice", "q", now_ms=3) > 0
    # another type has its own group sensor with the group's FETCH quota
    assert qm.quota_limit(Q.FETCH, "bob", "y") == 5000.0


def test_caching_one_tags_call_per_principal_and_one_limit_call_per_group():
    cb = CountingGroups()
    qm = kquota.QuotaManager(callback=cb, callback_configs=CONFIGS)
    handles = [qm.client(u, "c") for u in ("alice", "bob", "svc-x")]
    for i in range(1000):
        for h in handles:
            h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)
    assert (cb.tag_calls, cb.limit_calls) == (3, 1)
    qm.signal_quota_reset(Q.PRODUCE)
    for i in range(1000, 1100):
        for h in handles:
            h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)
    assert (cb.tag_calls, cb.limit_calls) == (6, 2)


def test_membership_rules_exact_then_longest_prefix_then_client_id():
    cb = QuotaGroupsCallback()
    cb.configure(CONFIGS)
    assert cb.group_of("svc-ingest-3", "etl-1").name == "ingest"  # longest user prefix
    assert cb.group_of("svc-orders", "loader").name == "analytics"  # user beats client-id
    assert cb.group_of("nobody", "loader").name == "ingest"
    assert cb.group_of("nobody", "etl-") .name == "analytics"
    assert cb.group_of("nobody", "etl") is None
    assert cb.group_of("alice2", "x") is None


def test_group_quota_zero_blocks():
    qm = manager()
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "svc-ingest-1", "c", 1, now_ms=0) == MAX_THROTTLE


def test_types_the_group_does_not_set_fall_back_to_kafka_precedence():
    qm = manager()
    # ingest sets no FETCH quota: its members are handled like non-members for FETCH
    assert qm.quota_metric_tags(Q.FETCH, "svc-ingest-1", "c") == {"user": "", "client-id": "c"}
    assert qm.quota_limit(Q.FETCH, "svc-ingest-1", "c") is None
    qm.alter_client_quotas([({"user": "svc-ingest-1"}, {"consumer_byte_rate": 300})])
    assert qm.quota_metric_tags(Q.FETCH, "svc-ingest-1", "c") == {"user": "svc-ingest-1", "client-id": ""}
    assert qm.quota_limit(Q.FETCH, "svc-ingest-1", "c") == 300.0
    # ...and a configured user quota never overrides the group's own quota
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 99})])
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == 1000.0


def test_non_members_follow_kafkas_precedence():
    qm = manager()
    qm.alter_client_quotas([
        ({"user": "carol", "client-id": "app"}, {"producer_byte_rate": 10}),
        ({"user": "carol"}, {"producer_byte_rate": 20}),
        ({"user": None}, {"producer_byte_rate": 30}),
        ({"client-id": "tool"}, {"producer_byte_rate": 40}),
    ])
    cases = {
        ("carol", "app"): ({"user": "carol", "client-id": "app"}, 10.0),
        ("carol", "web"): ({"user": "carol", "client-id": ""}, 20.0),
        ("dave", "tool"): ({"user": "dave", "client-id": ""}, 30.0),
        ("a b", "x"): ({"user": "a%20b", "client-id": ""}, 30.0),
    }
    for (user, client), (tags, limit) in cases.items():
        assert qm.quota_metric_tags(Q.PRODUCE, user, client) == tags
        assert qm.quota_limit(Q.PRODUCE, user, client) == limit
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "carol", "app", BIG, now_ms=0) > 0
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": None})])
    assert qm.quota_metric_tags(Q.PRODUCE, "dave", "tool") == {"user": "", "client-id": "tool"}
    assert qm.quota_limit(Q.PRODUCE, "dave", "tool") == 40.0
    qm.alter_client_quotas([({"user": "carol", "client-id": None}, {"producer_byte_rate": 5})])
    assert qm.quota_metric_tags(Q.PRODUCE, "carol", "web") == {"user": "carol", "client-id": "web"}
    assert qm.quota_limit(Q.PRODUCE, "carol", "web") == 5.0


def test_default_unlimited_leaves_non_members_alone():
    qm = manager({**CONFIGS, "default": "unlimited"})
    qm.alter_client_quotas([({"user": "carol"}, {"producer_byte_rate": 1})])
    assert qm.quota_metric_tags(Q.PRODUCE, "carol", "x") == {"user": "carol", "client-id": ""}
    assert qm.quota_limit(Q.PRODUCE, "carol", "x") is None
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "carol", "x", BIG, now_ms=0) == 0


def test_new_group_quotas_at_run_time_through_set_callback():
    qm = manager()
    h = qm.client("alice", "x")
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 5000, 0) == 0
    bigger = {"groups": {"analytics": {"users": ["alice"], "quotas": {"producer_byte_rate": 1e9}}}}
    qm.set_callback("kquota.plugins.QuotaGroupsCallback", bigger)
    assert qm.quota_limit(Q.PRODUCE, "alice", "x") == 1e9
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 1) == 0
    assert qm.quota_metric_tags(Q.PRODUCE, "bob", "x") == {"user": "", "client-id": "x"}


@pytest.mark.parametrize(
    "configs, message",
    [
        ({"groups": []}, "expected a mapping"),
        ({"group": {}}, "unknown key"),
        ({"default": "maybe"}, "'default' must be 'kafka' or 'unlimited'"),
        ({"groups": {"g": {"users": ["a"]}}}, "'quotas' is required"),
        ({"groups": {"g": {"quotas": {"producer_byte_rate": 1}}}}, "needs at least one entry"),
        ({"groups": {"g": {"users": "alice", "quotas": {}}}}, "expected a list of names"),
        ({"groups": {"g": {"users": [""], "quotas": {}}}}, "non-empty str"),
        ({"groups": {"g": {"users": ["a"], "quotas": {"producer_byte_rate": -1}}}}, "must be >= 0"),
        ({"groups": {"g": {"users": ["a"], "quotas": {"producer_byte_rate": float("nan")}}}}, "finite"),
        ({"groups": {"g": {"users": ["a"], "quotas": {"producer_byte_rate": "1"}}}}, "must be a number"),
        ({"groups": {"g": {"users": ["a"], "quotas": {"byte_rate": 1}}}}, "unknown key"),
        ({"groups": {"g": {"users": ["a"], "quotas": {}, "extra": 1}}}, "unknown key"),
        (
            {"groups": {"g": {"users": ["a"], "quotas": {}}, "h": {"users": ["a"], "quotas": {}}}},
            "user 'a' is listed in both group 'g' and group 'h'",
        ),
        ({"groups": {"": {"users": ["a"], "quotas": {}}}}, "must not be empty"),
    ],
)
def test_bad_configs_are_rejected_with_a_clear_message(configs, message):
    with pytest.raises(kquota.QuotaConfigError, match=message):
        kquota.QuotaManager(callback=QuotaGroupsCallback(), callback_configs=configs)


# ---------------------------------------------------------------- non-members vs the built-in rules

from hypothesis import given, settings, strategies as st  # noqa: E402

_USERS = ["u1", "u 2", None]  # None: <default>
_CLIENTS = ["c1", "c2", None]
_ENTITIES = (
    [{"user": u} for u in _USERS]
    + [{"client-id": c} for c in _CLIENTS]
    + [{"user": u, "client-id": c} for u in _USERS for c in _CLIENTS]
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(range(len(_ENTITIES))), st.one_of(st.none(), st.integers(1, 10_000))),
        max_size=12,
    )
)
def test_non_members_get_the_built_in_limit_whatever_is_configured(ops):
    builtin = kquota.QuotaManager()
    groups = manager({"groups": {"g": {"users": ["member"], "quotas": {"producer_byte_rate": 1}}}})
    for index, value in ops:
        entry = [(_ENTITIES[index], {"producer_byte_rate": value})]
        builtin.alter_client_quotas(entry)
        groups.alter_client_quotas(entry)
        for user in ("u1", "u 2", "other"):
            for client in ("c1", "c2", "other"):
                assert groups.quota_limit(Q.PRODUCE, user, client) == builtin.quota_limit(Q.PRODUCE, user, client), (
                    user, client, builtin.describe_client_quotas())
    assert groups.quota_limit(Q.PRODUCE, "member", "c1") == 1.0
