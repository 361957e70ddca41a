"""Hardening: each defect of the audit, as the test that caught it.

Items 3 (watcher), 5 (exporter) and 6 (foreign SQLite file) have their own files:
``test_watcher_resync.py``, ``test_prometheus_limits.py``, ``test_sqlite_foreign.py``.
"""

from __future__ import annotations

import gc
import sys
import threading
import time

import numpy as np
import pytest

import kquota
from kquota import ClientQuotaType as Q
from kquota import KQuotaError, QuotaConfigError, QuotaValueError
from kquota.callback import ClientQuotaCallback
from kquota.plugins.quota_groups import QuotaGroupsCallback
from kquota.response import response_throttle

TEN_YEARS_MS = 10 * 365 * 24 * 3_600_000


def manager(**kw):
    kw.setdefault("expiry_interval_seconds", None)
    return kquota.QuotaManager(**kw)


# ---------------------------------------------------------------- 1. no bypass through a name


@pytest.mark.parametrize(
    "client_id", ["\x02evil", "\x02[[\"user\",\"x\"]]", "\x01callback-failed", "a\x00b", "\x01", "\x02"]
)
@pytest.mark.parametrize("side", ["user", "client_id"])
def test_a_name_is_data_never_an_internal_sentinel(client_id, side):
    qm = manager(callback=QuotaGroupsCallback(), callback_configs={"groups": {}})
    qm.alter_client_quotas([({"user": None, "client-id": None}, {"producer_byte_rate": 1000})])
    user, client = (client_id, "c") if side == "user" else ("u", client_id)
    # 500x over the quota in one window: Kafka's rules throttle it.
    throttle = 0
    for i in range(11):
        throttle = qm.record_and_get_throttle_time_ms(Q.PRODUCE, user, client, 500_000, now_ms=i * 1000)
    assert throttle > 0
    assert qm.quota_limit(Q.PRODUCE, user, client) == 1000
    # Not a callback failure: nothing counted, and the tags are the names themselves.
    assert qm.callback_errors == 0
    plain = manager()
    plain.alter_client_quotas([({"user": None, "client-id": None}, {"producer_byte_rate": 1000})])
    assert qm.quota_metric_tags(Q.PRODUCE, user, client) == plain.quota_metric_tags(Q.PRODUCE, user, client)
    h = qm.client(user, client)
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 500_000, now_ms=11_000) > 0


def test_fail_open_only_for_a_real_callback_error_and_counted():
    class Broken(ClientQuotaCallback):
        def quota_metric_tags(self, quota_type, principal, client_id):
            raise RuntimeError("down")

        def quota_limit(self, quota_type, metric_tags):
            return 10.0

    qm = manager(callback=Broken(), callback_failure="closed")
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", 1, now_ms=0) > 0
    assert qm.callback_errors >= 1
    qm2 = manager(callback=Broken(), callback_failure="open")
    assert qm2.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", 10**9, now_ms=0) == 0
    assert qm2.callback_errors >= 1


# ---------------------------------------------------------------- 2. one stray timestamp


def throttled(qm, name):
    return qm.record_and_get_throttle_time_ms(Q.PRODUCE, name, "c", 100_000)


def test_a_stray_timestamp_expires_no_other_sensor():
    qm = manager(sensor_expiry_seconds=3600)
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 1000})])
    assert throttled(qm, "victim") > 0
    # Another caller passes a timestamp ten years ahead of everyone else's clock.
    qm.record_no_throttle(Q.PRODUCE, "stray", "c", 1, now_ms=qm._estimated_now_ms() + TEN_YEARS_MS)
    assert qm.expire_sensors() == 0
    assert qm.sensor_count(Q.PRODUCE) == 2
    assert throttled(qm, "victim") > 0


def test_a_stray_timestamp_does_not_drive_the_background_thread():
    qm = kquota.QuotaManager(sensor_expiry_seconds=5, expiry_interval_seconds=0.01)
    try:
        qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 1000})])
        assert throttled(qm, "victim") > 0
        qm.record_no_throttle(Q.PRODUCE, "stray", "c", 1, now_ms=TEN_YEARS_MS * 3)
        import time

        time.sleep(0.3)  # ~30 passes of the background thread
        assert qm.sensor_stats(Q.PRODUCE)["expired"] == 0
        assert throttled(qm, "victim") > 0
    finally:
        qm.close()


