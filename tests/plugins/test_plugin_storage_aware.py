"""kquota.plugins.StorageAwareCallback end to end through QuotaManager, with a fake disk."""

import logging
import threading
import time
from collections import namedtuple

import pytest

import kquota
from callback_fakes import CountsLimitCalls
from kquota import ClientQuotaType as Q
from kquota.plugins import PushingStorageAwareCallback, StorageAwareCallback
from waiting import wait_until

BIG = 10_000_000
GiB = 2**30
Usage = namedtuple("Usage", "total used free")


class FakeDisk:
    """``disk_usage`` stand-in: free bytes per path, settable by the test."""

    def __init__(self, **free):
        self.free = {f"/data/{k}": v for k, v in free.items()}
        self.total = 100 * GiB
        self.calls = 0
        self.broken = set()

    def __call__(self, path):
        self.calls += 1
        if path in self.broken:
            raise OSError(f"cannot stat {path}")
        free = self.free[path]
        return Usage(self.total, self.total - free, free)


def configs(disk, **extra):
    return {
        "paths": sorted(disk.free),
        "min_free_bytes": 10 * GiB,
        "produce_floor": 1000,
        "check_interval_s": 0,
        "disk_usage": disk,
        **extra,
    }


class CountingStorage(CountsLimitCalls, StorageAwareCallback):
    pass


def test_low_disk_throttles_produce_only():
    disk = FakeDisk(a=50 * GiB, b=50 * GiB)
    cb = StorageAwareCallback()
    qm = kquota.QuotaManager(callback=cb, callback_configs=configs(disk))
    h = qm.client("alice", "app")
    assert not cb.low_disk
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 0) == 0
    disk.free["/data/b"] = 1 * GiB
    assert cb.check_now() is True
    assert cb.low_disk and cb.low_paths == {"/data/a": False, "/data/b": True}
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 1) > 0
    assert qm.quota_limit(Q.PRODUCE, "bob", "x") == 1000.0
    assert h.record_and_get_throttle_time_ms(Q.FETCH, BIG, 1) == 0  # fetch frees no disk space
    assert cb.check_now() is False  # no flip, no reset
    disk.free["/data/b"] = 20 * GiB
    assert cb.check_now() is True
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 2) == 0
    assert qm.quota_limit(Q.PRODUCE, "bob", "x") is None


def test_a_flip_makes_the_kernel_ask_each_produce_limit_again_once():
    disk = FakeDisk(a=50 * GiB)
    cb = CountingStorage()
    qm = kquota.QuotaManager(callback=cb, callback_configs=configs(disk))
    handles = [qm.client(u, "c") for u in ("u1", "u2")]  # both tagged ("", "c"): one sensor
    for i in range(100):
        for h in handles:
            h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)
    assert cb.limit_calls == 1
    disk.free["/data/a"] = 0
    cb.check_now()
    for i in range(100, 200):
        for h in handles:
            h.record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)
    assert cb.limit_calls == 2
    assert cb.quota_reset_required(Q.PRODUCE) is False  # consumed by the kernel's poll


def test_floor_caps_configured_quotas_and_never_raises_them():
    disk = FakeDisk(a=1 * GiB)
    qm = kquota.QuotaManager(callback=StorageAwareCallback(), callback_configs=configs(disk))
    qm.alter_client_quotas([
        ({"user": "slow"}, {"producer_byte_rate": 10, "consumer_byte_rate": 77}),
        ({"user": "fast"}, {"producer_byte_rate": 1e9}),
    ])
    assert qm.quota_limit(Q.PRODUCE, "slow", "c") == 10.0
    assert qm.quota_limit(Q.PRODUCE, "fast", "c") == 1000.0
    assert qm.quota_limit(Q.FETCH, "slow", "c") == 77.0
    assert qm.quota_metric_tags(Q.PRODUCE, "fast", "c") == {"user": "fast", "client-id": ""}


def test_ratio_threshold_and_excluded_users():
    disk = FakeDisk(a=4 * GiB)  # 4 % of 100 GiB
    cfg = configs(disk, excluded_users=["replicator"], min_free_ratio=0.05)
    del cfg["min_free_bytes"]
    cb = StorageAwareCallback()
    qm = kquota.QuotaManager(callback=cb, callback_configs=cfg)
    assert cb.low_disk  # known at configure time
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "alice", "c", BIG, now_ms=0) > 0
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "replicator", "c", BIG, now_ms=0) == 0
    assert qm.quota_metric_tags(Q.PRODUCE, "replicator", "c") == {"excluded-user": "replicator"}
    qm.alter_client_quotas([({"user": "replicator"}, {"consumer_byte_rate": 1})])
    assert qm.quota_limit(Q.FETCH, "replicator", "c") is None


def test_unreadable_path_keeps_its_last_state(caplog):
    disk = FakeDisk(a=1 * GiB)
    cb = StorageAwareCallback()
    cb.configure(configs(disk))
    disk.broken.add("/data/a")
    with caplog.at_level(logging.WARNING, logger="kquota.plugins.storage_aware"):
        assert cb.check_now() is False
    assert cb.low_disk and "cannot read disk usage" in caplog.text


