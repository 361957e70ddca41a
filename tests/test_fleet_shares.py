"""The fleet's split rule (``kquota.proxy.fleet_shares``), its usage records
(``kquota.stores.kafka.usage``) and the kernel's shares (``QuotaKernel._set_shares``)."""

from __future__ import annotations

import pytest

import kquota
from kquota.proxy.fleet_shares import FLOOR, HEADROOM, split
from kquota.stores.kafka.usage import CorruptUsage, Usage, changed, decode, encode, entity_hash


def test_saturated_members_split_equally():
    s = split(300.0, {"a": None, "b": None, "c": None})
    assert s == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})


def test_a_light_member_keeps_its_rate_with_headroom_and_the_rest_goes_to_the_saturated():
    s = split(1000.0, {"light": 200.0, "a": None, "b": None})
    assert s["light"] == pytest.approx(200 * HEADROOM / 1000)
    assert s["a"] == pytest.approx((1 - s["light"]) / 2) == s["b"]
    assert sum(s.values()) == pytest.approx(1.0)


def test_an_idle_member_keeps_a_floor_and_unwanted_quota_is_shared_by_all():
    s = split(1000.0, {"idle": 0.0, "busy": None})
    assert s["idle"] == pytest.approx(FLOOR / 2)
    assert s["busy"] == pytest.approx(1 - FLOOR / 2)
    both_light = split(1000.0, {"a": 100.0, "b": 100.0})
    assert both_light["a"] == pytest.approx(0.5) and sum(both_light.values()) == pytest.approx(1.0)


def test_a_light_member_wanting_more_than_the_level_is_capped_at_it():
    s = split(1000.0, {"big": 600.0, "a": None, "b": None})
    assert s == pytest.approx({"big": 1 / 3, "a": 1 / 3, "b": 1 / 3})


def test_usage_records_round_trip_and_refuse_garbage():
    u = Usage(True, 1000, 7, {entity_hash("Produce", "", "c"): -512.0, 5: 100.0})
    assert decode(encode(u)) == u
    assert len(encode(u)) == 10 + 2 * 8
    for bad in (b"", b"\x02" + encode(u)[1:], encode(u)[:-1]):
        with pytest.raises(CorruptUsage):
            decode(bad)
    assert changed(100.0, -100.0) and changed(100.0, 0.0) and changed(100.0, 120.0)
    assert not changed(100.0, 105.0) and not changed(-100.0, -300.0)


def test_kernel_shares_scale_limits_and_report_them():
    qm = kquota.QuotaManager()
    try:
        qm.alter_client_quotas([({"client-id": "c"}, {"producer_byte_rate": 1000.0})])
        assert qm.quota_limit("PRODUCE", "", "c") == 1000.0
        qm._set_shares("PRODUCE", 0.5, {("", "c"): 0.25})
        assert qm.quota_limit("PRODUCE", "", "c") == 250.0
        assert qm._shares("PRODUCE") == (0.5, {("", "c"): 0.25})
        with pytest.raises(ValueError):
            qm._set_shares("PRODUCE", 1.5, {})
        with pytest.raises(ValueError):
            qm._set_shares("PRODUCE", 0.5, {("", "c"): float("nan")})
        assert qm._shares("PRODUCE") == (0.5, {("", "c"): 0.25})
        qm._set_shares("PRODUCE", 1.0, {})
        assert qm.quota_limit("PRODUCE", "", "c") == 1000.0
    finally:
        qm.close()
