"""KIP-257 callback contract through QuotaManager: caching (counted calls), reset signalling,
quota updates, cluster metadata, replacement at run time, and failure modes."""

import logging
import math
import types

import pytest

import kquota
from kquota import ClientQuotaCallback, ClientQuotaEntity, ClientQuotaType as Q, ClusterMetadata

MAX_THROTTLE = 2**31 - 1
BIG = 10_000_000  # bytes: far over any limit used here in one record


class Counting(ClientQuotaCallback):
    """Users "a" and "b" share group "g"; everyone else is per user. Counts every call."""

    def __init__(self, limit=1000.0):
        self.limit = limit
        self.tag_calls = []
        self.limit_calls = []
        self.updates = []
        self.removes = []
        self.configs = None
        self.closed = 0

    def configure(self, configs):
        self.configs = dict(configs)

    def quota_metric_tags(self, quota_type, principal, client_id):
        self.tag_calls.append((quota_type, principal.name, client_id))
        if principal.name in ("a", "b"):
            return {"group": "g"}
        return {"user": principal.name, "client-id": ""}

    def quota_limit(self, quota_type, metric_tags):
        self.limit_calls.append((quota_type, dict(metric_tags)))
        return self.limit

    def update_quota(self, quota_type, entity, new_value):
        self.updates.append((quota_type, entity, new_value))

    def remove_quota(self, quota_type, entity):
        self.removes.append((quota_type, entity))

    def close(self):
        self.closed += 1


class Resetting(Counting):
    def __init__(self):
        super().__init__()
        self.polls = 0
        self.reset = set()

    def quota_reset_required(self, quota_type):
        self.polls += 1
        if quota_type in self.reset:
            self.reset.discard(quota_type)
            return True
        return False


class Metadata(Counting):
    def __init__(self, answer):
        super().__init__()
        self.answer = answer
        self.seen = []

    def update_cluster_metadata(self, cluster):
        self.seen.append(cluster)
        return self.answer


HANDLES: dict = {}


def drive(qm, n=1000, users=("a", "b", "c"), client="cl", mode="named"):
    """n PRODUCE records per user, through named calls or through one handle per user."""
    if mode == "named":
        for i in range(n):
            for u in users:
                qm.record_and_get_throttle_time_ms(Q.PRODUCE, u, client, 1, now_ms=i)
    else:
        # one handle per connection, kept across calls (a new handle resolves afresh)
        handles = HANDLES.setdefault(id(qm), {})
        for u in users:
            handles.setdefault((u, client), qm.client(u, client))
        for i in range(n):
            for u in users:
                handles[(u, client)].record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)


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


# ---------------------------------------------------------------- replacement and lifecycle


def test_set_callback_replaces_at_run_time_and_closes_the_old_one():
    old, new = Counting(limit=1e12), Counting(limit=1.0)
    qm = kquota.QuotaManager(callback=old)
    h = qm.client("c", "x")
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 100, 0) == 0
    qm.set_callback(new, {"v": 2})
    assert old.closed == 1 and new.closed == 0 and new.configs == {"v": 2}
    assert qm.callback is new
    # the same handle now asks the new callback, once
    for i in range(100):
        throttle = h.record_and_get_throttle_time_ms(Q.PRODUCE, 100, 1 + i)
    assert throttle > 0
    assert len(new.tag_calls) == 1 and len(new.limit_calls) == 1
    # back to the built-in rules: no quota configured, nothing throttles
    qm.set_callback(None)
    assert new.closed == 1 and qm.callback is None
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 200) == 0
    assert qm.quota_metric_tags(Q.PRODUCE, "c", "x") == {"user": "", "client-id": "x"}


def test_a_failing_replacement_leaves_the_old_callback_installed():
    class BadConfig(Counting):
        def configure(self, configs):
            raise RuntimeError("no")

    old = Counting()
    qm = kquota.QuotaManager(callback=old)
    with pytest.raises(kquota.KQuotaError, match=r"BadConfig.configure\(\) failed: no"):
        qm.set_callback(BadConfig())
    assert qm.callback is old and old.closed == 0


def test_plugin_config_errors_stay_quota_config_errors():
    class Strict(Counting):
        def configure(self, configs):
            raise kquota.QuotaConfigError("bad key 'x'")

    with pytest.raises(kquota.QuotaConfigError, match=r"Strict.configure\(\) failed: bad key 'x'") as info:
        kquota.QuotaManager(callback=Strict())
    assert isinstance(info.value, ValueError)


