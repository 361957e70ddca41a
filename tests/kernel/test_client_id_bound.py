"""Each principal's distinct client ids are bounded (``max_client_ids_per_principal``,
``kquota.max.client.ids.per.principal``).

The attack: one principal (ANONYMOUS too) gives every request a new client id. Unbounded, each
held a sensor and a cache entry for an hour, until the name budget or the sensor cap sent every
tenant's new names to one shared overflow sensor, where they throttled each other. Bounded, the
flooding principal's later client ids share an overflow sensor of its own, limited by the quota
its client ids get; another principal's new client id still gets its own sensor."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kquota
from kquota import ClientQuotaType as Q
from kquota import QuotaValueError

QUOTA = 1000.0
FLOOD = 2000


def manager(**kw):
    kw.setdefault("expiry_interval_seconds", None)
    return kquota.QuotaManager(**kw)


@pytest.mark.parametrize("entity", [{"client-id": None}, {"user": None, "client-id": None}],
                         ids=["per-client-id", "per-user-and-client-id"])
def test_a_flood_of_client_ids_overflows_into_its_own_principals_sensor(entity):
    qm = manager()
    try:
        qm.alter_client_quotas([(entity, {"producer_byte_rate": QUOTA})])
        for i in range(FLOOD):
            qm.record_and_get_throttle_time_ms(Q.PRODUCE, "A", f"flood-{i}", 100, now_ms=0)
        # A keeps the default 1000 client ids; its later ones share its overflow sensor.
        assert qm.sensor_count(Q.PRODUCE) == 1001
        assert qm._client_ids(Q.PRODUCE) == (1, 1000, FLOOD - 1000)
        tags = qm.quota_metric_tags(Q.PRODUCE, "A", "flood-5")
        assert tags["client-id"] == "flood-5"
        # The overflow's 1000 records of 100 B throttle A's next new client id.
        assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "A", "one-more", 1, now_ms=1) > 0
        assert qm.measured_rate(Q.PRODUCE, "A", "<overflow>", now_ms=1) > QUOTA
        # B's new client id: a sensor of its own, not throttled by A's traffic.
        assert qm.record_and_get_throttle_time_ms(Q.PRODUCE, "B", "b-1", 100, now_ms=1) == 0
        assert qm.sensor_count(Q.PRODUCE) == 1002
        assert qm.measured_rate(Q.PRODUCE, "B", "b-1", now_ms=1) == pytest.approx(100 / 10)
        # The names held are those of about 1000 sensors, far inside the budget, none refused.
        held, limit, refused = qm._name_bytes()
        assert held < 1002 * 2 * 32 and refused == 0, (held, limit, refused)
    finally:
        qm.close()


def test_a_handle_past_the_bound_records_into_the_overflow():
    qm = manager(max_client_ids_per_principal=2)
    try:
        qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": QUOTA})])
        handles = [qm.client("A", c) for c in ("a", "b", "c", "d")]
        for h in handles:
            h.record_and_get_throttle_time_ms(Q.PRODUCE, 6000, 0)
        # a and b are A's; c and d share its overflow: 12000 B there, 6000 B in each of a, b.
        assert qm.measured_rate(Q.PRODUCE, "A", "<overflow>", now_ms=0) == pytest.approx(12000 / 10)
        assert qm.measured_rate(Q.PRODUCE, "A", "a", now_ms=0) == pytest.approx(6000 / 10)
        assert qm.sensor_count(Q.PRODUCE) == 3
    finally:
        qm.close()


def test_expiry_gives_a_principal_its_places_back():
    qm = manager(max_client_ids_per_principal=1)
    try:
        qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": QUOTA})])
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "A", "a", 1, now_ms=0)
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "A", "b", 1, now_ms=0)
        assert qm._client_ids(Q.PRODUCE)[1:] == (1, 1)
        qm.expire_sensors(now_ms=2 * 3_600_000)
        assert qm._client_ids(Q.PRODUCE)[:2] == (0, 0)
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "A", "b", 1, now_ms=2 * 3_600_000)
        assert qm.measured_rate(Q.PRODUCE, "A", "b", now_ms=2 * 3_600_000) > 0
    finally:
        qm.close()


@pytest.mark.parametrize("bad", [0, -1])
def test_the_bound_must_be_at_least_one(bad):
    with pytest.raises(QuotaValueError, match="max_client_ids_per_principal"):
        manager(max_client_ids_per_principal=bad)


@pytest.mark.parametrize("value, message", [("0", "must be at least 1, got 0"), ("many", "must be an integer")])
@pytest.mark.process
def test_the_bound_is_a_proxy_property_read_from_config(tmp_path, value, message):
    cfg = tmp_path / "proxy.properties"
    cfg.write_text(f"kquota.max.client.ids.per.principal={value}\n")
    r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1",
                        "--store", f"sqlite:///{tmp_path}/q.db", "--config", str(cfg)],
                       capture_output=True, timeout=60, check=False)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert f"kquota.max.client.ids.per.principal {message}" in err
    assert "Traceback" not in err


def test_calls_naming_no_principal_are_bounded_only_by_the_cap():
    # An embedder quoting by client id alone (user "") keeps one sensor per client id, as before;
    # Kafka's principal is never empty, and the proxy's is ANONYMOUS at least.
    qm = manager(max_client_ids_per_principal=2)
    try:
        qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": QUOTA})])
        for c in ("a", "b", "c", "d"):
            qm.record_no_throttle(Q.PRODUCE, "", c, 1, now_ms=0)
        assert qm.sensor_count(Q.PRODUCE) == 4
        assert qm._client_ids(Q.PRODUCE) == (0, 0, 0)
        for c in ("a", "b", "c", "d"):
            qm.record_no_throttle(Q.PRODUCE, "ANONYMOUS", c + "!", 1, now_ms=0)
        assert qm._client_ids(Q.PRODUCE) == (1, 2, 2)
    finally:
        qm.close()
