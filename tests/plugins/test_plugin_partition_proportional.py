"""kquota.plugins.PartitionProportionalCallback end to end through QuotaManager."""

import pytest

import kquota
from callback_fakes import CountsLimitCalls
from kquota import ClientQuotaType as Q, ClusterMetadata
from kquota.plugins import PartitionProportionalCallback

BIG = 10_000_000
MAX_THROTTLE = 2**31 - 1

CONFIGS = {
    "user_topics": {"alice": ["orders", "payments"], "bob": ["logs"]},
    "quotas": {"alice": {"producer_byte_rate": 8000, "request_percentage": 40}},
    "default_quotas": {"producer_byte_rate": 2000},
}


def leaders(orders, payments=(), logs=()):
    return {
        "orders": dict(enumerate(orders)),
        "payments": dict(enumerate(payments)),
        "logs": dict(enumerate(logs)),
    }


class Counting(CountsLimitCalls, PartitionProportionalCallback):
    pass


def broker(broker_id, configs=CONFIGS, callback=None):
    qm = kquota.QuotaManager(callback=callback or PartitionProportionalCallback(), callback_configs=configs)
    qm.broker_id = broker_id
    return qm


def update(qm, layout):
    return qm.update_cluster_metadata(ClusterMetadata.from_leaders(qm.broker_id, layout))


def test_limits_follow_partition_leadership():
    qm = broker(1)
    # before any metadata: the whole total
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == 8000.0
    # alice uses 4 + 4 partitions; broker 1 leads 3 of them
    assert update(qm, leaders([1, 1, 2, 2], [1, 3, 3, None])) is True
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == pytest.approx(8000 * 3 / 8)
    # a leader moves to broker 1: 4 of 8
    assert update(qm, leaders([1, 1, 2, 2], [1, 1, 3, None])) is True
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == pytest.approx(4000)
    # all of alice's partitions move away: the 1 % floor
    assert update(qm, leaders([2, 2, 2, 2], [3, 3, 3, 3])) is True
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == pytest.approx(80)
    # request quotas are not split
    assert qm.quota_limit(Q.REQUEST, "alice", "c") == 40.0


def test_moving_leaders_changes_throttling_on_the_broker():
    qm = broker(1)
    h = qm.client("alice", "c")
    update(qm, leaders([1, 1, 1, 1], [1, 1, 1, 1]))
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 60_000, 0) == 0  # 6000 B/s < 8000
    update(qm, leaders([1, 2, 2, 2], [2, 2, 2, 2]))  # now 1/8: 1000 B/s
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, 1) > 0


def test_shares_across_brokers_add_up_to_the_total():
    layout = leaders([1, 2, 3, 1], [2, 2, 3, 1], [3, 3])
    brokers = [broker(b) for b in (1, 2, 3)]
    for qm in brokers:
        update(qm, layout)
    assert sum(qm.quota_limit(Q.PRODUCE, "alice", "c") for qm in brokers) == pytest.approx(8000)
    # bob has only the default total; his logs partitions all live on broker 3
    assert [qm.quota_limit(Q.PRODUCE, "bob", "c") for qm in brokers] == pytest.approx([20, 20, 2000])


def test_unchanged_shares_do_not_re_ask_the_callback():
    cb = Counting()
    qm = broker(1, callback=cb)
    h = qm.client("alice", "c")
    update(qm, leaders([1, 2]))
    for i in range(100):
        h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)
    assert cb.limit_calls == 1
    # leadership changes elsewhere (bob's topic) leave alice's share alone... but bob's changes
    assert update(qm, leaders([1, 2], logs=[2])) is True
    # same metadata again: False, and nothing is asked again
    assert update(qm, leaders([1, 2], logs=[2])) is False
    for i in range(100, 200):
        h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)
    assert cb.limit_calls == 2  # once after the True update, not after the False one
    # a swap that keeps alice's share (1 of 2 either way) reports no change
    assert update(qm, leaders([2, 1], logs=[2])) is False


def test_totals_from_alter_client_quotas():
    qm = broker(1)
    update(qm, leaders([1, 2], [1, 2]))
    assert qm.quota_limit(Q.FETCH, "alice", "c") is None  # no FETCH total anywhere
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1000, "consumer_byte_rate": 600})])
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == pytest.approx(500)
    assert qm.quota_limit(Q.FETCH, "alice", "c") == pytest.approx(300)
    # removing the altered value falls back to the default-user total (not the configured one)
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": None})])
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == pytest.approx(8000 / 2)
    qm.alter_client_quotas([({"user": None}, {"consumer_byte_rate": 100})])
    assert qm.quota_limit(Q.FETCH, "zed", "c") == 100.0  # not in user_topics: the whole total
    # entities with a client-id are not user totals
    qm.alter_client_quotas([({"user": "zed", "client-id": "c"}, {"consumer_byte_rate": 5})])
    assert qm.quota_limit(Q.FETCH, "zed", "c") == 100.0
    assert qm.quota_metric_tags(Q.FETCH, "zed", "c") == {"user": "zed", "client-id": ""}


def test_min_share_zero_blocks_a_broker_without_the_users_partitions():
    qm = broker(1, {**CONFIGS, "min_share": 0})
    update(qm, leaders([2, 2], [2]))
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == 0.0
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "alice", "c", 1, now_ms=0) == MAX_THROTTLE


def test_topics_missing_from_the_metadata_leave_the_whole_total():
    qm = broker(1)
    assert update(qm, {"other": {0: 1}}) is False  # alice's share stays 1.0
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == 8000.0


def test_proportional_keys_are_configurable():
    qm = broker(1, {**CONFIGS, "proportional": ["request_percentage"]})
    update(qm, leaders([1, 2, 2, 2]))
    assert qm.quota_limit(Q.REQUEST, "alice", "c") == pytest.approx(10)
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") == 8000.0


@pytest.mark.parametrize(
    "configs, message",
    [
        ({"user_topics": ["a"]}, "expected a mapping"),
        ({"user_topics": {"a": "orders"}}, "expected a list of names"),
        ({"user_topics": {"": ["t"]}}, "must not be empty"),
        ({"quotas": {"a": {"producer_byte_rate": -5}}}, "must be >= 0"),
        ({"default_quotas": {"bytes": 1}}, "unknown key"),
        ({"min_share": 1.5}, r"must be >= 0 and <= 1"),
        ({"proportional": ["producer_byte_rate", "x"]}, "unknown key"),
        ({"topics": {}}, "unknown key"),
    ],
)
def test_bad_configs_are_rejected_with_a_clear_message(configs, message):
    with pytest.raises(kquota.QuotaConfigError, match=message):
        kquota.QuotaManager(callback=PartitionProportionalCallback(), callback_configs=configs)
