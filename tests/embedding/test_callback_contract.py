"""KIP-257 callback contract through QuotaManager: caching (counted calls) and re-asking (reset
signalling, quota updates, cluster metadata). Replacement, limits and failures:
test_callback_lifecycle.py."""


import pytest

import kquota
from kquota import ClientQuotaEntity, ClientQuotaType as Q, ClusterMetadata
from callback_fakes import BIG, HANDLES, Counting, Metadata, Resetting, drive


@pytest.fixture(params=["named", "handle"])
def mode(request):
    HANDLES.clear()
    yield request.param
    HANDLES.clear()


# ---------------------------------------------------------------- caching


def test_cached_requests_ask_tags_once_per_key_and_limit_once_per_tag_set(mode):
    cb = Counting()
    qm = kquota.QuotaManager(callback=cb, callback_configs={"x": 1})
    assert cb.configs == {"x": 1}
    drive(qm, mode=mode)
    # tags once per (type, principal, client-id); the limit once per sensor: {"group"} and c
    assert sorted((int(t), u, c) for t, u, c in cb.tag_calls) == [(int(Q.PRODUCE), u, "cl") for u in "abc"]
    assert sorted((int(t), str(tags)) for t, tags in cb.limit_calls) == sorted(
        [(int(Q.PRODUCE), str({"group": "g"})), (int(Q.PRODUCE), str({"user": "c", "client-id": ""}))]
    )
    assert qm.sensor_count(Q.PRODUCE) == 2  # a and b share one sensor
    assert qm.callback_errors == 0


def test_many_handles_of_one_principal_ask_the_limit_once():
    cb = Counting()
    qm = kquota.QuotaManager(callback=cb)
    for i in range(100):
        qm.client("a", f"c{i}").record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)
    assert len(cb.tag_calls) == 100  # one per (principal, client-id)
    assert len(cb.limit_calls) == 1  # one tag set


def test_named_and_handle_calls_share_the_cached_tags():
    cb = Counting()
    qm = kquota.QuotaManager(callback=cb)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "cl", 1, now_ms=0)
    qm.client("c", "cl").record_and_get_throttle_time_ms(Q.PRODUCE, 1, 1)
    qm.client("c", "cl").record_and_get_throttle_time_ms(Q.PRODUCE, 1, 2)
    assert len(cb.tag_calls) == 1


def test_each_quota_type_is_asked_separately():
    cb = Counting()
    qm = kquota.QuotaManager(callback=cb)
    for i in range(50):
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "cl", 1, now_ms=i)
        qm.record_and_get_throttle_time_ms(Q.FETCH, "a", "cl", 1, now_ms=i)
    assert sorted(int(t) for t, _, _ in cb.tag_calls) == sorted([int(Q.PRODUCE), int(Q.FETCH)])
    assert sorted(int(t) for t, _ in cb.limit_calls) == sorted([int(Q.PRODUCE), int(Q.FETCH)])


def test_shared_tags_share_one_sensor_and_its_throttle():
    qm = kquota.QuotaManager(callback=Counting(limit=1000))
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "x", BIG, now_ms=0) > 0
    # b never recorded anything, but shares a's sensor
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "b", "y", 1, now_ms=1) > 0
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "y", 1, now_ms=1) == 0
    assert qm.quota_metric_tags(Q.PRODUCE, "b", "y") == {"group": "g"}
    assert qm.quota_limit(Q.PRODUCE, "a", "x") == 1000.0
    assert qm.client("b", "y").quota_limit(Q.PRODUCE) == 1000.0


def test_handle_reports_the_callbacks_own_tags():
    qm = kquota.QuotaManager(callback=Counting())
    assert qm.client("a", "x").quota_metric_tags(Q.PRODUCE) == {"group": "g"}


# ---------------------------------------------------------------- re-asking


