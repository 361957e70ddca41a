"""The fleet's split rule (``kquota.proxy.fleet_shares``), its usage records
(``kquota.proxy.fleet_usage``) and the kernel's shares (``QuotaKernel._set_shares``)."""

from __future__ import annotations

import pytest

import kquota
from kquota.proxy.fleet_shares import FLOOR, HEADROOM, split
from kquota.proxy.fleet_usage import CorruptUsage, Usage, UsageKey, changed, decode, encode

pytestmark = [pytest.mark.process, pytest.mark.timing]

KEY = b"fleet-test-key-of-thirty-two-bytes!"


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
    key = UsageKey(KEY)
    u = Usage(True, 1000, 1_700_000_000_123, 7, {key.entity("Produce", "", "c"): -512.0, 5: 100.0, 6: 0.0, 7: 3e9})
    [value] = encode(u, b"m1", key)
    back = decode(value, b"m1", key)
    assert (back.full, back.interval_ms, back.time_ms, back.sequence, back.part, back.parts) == (
        True, 1000, 1_700_000_000_123, 7, 0, 1)
    assert back.rates.keys() == u.rates.keys()
    for h, r in u.rates.items():
        assert back.rates[h] == pytest.approx(r, rel=0.001)
    assert len(value) == 22 + 4 * 10 + 32  # header, 4 entries, signature
    for bad in (b"", b"\x03" + value[1:], value[:-1], value[:-33] + value[-32:], b"\x01" + value[1:]):
        with pytest.raises(CorruptUsage):
            decode(bad, b"m1", key)
    assert changed(100.0, -100.0) and changed(100.0, 0.0) and changed(100.0, 130.0)
    assert not changed(100.0, 120.0) and not changed(-100.0, -300.0)


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


class Cuttable:
    """A TCP forwarder on loopback that can cut every connection (the usage path lost) and
    accept again (the path back)."""

    def __init__(self, target_port, port):
        import socket
        import threading

        self.target, self.open, self.conns = target_port, True, []
        self.server = socket.create_server(("127.0.0.1", port))
        self.server.settimeout(0.2)
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        import socket
        import threading

        while not self.halt.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            if not self.open:
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                s.close()

    def cut(self):
        self.open = False
        for s in self.conns:
            s.close()
        self.conns = []

    def stop(self):
        self.cut()
        self.halt.set()
        self.thread.join(2)
        self.server.close()


def test_a_cut_usage_path_falls_back_to_a_static_share_and_recovers():
    """Two coordinators exchange usage through a forwarder in front of tansu; cut, each falls
    back to 1 / last fleet size within 3 intervals; back, each leaves the fallback. On tansu,
    which advertises the forwarder's port: Kafka's shared broker advertises its own, and the
    usage clients would go around the cut."""
    import time

    pytest.importorskip("confluent_kafka")
    from proxy_support import Tansu
    from waiting import free_port, step_until

    from kquota.proxy.fleet import SILENT_INTERVALS, FleetCoordinator

    interval = 0.3
    fwd_port = free_port()
    broker = Tansu(advertised_port=fwd_port)
    path = Cuttable(broker.port, fwd_port)
    qms = [kquota.QuotaManager(window_num=2), kquota.QuotaManager(window_num=2)]
    coords = []
    try:
        coords = [FleetCoordinator(qm, f"127.0.0.1:{fwd_port}", "quotas", interval_s=interval, key=KEY) for qm in qms]
        step_until(coords, lambda: all(c.fleet_size == 2 for c in coords), 20, interval)
        assert [c.fleet_size for c in coords] == [2, 2] and not any(c.fallback for c in coords)
        # Metrics: this proxy's share of each active quota and the age of each member's usage.
        qms[0].alter_client_quotas([({"client-id": "c"}, {"producer_byte_rate": 1000.0})])
        qms[0].record_no_throttle("PRODUCE", "", "c", 10.0)
        coords[0].step()
        qms[0].add_metrics_source(coords[0].metrics)  # as start() does; steps driven here
        from prometheus_client.parser import text_string_to_metric_families

        from kquota.prometheus import exposition

        fams = {f.name: f for f in text_string_to_metric_families(exposition(qms[0]).decode())}
        assert fams["kafka_server_fleet_fleet_size"].samples[0].value == 2
        share = fams["kafka_server_fleet_fleet_share"].samples
        assert [(x.labels, x.value) for x in share] == [
            ({"client_id": "c", "quota_type": "Produce", "user": ""}, pytest.approx(0.5))]  # both light: halves
        ages = fams["kafka_server_fleet_fleet_usage_age_seconds"].samples
        assert {x.labels["member"] for x in ages} == {c.member for c in coords}
        assert all(0 <= x.value < 3 for x in ages)
        path.cut()
        cut_at = time.monotonic()
        step_until(coords, lambda: all(c.fallback for c in coords), 10, interval)
        took = time.monotonic() - cut_at
        assert all(c.fallback for c in coords), "no fallback after the usage path was cut"
        assert took <= (SILENT_INTERVALS + 2) * interval + 1.0, took
        assert [qm._shares("PRODUCE") for qm in qms] == [(0.5, {}), (0.5, {})]
        path.open = True
        back_at = time.monotonic()
        step_until(coords, lambda: not any(c.fallback for c in coords), 20, interval)
        assert not any(c.fallback for c in coords), "still in fallback after the usage path came back"
        print(f"fallback after {took:.1f} s ({took / interval:.1f} intervals); "
              f"recovered after {time.monotonic() - back_at:.1f} s")
    finally:
        for c in coords:
            c.stop()
        for qm in qms:
            qm.close()
        path.stop()
        broker.stop()


def test_fleet_scope_needs_a_kafka_store(tmp_path):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:9", "--listen", "127.0.0.1:0",
         "--store", f"sqlite:///{tmp_path / 'q.db'}", "--quota-scope", "fleet"],
        capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--quota-scope fleet needs a kafka:// --store" in r.stderr
    assert "Traceback" not in r.stderr