def test_explicit_now_keeps_kafkas_rule():
    qm = manager()
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 1000})])
    qm.record_no_throttle(Q.PRODUCE, "a", "c", 1, now_ms=0)
    qm.record_no_throttle(Q.PRODUCE, "b", "c", 1, now_ms=TEN_YEARS_MS)
    # The caller's own clock, used consistently: Kafka's `now - lastRecordTime > expiry`.
    assert qm.expire_sensors(now_ms=3_600_000) == 0
    assert qm.expire_sensors(now_ms=3_600_001) == 1
    assert qm.sensor_count(Q.PRODUCE) == 1


# ---------------------------------------------------------------- 4. bytes, not only count


def test_names_longer_than_kafkas_wire_limit_are_refused():
    qm = manager()
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    long = "x" * 32_768
    ok = "x" * 32_767
    for call in (
        lambda: qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", long, 1),
        lambda: qm.record_and_get_throttle_time_ms(Q.PRODUCE, long, "c", 1),
        lambda: qm.record_no_throttle(Q.PRODUCE, "u", long, 1),
        lambda: qm.record_request_time("u", long, 1),
        lambda: qm.client("u", long),
        lambda: qm.alter_client_quotas([({"client-id": long}, {"producer_byte_rate": 1})]),
    ):
        with pytest.raises(QuotaValueError, match="32767"):
            call()
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", ok, 1) == 0
    # Multi-byte characters count in UTF-8 bytes, as on the wire.
    with pytest.raises(QuotaValueError):
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "é" * 16_384, 1)


def test_bytes_of_names_held_are_bounded_by_a_budget():
    budget = 1 << 20
    qm = manager(max_name_bytes=budget)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    for i in range(200):  # 200 x 32 KiB = 6.4 MB of names offered
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", f"{i:05d}" + "x" * 32_000, 1, now_ms=0)
    held, limit, refused = qm._name_bytes()
    assert limit == budget
    assert held <= budget
    assert refused > 0
    assert qm.sensor_count(Q.PRODUCE) < 40
    assert qm.sensor_stats(Q.PRODUCE)["overflowed"] > 0
    # Expiry gives the bytes back.
    qm.expire_sensors(now_ms=10 * 3_600_000)
    assert qm._name_bytes()[0] == 0
    names = {m.name for m in qm.metrics()}
    assert "name-bytes" in names


# ---------------------------------------------------------------- 7. callback answers


class Answers(ClientQuotaCallback):
    def __init__(self, tags=None, limit=1000.0):
        self._tags, self._limit = tags, limit

    def quota_metric_tags(self, quota_type, principal, client_id):
        return self._tags if self._tags is not None else {"user": principal.name, "client-id": client_id}

    def quota_limit(self, quota_type, metric_tags):
        return self._limit


class RaisingItems(dict):
    def items(self):
        raise RuntimeError("items() broke")


class BadBool:
    def __bool__(self):
        raise RuntimeError("bool broke")


@pytest.mark.parametrize(
    "cb",
    [
        Answers(limit=10**400),
        Answers(tags=RaisingItems(user="u", **{"client-id": "c"})),
        Answers(tags={"user": 1, "client-id": "c"}),
        Answers(limit=float("nan")),
        Answers(limit="7"),
    ],
    ids=["huge-limit", "items-raises", "non-str-tag", "nan-limit", "str-limit"],
)
def test_every_callback_error_is_contained_and_counted(cb):
    seen = []
    old, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        qm = manager(callback=cb)
        for i in range(3):
            qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", 10, now_ms=i)
    finally:
        sys.unraisablehook = old
    assert seen == []
    assert qm.callback_errors >= 1


def test_keyboard_interrupt_in_a_callback_is_not_swallowed():
    class Interrupt(Answers):
        def quota_limit(self, quota_type, metric_tags):
            raise KeyboardInterrupt

    qm = manager(callback=Interrupt())
    with pytest.raises(KeyboardInterrupt):
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", 10, now_ms=0)
        for _ in range(10_000):  # the interpreter's next check raises it
            pass