def test_callback_from_dotted_path_and_bad_paths():
    qm = kquota.QuotaManager(
        callback="kquota.plugins.QuotaGroupsCallback",
        callback_configs={"groups": {"g": {"users": ["a"], "quotas": {"producer_byte_rate": 10}}}},
    )
    assert type(qm.callback).__name__ == "QuotaGroupsCallback"
    for spec, message in [
        ("NoDots", "must be a dotted path"),
        ("kquota.plugins.Missing", "cannot load callback class"),
        ("no_such_module_xyz.Cls", "cannot load callback class"),
        ("kquota.plugins.quota_groups.GROUP_TAG", "is not a class"),
        ("kquota.ClientQuotaEntity", "cannot instantiate|is not a ClientQuotaCallback"),
    ]:
        with pytest.raises(kquota.KQuotaError, match=message):
            kquota.QuotaManager(callback=spec)
    with pytest.raises(kquota.KQuotaError, match="lacks quota_metric_tags, quota_limit"):
        kquota.QuotaManager(callback=object())
    with pytest.raises(kquota.QuotaValueError):
        kquota.QuotaManager(callback_configs={"a": 1})
    with pytest.raises(kquota.QuotaValueError):
        kquota.QuotaManager(callback=Counting(), callback_failure="maybe")


def test_close_closes_the_callback_once():
    cb = Counting()
    with kquota.QuotaManager(callback=cb) as qm:
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "x", 1, now_ms=0)
    assert cb.closed == 1
    qm.close()
    assert cb.closed == 1


# ---------------------------------------------------------------- limits 0 and None


def test_limit_zero_blocks_and_none_is_unlimited():
    qm = kquota.QuotaManager(callback=Counting(limit=0))
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "x", 1, now_ms=0) == MAX_THROTTLE
    # request time is bounded by one quota window, as Kafka bounds it
    assert qm.record_request_time("a", "x", 1_000_000, now_ms=0) == 1000
    with pytest.raises(kquota.ThrottlingQuotaExceededError):
        qm.record_controller_mutations("a", "x", 1, now_ms=0, strict=True)
    qm.set_callback(Counting(limit=None))
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "x", BIG, now_ms=1) == 0
    assert qm.quota_limit(Q.PRODUCE, "a", "x") is None


# ---------------------------------------------------------------- failures


OK = object()  # Flaky: answer well


class Flaky(Counting):
    """Answers well until told to fail; then raises or returns ``bad``."""

    def __init__(self, limit=1000.0):
        super().__init__(limit)
        self.bad_tags = OK
        self.bad_limit = OK

    def quota_metric_tags(self, quota_type, principal, client_id):
        tags = super().quota_metric_tags(quota_type, principal, client_id)
        if self.bad_tags is not OK:
            if isinstance(self.bad_tags, Exception):
                raise self.bad_tags
            return self.bad_tags
        return tags

    def quota_limit(self, quota_type, metric_tags):
        limit = super().quota_limit(quota_type, metric_tags)
        if self.bad_limit is not OK:
            if isinstance(self.bad_limit, Exception):
                raise self.bad_limit
            return self.bad_limit
        return limit


BAD_TAGS = [
    RuntimeError("boom"),
    ["not", "a", "dict"],
    None,
    {"user": 1, "client-id": ""},
    {1: "x"},
]
BAD_LIMITS = [RuntimeError("boom"), -1.0, float("nan"), "1000", True, [1]]


@pytest.mark.parametrize("bad", BAD_TAGS, ids=repr)
@pytest.mark.parametrize("failure, expected", [("open", 0), ("closed", MAX_THROTTLE)])
def test_bad_tags_without_a_good_answer_fail_open_or_closed(bad, failure, expected, caplog):
    cb = Flaky()
    cb.bad_tags = bad
    qm = kquota.QuotaManager(callback=cb, callback_failure=failure)
    h = qm.client("c", "x")
    with caplog.at_level(logging.WARNING, logger="kquota.callback"):
        assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", BIG, now_ms=0) == expected
        errors = qm.callback_errors
        assert errors >= 1
        assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 1) == expected
        assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, 2) == expected
    assert qm.callback_errors == errors + 2  # not cached: asked again on every request
    assert "quota_metric_tags" in caplog.text
    # once the callback recovers, its answer applies
    cb.bad_tags = OK
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", 1, now_ms=3) == 0
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, 4) == 0
    assert qm.quota_metric_tags(Q.PRODUCE, "c", "x") == {"user": "c", "client-id": ""}


