"""KIP-257 callback contract through QuotaManager: replacement at run time and lifecycle, limits 0
and None, and failure modes."""

import logging
import math
import types

import pytest

import kquota
from kquota import ClientQuotaType as Q, ClusterMetadata
from callback_fakes import BIG, MAX_THROTTLE, Counting


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