# ---------------------------------------------------------------- 8. bool is not a number


def bool_calls(qm):
    h = qm.client("u", "c")
    return [
        lambda: qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", True),
        lambda: qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", 1, now_ms=True),
        lambda: qm.record_no_throttle(Q.PRODUCE, "u", "c", True),
        lambda: qm.record_no_throttle(Q.PRODUCE, "u", "c", 1, now_ms=False),
        lambda: qm.unrecord(Q.PRODUCE, "u", "c", True),
        lambda: qm.record_network_thread_time("u", "c", True),
        lambda: qm.record_exempt_request_time(True),
        lambda: qm.record_exempt_request_time(1, now_ms=True),
        lambda: qm.record_request_time("u", "c", 1, now_ms=True),
        lambda: qm.record_controller_mutations("u", "c", 1, now_ms=True),
        lambda: qm.measured_rate(Q.PRODUCE, "u", "c", now_ms=True),
        lambda: qm.expire_sensors(now_ms=True),
        lambda: qm.metrics(now_ms=True),
        lambda: h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, now_ms=True),
        lambda: h.record_no_throttle(Q.PRODUCE, True),
        lambda: h.unrecord(Q.PRODUCE, True),
        lambda: h.record_network_thread_time(True),
        lambda: h.record_request_time(1, now_ms=True),
        lambda: h.measured_rate(Q.PRODUCE, now_ms=True),
    ]


def test_bools_are_refused_everywhere():
    qm = manager()
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000, "request_percentage": 50})])
    for i, call in enumerate(bool_calls(qm)):
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"call {i} accepted a bool")


@pytest.mark.parametrize(
    "kw",
    [
        {"producer_default": True},
        {"consumer_default": False},
        {"window_num": True},
        {"window_size_seconds": True},
        {"num_io_threads": True},
        {"metrics_num_samples": True},
        {"controller_window_num": True},
        {"max_name_bytes": True},
    ],
)
def test_constructor_refuses_bools(kw):
    with pytest.raises(TypeError):
        manager(**kw)


# ---------------------------------------------------------------- 9. out-of-range numbers


def test_out_of_range_numbers_are_value_errors():
    qm = manager()
    with pytest.raises(QuotaConfigError):
        qm.alter_client_quotas([({"user": "a"}, {"producer_byte_rate": 2**63})])
    with pytest.raises(QuotaConfigError):
        qm.alter_client_quotas([({"user": "a"}, {"producer_byte_rate": 10**400})])
    qm.alter_client_quotas([({"user": "a"}, {"producer_byte_rate": 2**63 - 1})])
    for kw in ({"producer_default": 2**63}, {"producer_default": 10**400}, {"window_num": 10**400}):
        with pytest.raises(QuotaValueError):
            manager(**kw)
    h = qm.client("a", "c")
    for call in (
        lambda: qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "c", 10**400),
        lambda: qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "c", 1, now_ms=10**400),
        lambda: qm.record_no_throttle(Q.PRODUCE, "a", "c", 10**400),
        lambda: qm.unrecord(Q.PRODUCE, "a", "c", 1, now_ms=10**30),
        lambda: h.record_and_get_throttle_time_ms(Q.PRODUCE, 10**400),
        lambda: h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, now_ms=2**64),
    ):
        with pytest.raises(QuotaValueError):
            call()


# ---------------------------------------------------------------- 10. unrecord keeps rates finite


def test_unrecord_cannot_drive_the_rate_to_minus_infinity():
    qm = manager()
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": 1000})])
    for _ in range(2):
        with pytest.raises(QuotaValueError):
            qm.unrecord(Q.PRODUCE, "u", "c", 1e308, now_ms=0)
    h = qm.client("u", "c")
    with pytest.raises(QuotaValueError):
        h.unrecord(Q.PRODUCE, 1e308, now_ms=0)
    rate = qm.measured_rate(Q.PRODUCE, "u", "c", now_ms=0)
    assert rate == rate and abs(rate) < float("inf")
    # Throttling still works within the same window.
    throttle = 0
    for i in range(5):
        throttle = qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", 100_000, now_ms=i * 100)
    assert throttle > 0
    # The largest accepted value keeps sums finite.
    qm.unrecord(Q.PRODUCE, "v", "c", 2.0**63, now_ms=0)
    qm.unrecord(Q.PRODUCE, "v", "c", 2.0**63, now_ms=0)
    assert abs(qm.measured_rate(Q.PRODUCE, "v", "c", now_ms=0)) < float("inf")