def test_a_failing_named_request_asks_the_callback_once():
    cb = Flaky()
    cb.bad_tags = RuntimeError("boom")
    qm = kquota.QuotaManager(callback=cb)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", 1, now_ms=0)
    assert len(cb.tag_calls) == 1 and qm.callback_errors == 1


@pytest.mark.parametrize("bad", BAD_LIMITS, ids=repr)
@pytest.mark.parametrize("failure, expected", [("open", 0), ("closed", MAX_THROTTLE)])
def test_bad_limits_without_a_good_answer_fail_open_or_closed(bad, failure, expected, caplog):
    cb = Flaky(limit=1.0)
    cb.bad_limit = bad
    qm = kquota.QuotaManager(callback=cb, callback_failure=failure)
    with caplog.at_level(logging.WARNING, logger="kquota.callback"):
        assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", BIG, now_ms=0) == expected
    assert qm.callback_errors >= 1
    assert "quota_limit" in caplog.text
    errors = qm.callback_errors
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", 1, now_ms=1)
    assert qm.callback_errors == errors + 1  # a failed limit is not cached


@pytest.mark.parametrize("bad", BAD_LIMITS, ids=repr)
def test_bad_limit_after_a_good_one_keeps_the_last_good_limit(bad):
    cb = Flaky(limit=1000.0)
    qm = kquota.QuotaManager(callback=cb, callback_failure="closed")
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", 100, now_ms=0) == 0
    cb.bad_limit = bad
    qm.signal_quota_reset(Q.PRODUCE)
    # neither blocked (fail-closed) nor unthrottled: still the last good 1000 B/s
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", 100, now_ms=1) == 0
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", BIG, now_ms=2) not in (0, MAX_THROTTLE)
    assert qm.callback_errors == 2


@pytest.mark.parametrize("bad", BAD_TAGS, ids=repr)
def test_bad_tags_after_a_good_answer_keep_the_last_good_sensor(bad):
    cb = Flaky(limit=1000.0)
    qm = kquota.QuotaManager(callback=cb, callback_failure="closed")
    h = qm.client("a", "x")
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 0) > 0  # group "g" is over quota
    cb.bad_tags = bad
    qm.signal_quota_reset(Q.PRODUCE)
    t_handle = h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, 1)
    assert qm.callback_errors == 1
    t_named = qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "x", 1, now_ms=2)
    assert qm.callback_errors >= 2
    assert 0 < t_named < MAX_THROTTLE and 0 < t_handle < MAX_THROTTLE  # still group g's sensor
    assert qm.sensor_count(Q.PRODUCE) == 1


def test_failure_logs_are_rate_limited_but_every_failure_is_counted(monkeypatch, caplog):
    clock = types.SimpleNamespace(now=100.0)
    monkeypatch.setattr(kquota.callback, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    cb = Flaky()
    cb.bad_tags = RuntimeError("boom")
    qm = kquota.QuotaManager(callback=cb)
    with caplog.at_level(logging.WARNING, logger="kquota.callback"):
        h = qm.client("c", "x")
        for i in range(50):
            h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)
        assert len(caplog.records) == 1
        clock.now += 1.5
        h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, 60)
    assert len(caplog.records) == 2
    assert "49 more suppressed" in caplog.records[1].getMessage()
    assert qm.callback_errors == 51


def test_failing_lifecycle_methods_are_counted_not_raised():
    class Broken(Counting):
        def update_quota(self, quota_type, entity, new_value):
            raise RuntimeError("update")

        def update_cluster_metadata(self, cluster):
            raise RuntimeError("metadata")

        def quota_reset_required(self, quota_type):
            raise RuntimeError("reset")

        def close(self):
            raise RuntimeError("close")

    qm = kquota.QuotaManager(callback=Broken())
    qm.alter_client_quotas([({"user": "c"}, {"producer_byte_rate": 5})])
    assert qm.update_cluster_metadata(ClusterMetadata(1)) is False
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", 1, now_ms=0) == 0
    before = qm.callback_errors
    assert before == 3
    qm.set_callback(None)  # close raises: counted, the old errors are kept
    assert qm.callback_errors == 4


def test_errors_survive_replacement():
    cb = Flaky()
    cb.bad_limit = math.nan
    qm = kquota.QuotaManager(callback=cb)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", 1, now_ms=0)
    assert qm.callback_errors == 1
    qm.set_callback(Counting())
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "c", "x", 1, now_ms=1)
    assert qm.callback_errors == 1
