"""Sensor expiry and the live-sensor cap, through the Python API."""

from __future__ import annotations

import gc

import pytest

import kquota
from kquota import ClientQuotaType as Q
from waiting import wait_until

HOUR = 3_600_000


def manager(**kw):
    kw.setdefault("expiry_interval_seconds", None)
    qm = kquota.QuotaManager(**kw)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    return qm


def rss_kb():
    """This process's resident memory (KiB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_expiry_is_strict_like_kafkas_has_expired():
    qm = manager()
    qm.record_no_throttle(Q.PRODUCE, "u", "c", 10, now_ms=100)
    assert qm.expire_sensors(now_ms=100 + HOUR) == 0
    assert qm.sensor_count(Q.PRODUCE) == 1
    assert qm.expire_sensors(now_ms=101 + HOUR) == 1
    assert qm.sensor_count(Q.PRODUCE) == 0
    assert qm.sensor_stats(Q.PRODUCE) == {"live": 0, "overflowed": 0, "expired": 1}


def test_configured_expiry_time():
    qm = manager(sensor_expiry_seconds=60)
    qm.record_no_throttle(Q.PRODUCE, "u", "c", 10, now_ms=0)
    assert qm.expire_sensors(now_ms=60_000) == 0
    assert qm.expire_sensors(now_ms=60_001) == 1


def test_next_request_after_expiry_starts_from_empty():
    qm = manager()
    user, client = "u", "c"  # the same str objects: the named-call cache holds them
    h = qm.client(user, client)
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, user, client, 9000, now_ms=0) == 0
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 5000, now_ms=0) > 0
    assert qm.expire_sensors(now_ms=HOUR + 1) == 1
    # Named path (cached by identity) and handle both resolve to a new, empty sensor.
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, user, client, 9000, now_ms=HOUR + 1) == 0
    assert qm.measured_rate(Q.PRODUCE, user, client, now_ms=HOUR + 1) == 900.0
    assert h.record_and_get_throttle_time_ms(Q.PRODUCE, 1000, now_ms=HOUR + 1) == 0
    assert qm.sensor_count(Q.PRODUCE) == 1
    assert h.measured_rate(Q.PRODUCE, now_ms=HOUR + 1) == 1000.0


def test_expiry_frees_sensor_memory():
    qm = manager()
    n = 50_000
    names = [f"c{i}" for i in range(n)]
    for _round in range(3):
        for c in names:
            qm.record_no_throttle(Q.PRODUCE, "", c, 1, now_ms=0)
        assert qm.sensor_count(Q.PRODUCE) == n
        assert qm.expire_sensors(now_ms=HOUR + 1) == n
        assert qm.sensor_count(Q.PRODUCE) == 0
        if _round == 0:
            after_first = rss_kb()
    # Freed sensors are reused by the allocator: two more rounds of 50k sensors (about 50 MB if
    # never freed) leave the resident size where the first round left it.
    assert rss_kb() - after_first < 15_000


def test_background_thread_expires_and_close_stops_it():
    qm = manager(sensor_expiry_seconds=0.001, expiry_interval_seconds=0.01)
    assert qm.expiry_running
    # Recorded on a caller clock far behind the kernel's: the kernel's estimate of that clock
    # (newest time seen + elapsed real time) passes the 1 ms expiry after 1 ms of real time.
    qm.record_no_throttle(Q.PRODUCE, "u", "c", 10, now_ms=-10**9)
    wait_until(lambda: qm.sensor_count(Q.PRODUCE) == 0, 30, 0.01)
    assert qm.sensor_count(Q.PRODUCE) == 0
    qm.close()
    assert not qm.expiry_running
    qm.close()  # idempotent


def test_background_thread_is_optional_and_stops_with_the_manager():
    qm = manager()
    assert not qm.expiry_running
    with kquota.QuotaManager() as qm2:
        assert qm2.expiry_running
    assert not qm2.expiry_running
    qm3 = kquota.QuotaManager()
    del qm3
    gc.collect()


@pytest.mark.parametrize(
    "kw",
    [
        {"sensor_expiry_seconds": 0},
        {"sensor_expiry_seconds": -1},
        {"sensor_expiry_seconds": float("nan")},
        {"sensor_expiry_seconds": float("inf")},
        {"sensor_expiry_seconds": True},
        {"expiry_interval_seconds": 0},
        {"expiry_interval_seconds": True},
        {"max_sensors": 0},
        {"max_sensors": -3},
        {"max_sensors": True},
    ],
)
def test_bad_lifecycle_settings(kw):
    # A bool is not a number: TypeError, as on every other path.
    expected = TypeError if any(isinstance(v, bool) for v in kw.values()) else kquota.QuotaValueError
    with pytest.raises(expected):
        kquota.QuotaManager(**kw)


def test_bad_lifecycle_types():
    with pytest.raises(TypeError):
        kquota.QuotaManager(max_sensors="10")
    with pytest.raises(TypeError):
        kquota.QuotaManager(sensor_expiry_seconds="10")


def test_cap_shares_one_overflow_sensor_with_the_default_limit():
    qm = manager(max_sensors=3)
    for c in ("a", "b", "c"):
        assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "", c, 100, now_ms=0) == 0
    # The fourth and fifth client-ids share the overflow sensor ("", "<overflow>") whose limit
    # is clients/<default>'s: together they are held to one client's quota.
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "", "d", 6000, now_ms=0) == 0
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "", "e", 6000, now_ms=0) > 0
    stats = qm.sensor_stats(Q.PRODUCE)
    # Resolutions, not requests: a named call that misses its cache may resolve twice.
    assert stats["live"] == 3 and stats["expired"] == 0 and stats["overflowed"] >= 2
    tags = {(m.tags["user"], m.tags["client-id"]): m.value for m in qm.metrics(now_ms=0) if m.name == "byte-rate"}
    assert tags[("", "<overflow>")] == 1200.0
    assert len(tags) == 4
    # The operator can give the overflow pool its own quota.
    qm.alter_client_quotas([({"client-id": "<overflow>"}, {"producer_byte_rate": 100_000})])
    assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "", "f", 1, now_ms=0) == 0


def test_cap_holds_under_a_flood_of_a_million_client_ids():
    cap = 10_000
    qm = manager(max_sensors=cap)
    record = qm.record_and_get_throttle_time_ms
    for i in range(cap):  # warm up to the cap
        record(Q.PRODUCE, "", f"warm-{i}", 1, 0)
    gc.collect()
    before = rss_kb()
    flood = 1_000_000
    for i in range(flood):
        record(Q.PRODUCE, "", f"flood-{i}", 1, 0)
    gc.collect()
    growth_kb = rss_kb() - before
    print(f"RSS growth over {flood:,} distinct client-ids at a cap of {cap:,}: {growth_kb} kB")
    stats = qm.sensor_stats(Q.PRODUCE)
    assert stats["live"] == cap
    assert stats["overflowed"] >= flood
    # Without the cap this flood would hold about 500 MB of sensors (502 B each).
    assert growth_kb < 16_000