# ---------------------------------------------------------------- 11. lone surrogates on alter


def test_lone_surrogate_on_alter_is_a_value_error_naming_it():
    qm = manager()
    with pytest.raises(QuotaValueError, match="surrogate"):
        qm.alter_client_quotas([({"user": "a\udc80b"}, {"producer_byte_rate": 1000})])
    with pytest.raises(QuotaValueError, match="client-id"):
        qm.alter_client_quotas([({"client-id": "\ud800"}, {"producer_byte_rate": 1000})])
    assert qm.describe_client_quotas() == {}


# ---------------------------------------------------------------- 12. replay arrays changed mid-call


def test_replay_with_arrays_changed_during_the_call_never_panics():
    qm = manager()
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    n = 300_000
    failures = []
    for delay in (0.005, 0.02, 0.05, 0.1):
        ts = np.arange(n, dtype=np.int64)
        types = np.zeros(n, dtype=np.int8)
        ids = np.zeros(n, dtype=np.int32)
        values = np.ones(n, dtype=np.float64)
        out = np.zeros(n, dtype=np.int32)

        def run():
            try:
                qm._replay(ts, types, ids, values, [("u", "c")], out)
            except (KQuotaError, ValueError):
                pass  # a refusal is fine
            except BaseException as e:  # PanicException derives from BaseException
                failures.append(e)

        t = threading.Thread(target=run)
        t.start()
        # After validation has passed the tail, before the records reach it.
        time.sleep(delay)
        ids[-10:] = 1_000_000
        types[-10:] = 99
        t.join()
    assert failures == []


# ---------------------------------------------------------------- 13. use after close


def test_a_closed_manager_refuses_use_clearly():
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    h = qm.client("u", "c")
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", 1) == 0
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 1) == 0
    qm.close()
    assert not qm.expiry_running
    assert qm.closed
    for call in (
        lambda: qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", "c", 1),
        lambda: qm.record_and_get_throttle_time_ms(Q.PRODUCE, "new", "c", 1),
        lambda: qm.record_no_throttle(Q.FETCH, "u", "c", 1),
        lambda: qm.record_request_time("u", "c", 1),
        lambda: h.record_and_get_throttle_time_ms(Q.PRODUCE, 1),
        lambda: qm.client("x", "y").record_and_get_throttle_time_ms(Q.PRODUCE, 1),
        lambda: qm.alter_client_quotas([({"user": "a"}, {"producer_byte_rate": 1})]),
        lambda: qm.record_exempt_request_time(1),
    ):
        with pytest.raises(KQuotaError, match="closed"):
            call()
    qm.close()  # idempotent
    qm = h = call = None  # drop every reference (the lambdas read these names)
    gc.collect()


# ---------------------------------------------------------------- 14. response_throttle


@pytest.mark.parametrize(
    "args,exc",
    [
        ((Q.PRODUCE, True, 0), TypeError),
        ((Q.PRODUCE, 0, False), TypeError),
        ((Q.PRODUCE, 2**31, 0), QuotaValueError),
        ((Q.PRODUCE, 0, 10**400), QuotaValueError),
        ((Q.PRODUCE, -1, 0), QuotaValueError),
        ((Q.REQUEST, 1, 0), QuotaValueError),
        (("PRODUCE", 1, 0), QuotaValueError),
    ],
)
def test_response_throttle_validates_like_the_record_calls(args, exc):
    with pytest.raises(exc):
        response_throttle(*args)
    assert response_throttle(Q.PRODUCE, 2**31 - 1, 0).throttle_time_ms == 2**31 - 1