def test_signal_quota_reset_asks_again_exactly_once_per_key(mode):
    cb = Counting()
    qm = kquota.QuotaManager(callback=cb)
    drive(qm, n=20, mode=mode)
    cb.tag_calls.clear(), cb.limit_calls.clear()
    qm.signal_quota_reset(Q.FETCH)  # another type: PRODUCE stays cached
    drive(qm, n=20, mode=mode)
    assert cb.tag_calls == [] and cb.limit_calls == []
    qm.signal_quota_reset(Q.PRODUCE)
    drive(qm, n=20, mode=mode)
    assert len(cb.tag_calls) == 3 and len(cb.limit_calls) == 2
    cb.tag_calls.clear(), cb.limit_calls.clear()
    qm.signal_quota_reset()  # every type
    drive(qm, n=20, mode=mode)
    assert len(cb.tag_calls) == 3 and len(cb.limit_calls) == 2


def test_quota_reset_required_is_polled_per_request_and_resets_once(mode):
    cb = Resetting()
    qm = kquota.QuotaManager(callback=cb)
    drive(qm, n=10, mode=mode)
    assert cb.polls == 10 * 3  # every record
    cb.tag_calls.clear(), cb.limit_calls.clear()
    cb.reset.add(Q.PRODUCE)
    drive(qm, n=10, mode=mode)
    assert len(cb.tag_calls) == 3 and len(cb.limit_calls) == 2
    assert not cb.reset


def test_changed_limit_after_reset_applies():
    cb = Resetting()
    qm = kquota.QuotaManager(callback=cb)
    h = qm.client("c", "x")
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 5000, 0) == 0
    cb.limit = 1.0
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, 1) == 0  # still the cached 1000
    cb.reset.add(Q.PRODUCE)
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, 2) > 0


def test_alter_client_quotas_forwards_and_asks_again_once_per_key(mode):
    cb = Counting()
    qm = kquota.QuotaManager(callback=cb)
    drive(qm, n=10, mode=mode)
    cb.tag_calls.clear(), cb.limit_calls.clear()
    qm.alter_client_quotas([({"user": "c"}, {"producer_byte_rate": 500, "consumer_byte_rate": 7})])
    assert (Q.PRODUCE, ClientQuotaEntity({"user": "c"}), 500.0) in cb.updates
    assert (Q.FETCH, ClientQuotaEntity({"user": "c"}), 7.0) in cb.updates
    drive(qm, n=10, mode=mode)
    assert len(cb.tag_calls) == 3 and len(cb.limit_calls) == 2
    cb.tag_calls.clear(), cb.limit_calls.clear()
    qm.alter_client_quotas([({"user": "c"}, {"producer_byte_rate": None})])
    assert cb.removes == [(Q.PRODUCE, ClientQuotaEntity({"user": "c"}))]
    drive(qm, n=10, mode=mode)
    assert len(cb.tag_calls) == 3 and len(cb.limit_calls) == 2


def test_validate_only_and_rejected_alters_reach_no_callback():
    cb = Counting()
    qm = kquota.QuotaManager(callback=cb)
    qm.alter_client_quotas([({"user": "c"}, {"producer_byte_rate": 500})], validate_only=True)
    with pytest.raises(kquota.QuotaConfigError):
        qm.alter_client_quotas([({"user": "c"}, {"producer_byte_rate": 5}), ({"user": "d"}, {"nope": 1})])
    assert cb.updates == [] and cb.removes == []


@pytest.mark.parametrize("answer", [True, False])
def test_update_cluster_metadata_asks_again_only_when_the_callback_says_so(answer, mode):
    cb = Metadata(answer)
    qm = kquota.QuotaManager(callback=cb)
    drive(qm, n=10, mode=mode)
    cb.tag_calls.clear(), cb.limit_calls.clear()
    cluster = ClusterMetadata.from_leaders(1, {"t": {0: 1, 1: 2}})
    assert qm.update_cluster_metadata(cluster) is answer
    assert cb.seen == [cluster]
    drive(qm, n=10, mode=mode)
    assert (len(cb.tag_calls), len(cb.limit_calls)) == ((3, 2) if answer else (0, 0))


def test_update_cluster_metadata_without_callback_is_false():
    assert kquota.QuotaManager().update_cluster_metadata(ClusterMetadata(1)) is False


