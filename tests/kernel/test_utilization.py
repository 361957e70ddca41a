"""Utilization (KIP-1373): rate / effective quota x 100 per entity, the level that matched, and
the bound: every throttled entity plus the top K, the rest summed per quota type."""

from __future__ import annotations

import math

import pytest

import kquota
from kquota import ClientQuotaType as Q
from kquota.utilization import LEVELS, Utilization, UtilizationRow


def manager(**kw):
    return kquota.QuotaManager(expiry_interval_seconds=None, **kw)


def fill_window(qm, quota_type, user, client_id, rate):
    """``rate`` per second over the whole quota window (11 samples of 1 s, ending at 10 s)."""
    for s in range(11):
        qm.record_no_throttle(quota_type, user, client_id, rate, now_ms=s * 1000)


def row(u: Utilization, client_id: str, quota_type=Q.PRODUCE) -> UtilizationRow:
    (found,) = [r for r in u.rows if r.client_id == client_id and r.quota_type == quota_type]
    return found


def test_twice_the_quota_shows_about_200_and_throttled():
    qm = manager()
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    fill_window(qm, Q.PRODUCE, "alice", "fast", 2000)
    # Kafka's Rate over 11 samples ending at 10 s measures 11 s of bytes over a 10 s window.
    r = row(qm.utilization(now_ms=10_999), "fast")
    assert r.rate == pytest.approx(2000 * 11 / 10.999)
    assert r.utilization == pytest.approx(200, rel=0.01)
    assert r.throttled and r.quota == 1000 and r.level == "/config/clients/<default>"
    assert r.utilization == pytest.approx(100 * qm.measured_rate(Q.PRODUCE, "alice", "fast", now_ms=10_999) / 1000)
    qm.close()


def test_an_unlimited_entity_shows_nan():
    qm = manager()
    qm.alter_client_quotas([({"user": "limited"}, {"consumer_byte_rate": 1000})])
    fill_window(qm, Q.FETCH, "free", "c", 5000)
    (r,) = [r for r in qm.utilization(now_ms=10_000).rows if r.user == "free"]
    assert math.isnan(r.utilization) and r.quota is None and r.level is None and not r.throttled
    assert r.rate > 0
    qm.close()


@pytest.mark.parametrize("entity,level", [
    ({"user": "u", "client-id": "c"}, LEVELS[0]),
    ({"user": "u", "client-id": None}, LEVELS[1]),
    ({"user": "u"}, LEVELS[2]),
    ({"user": None, "client-id": "c"}, LEVELS[3]),
    ({"user": None, "client-id": None}, LEVELS[4]),
    ({"user": None}, LEVELS[5]),
    ({"client-id": "c"}, LEVELS[6]),
    ({"client-id": None}, LEVELS[7]),
])
def test_the_level_names_the_matched_precedence(entity, level):
    qm = manager()
    qm.alter_client_quotas([(entity, {"request_percentage": 50})])
    qm.record_request_time("u", "c", 1_000_000, now_ms=0)
    (r,) = qm.utilization(now_ms=0).rows
    assert (r.quota_type, r.level, r.quota) == (Q.REQUEST, level, 50)
    qm.close()


def test_the_static_default_and_a_fleet_share_are_effective_quotas():
    qm = manager(producer_default=4000)
    fill_window(qm, Q.PRODUCE, "u", "c", 1000)
    r = row(qm.utilization(now_ms=10_000), "c")
    assert (r.level, r.quota) == ("static-default", 4000)
    qm._set_shares(Q.PRODUCE, 0.5, {})
    r = row(qm.utilization(now_ms=10_000), "c")
    assert r.quota == 2000 and r.utilization == pytest.approx(100 * r.rate / 2000)
    qm.close()


def test_controller_mutation_in_debt_is_throttled():
    qm = manager()
    qm.alter_client_quotas([({"user": "u"}, {"controller_mutation_rate": 1})])
    qm.record_controller_mutations("u", "c", 100, now_ms=0)
    (r,) = qm.utilization(now_ms=0).rows
    assert r.quota_type == Q.CONTROLLER_MUTATION and r.throttled and r.level == "/config/users/<user>"
    qm.close()


def test_the_bound_keeps_every_throttled_entity_and_sums_the_rest():
    """20,000 sensors, 25 of them throttled, K = 10: 35 rows and one aggregate."""
    qm = manager(max_client_ids_per_principal=30_000)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1_000_000})])
    for i in range(20_000):
        qm.record_no_throttle(Q.PRODUCE, "u", f"c{i}", (i % 1000) * 100, now_ms=0)
    for i in range(25):
        qm.record_no_throttle(Q.PRODUCE, "u", f"hot{i}", 100_000_000, now_ms=0)
    u = qm.utilization(10, now_ms=0)
    throttled = [r for r in u.rows if r.throttled]
    assert sorted(r.client_id for r in throttled) == sorted(f"hot{i}" for i in range(25))
    others = [r for r in u.rows if not r.throttled]
    assert len(others) == 10
    kept = min(r.utilization for r in others)
    left = max(r.utilization for r in qm.utilization(20_100, now_ms=0).rows
               if not r.throttled and r.client_id not in {o.client_id for o in others})
    assert kept >= left
    (rest,) = u.rest
    assert rest.quota_type == Q.PRODUCE and rest.entities == 20_000 - 10
    assert rest.quota == 1_000_000 * rest.entities
    total = sum(r.rate for r in qm.utilization(30_000, now_ms=0).rows if not r.throttled)
    assert rest.rate + sum(r.rate for r in others) == pytest.approx(total)
    assert rest.utilization == pytest.approx(100 * rest.rate / rest.quota)
    assert len(qm.utilization(0, now_ms=0).rows) == 25
    qm.close()


def test_many_client_ids_cannot_push_the_series_past_the_bound():
    """An attacker opening client ids by the thousand (each its own sensor under a client-id
    quota) adds no series: K + the throttled + one aggregate per family."""
    qm = manager(max_client_ids_per_principal=50_000)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    qm.record_no_throttle(Q.PRODUCE, "victim", "over", 1_000_000, now_ms=0)
    for i in range(40_000):
        qm.record_no_throttle(Q.PRODUCE, "mallory", f"x{i:05d}", 500, now_ms=0)
    rows = [m for m in qm.metrics(now_ms=0, max_entities=7) if m.name == "quota-utilization"]
    assert len(rows) == 7 + 1 + 1
    assert sum(1 for m in rows if m.tags == {"entity": "other"}) == 1
    qm.close()


def test_bad_max_entities_is_refused():
    qm = manager()
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(kquota.QuotaValueError):
            qm.utilization(bad)
    qm.close()


def test_utilization_touches_no_sensor():
    qm = manager()
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    qm.record_no_throttle(Q.PRODUCE, "u", "c", 10, now_ms=0)
    qm.utilization(now_ms=10_000_000)
    assert qm.expire_sensors(now_ms=3_600_001) == 1  # idle since 0: the scrape was no use
    qm.close()