def test_background_thread_detects_low_disk_and_close_stops_it():
    disk = FakeDisk(a=50 * GiB)
    cb = StorageAwareCallback()
    qm = kquota.QuotaManager(callback=cb, callback_configs=configs(disk, check_interval_s=0.01))
    thread = cb._thread
    assert thread is not None and thread.is_alive() and thread.daemon
    h = qm.client("alice", "c")
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 0) == 0
    disk.free["/data/a"] = 0
    # the flag is raised after the state changed: once it is up, the next request resets
    wait_until(lambda: cb._produce_reset, 30, 0.01)
    assert cb.low_disk
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 1) > 0
    qm.close()
    assert not thread.is_alive()
    calls = disk.calls
    time.sleep(0.05)
    assert disk.calls == calls


def test_replacing_the_callback_stops_its_thread():
    disk = FakeDisk(a=50 * GiB)
    cb = StorageAwareCallback()
    qm = kquota.QuotaManager(callback=cb, callback_configs=configs(disk, check_interval_s=3600))
    thread = cb._thread
    qm.set_callback(None)
    assert not thread.is_alive()
    assert thread not in threading.enumerate()


def test_default_disk_usage_reads_a_real_path(tmp_path):
    cb = StorageAwareCallback()
    cb.configure({"paths": [str(tmp_path)], "min_free_bytes": 0, "produce_floor": 1, "check_interval_s": 0})
    assert cb.low_disk is False  # nothing is below 0 free bytes
    assert cb.check_now() is False


@pytest.mark.parametrize(
    "change, message",
    [
        ({"paths": None}, "expected a list of names"),
        ({"paths": []}, "at least one directory"),
        ({"produce_floor": -1}, "must be >= 0"),
        ({"min_free_bytes": "10G"}, "must be a number"),
        ({"min_free_ratio": 2}, "must be >= 0 and <= 1"),
        ({"check_interval_s": -1}, "must be >= 0"),
        ({"disk_usage": 42}, "must be callable"),
        ({"excluded_users": "admin"}, "expected a list of names"),
        ({"paths": ["/data/missing"]}, "cannot read disk usage of '/data/missing'"),
        ({"threshold": 1}, "unknown key"),
    ],
)
def test_bad_configs_are_rejected_with_a_clear_message(change, message):
    cfg = {**configs(FakeDisk(a=GiB)), **change}
    with pytest.raises(kquota.QuotaConfigError, match=message):
        kquota.QuotaManager(callback=StorageAwareCallback(), callback_configs=cfg)


@pytest.mark.parametrize("missing, message", [
    ("paths", "'paths' is required"),
    ("produce_floor", "'produce_floor'"),
    ("min_free_bytes", "set 'min_free_bytes' and/or 'min_free_ratio'"),
])
def test_required_configs(missing, message):
    cfg = configs(FakeDisk(a=GiB))
    del cfg[missing]
    with pytest.raises(kquota.QuotaConfigError, match=message):
        StorageAwareCallback().configure(cfg)


# ---------------------------------------------------------------- pushing variant


def test_pushing_variant_is_not_polled_and_pushes_flips():
    disk = FakeDisk(a=50 * GiB)
    qm = kquota.QuotaManager()
    cb = PushingStorageAwareCallback()
    signals = []

    def signal(quota_type):
        signals.append(quota_type)
        qm.signal_quota_reset(quota_type)

    qm.set_callback(cb, configs(disk, signal_reset=signal))
    assert qm._adapter.polls_reset is False
    h = qm.client("alice", "c")
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 0) == 0
    disk.free["/data/a"] = 0
    assert cb.check_now() is True
    assert signals == [Q.PRODUCE]
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 1) > 0
    assert cb.quota_reset_required(Q.PRODUCE) is False
    disk.free["/data/a"] = 50 * GiB
    assert cb.check_now() is True and len(signals) == 2
    assert qm.quota_limit(Q.PRODUCE, "alice", "c") is None


def test_pushing_variant_from_its_thread():
    disk = FakeDisk(a=50 * GiB)
    qm = kquota.QuotaManager()
    cb = PushingStorageAwareCallback()
    pushed = threading.Event()

    def signal(quota_type):
        qm.signal_quota_reset(quota_type)
        pushed.set()

    qm.set_callback(cb, configs(disk, check_interval_s=0.01, signal_reset=signal))
    h = qm.client("alice", "c")
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 0) == 0
    disk.free["/data/a"] = 0
    assert pushed.wait(30)
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, BIG, 1) > 0
    thread = cb._thread
    qm.close()
    assert not thread.is_alive()


@pytest.mark.parametrize("signal", [None, 5])
def test_pushing_variant_needs_signal_reset(signal):
    cfg = configs(FakeDisk(a=GiB))
    if signal is not None:
        cfg["signal_reset"] = signal
    with pytest.raises(kquota.QuotaConfigError, match="'signal_reset' must be the manager's signal_quota_reset"):
        PushingStorageAwareCallback().configure(cfg)
    with pytest.raises(kquota.QuotaConfigError, match="unknown key"):
        StorageAwareCallback().configure({**cfg, "signal_reset": print})
