"""qm.metrics(), the Prometheus collector (parsed back with prometheus_client.parser) and the
JMX-style names."""

from __future__ import annotations

import math
import threading
import urllib.request

import pytest

import kquota
from kquota import ClientQuotaType as Q
from kquota.metrics import Metric, jmx_name, jmx_sanitize

pytest.importorskip("prometheus_client")
from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import kquota.prometheus as kprom  # noqa: E402


def manager(**kw):
    qm = kquota.QuotaManager(expiry_interval_seconds=None, **kw)
    qm.alter_client_quotas(
        [
            ({"user": "alice"}, {"producer_byte_rate": 4000}),
            ({"user": None}, {"producer_byte_rate": 1000, "consumer_byte_rate": 3000}),
        ]
    )
    return qm


def by_key(metrics):
    return {(m.group, m.name, tuple(sorted(m.tags.items()))): m.value for m in metrics}


def test_metrics_rows_use_kafka_names_and_values():
    qm = manager()
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "alice", "c1", 8000, now_ms=0)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "bob smith", "c2", 5000, now_ms=0)
    qm.record_and_get_throttle_time_ms(Q.FETCH, "bob smith", "c2", 100, now_ms=0)
    rows = qm.metrics(now_ms=1000)
    assert all(isinstance(m, Metric) for m in rows)
    got = by_key(rows)
    alice = (("client-id", ""), ("user", "alice"))
    bob = (("client-id", ""), ("user", "bob%20smith"))
    assert got[("Produce", "byte-rate", alice)] == 800.0
    assert got[("Produce", "quota-limit", alice)] == 4000.0
    assert got[("Produce", "byte-rate", bob)] == 500.0
    assert got[("Produce", "quota-limit", bob)] == 1000.0
    assert got[("Fetch", "byte-rate", bob)] == 10.0
    assert got[("Fetch", "quota-limit", bob)] == 3000.0
    assert got[("Produce", "sensor-count", ())] == 2
    assert got[("Fetch", "sensor-count", ())] == 1
    assert got[("Produce", "sensors-expired-total", ())] == 0
    assert math.isnan(got[("Produce", "throttle-time", ())])  # Kafka's Avg of nothing
    # The same values as the per-entity query.
    assert got[("Produce", "byte-rate", alice)] == qm.measured_rate(Q.PRODUCE, "alice", "c1", now_ms=1000)


def test_unlimited_sensors_report_no_limit():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 100})])
    qm.record_no_throttle(Q.PRODUCE, "u", "", 10, now_ms=0)  # ("", "") tags: unlimited in Kafka
    got = by_key(qm.metrics(now_ms=0))
    tags = (("client-id", ""), ("user", ""))
    assert ("Produce", "byte-rate", tags) in got
    assert ("Produce", "quota-limit", tags) not in got


def test_a_scrape_is_not_a_use():
    qm = manager()
    qm.record_no_throttle(Q.PRODUCE, "alice", "c", 10, now_ms=0)
    for t in (1, 3_600_000, 3_600_001, 10**9):
        qm.metrics(now_ms=t)
    assert qm.expire_sensors(now_ms=3_600_001) == 1


def test_default_now_is_the_kernels_estimate_of_the_callers_clock():
    # Callers record on their own clock (here around 10^12 ms, Unix-epoch like); a scrape
    # without now_ms measures there, not at the kernel's monotonic clock.
    qm = manager()
    t = 1_700_000_000_000
    qm.record_no_throttle(Q.PRODUCE, "alice", "c", 10_000, now_ms=t)
    got = by_key(qm.metrics())
    assert got[("Produce", "byte-rate", (("client-id", ""), ("user", "alice")))] == 1000.0


def test_bad_now_is_refused():
    qm = manager()
    with pytest.raises(kquota.QuotaValueError):
        qm.metrics(now_ms=2**60)


def test_prometheus_exposition_parses_back_to_the_same_values():
    qm = manager()
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "alice", 'we"ird\\id', 8000, now_ms=0)
    qm.alter_client_quotas([({"user": "carol"}, {"producer_byte_rate": 500})])
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "carol", "c3", 700, now_ms=0)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "é", "c4", 1, now_ms=0)
    text = generate_latest(kprom.registry_for(qm, lambda: 0)).decode()
    parsed = {}
    types = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            parsed[(s.name, tuple(sorted(s.labels.items())))] = s.value
    expected = {}
    for m in qm.metrics(now_ms=0):
        name = kprom.prometheus_name(m.group, m.name) + ("_total" if m.name.endswith("-total") else "")
        labels = tuple(sorted(("client_id" if k == "client-id" else k, v) for k, v in m.tags.items()))
        expected[(name, labels)] = m.value
    assert parsed.keys() == expected.keys()
    for k, v in expected.items():
        assert parsed[k] == v or (math.isnan(v) and math.isnan(parsed[k])), k
    assert parsed[("kafka_server_produce_byte_rate", (("client_id", ""), ("user", "alice")))] == 800.0
    assert parsed[("kafka_server_produce_quota_limit", (("client_id", ""), ("user", "%C3%A9")))] == 1000.0
    assert types["kafka_server_produce_byte_rate"] == "gauge"
    assert types["kafka_server_produce_sensors_expired"] == "counter"


def test_prometheus_names():
    assert kprom.prometheus_name("Produce", "byte-rate") == "kafka_server_produce_byte_rate"
    assert kprom.prometheus_name("ControllerMutation", "mutation-rate") == "kafka_server_controller_mutation_mutation_rate"
    assert kprom.prometheus_name("Fetch", "sensors-expired-total") == "kafka_server_fetch_sensors_expired"


def test_one_call_http_exporter():
    qm = manager()
    qm.record_no_throttle(Q.PRODUCE, "alice", "c1", 1000, now_ms=0)
    server, thread = kprom.start_http_server(qm, port=0, addr="127.0.0.1", now_ms=lambda: 0)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
    assert 'kafka_server_produce_byte_rate{client_id="",user="alice"} 100.0' in body or (
        'kafka_server_produce_byte_rate{user="alice",client_id=""} 100.0' in body
    )
    assert isinstance(thread, threading.Thread)


def test_jmx_names_follow_kafkas_jmx_reporter():
    assert jmx_name("Produce", {"user": "alice", "client-id": "c1"}) == "kafka.server:type=Produce,user=alice,client-id=c1"
    # Empty tag values are left out, as JmxReporter.getMBeanName does.
    assert jmx_name("Fetch", {"user": "", "client-id": "c1"}) == "kafka.server:type=Fetch,client-id=c1"
    assert jmx_name("Produce", {}) == "kafka.server:type=Produce"
    # Sanitizer.jmxSanitize: plain values as is, others quoted like ObjectName.quote.
    assert jmx_sanitize("a-b.c%20 d_1") == "a-b.c%20 d_1"
    assert jmx_sanitize("a,b") == '"a,b"'
    assert jmx_sanitize('q"*?\\\n') == '"q\\"\\*\\?\\\\\\n"'
    assert jmx_sanitize("é") == '"é"'  # Java's \w is ASCII-only
    m = Metric("Produce", "byte-rate", {"user": "alice", "client-id": "c1"}, 1.0)
    assert m.jmx_name == "kafka.server:type=Produce,user=alice,client-id=c1"


def test_jmx_mapping_lists_every_metric():
    qm = manager()
    qm.record_no_throttle(Q.PRODUCE, "alice", "c1", 1000, now_ms=0)
    mapping = kprom.jmx_mapping(qm)
    assert ("kafka_server_produce_byte_rate", "kafka.server:type=Produce,user=alice", "byte-rate") in mapping
    assert ("kafka_server_produce_sensors_expired_total", "kafka.server:type=Produce", "sensors-expired-total") in mapping
    assert len(mapping) == len(qm.metrics())


def test_large_snapshot_converts_in_batches():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    for i in range(5000):
        qm.record_no_throttle(Q.PRODUCE, "", f"c{i}", i, now_ms=0)
    rows = [m for m in qm.metrics(now_ms=0) if m.name == "byte-rate"]
    assert len(rows) == 5000
    assert sorted(m.value for m in rows) == [i / 10 for i in range(5000)]


def test_readme_embedding_section_runs():
    """The embedding guide (docs/guides/embedding.md, moved there from the README) runs as
    written: its first block's metrics rows, then its served round trip, which closes ``qm``."""
    import pathlib
    import re

    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guides" / "embedding.md"
    text = page.read_text()
    assert text.startswith("# Embedding: metrics, throttled channels, expiry\n")
    first, roundtrip = re.findall(r"```python\n(.*?)```", text, re.S)[:2]
    ns: dict = {}
    exec(compile(first, str(page), "exec"), ns)
    got = by_key(ns["rows"])
    assert got[("Produce", "byte-rate", (("client-id", "c1"), ("user", "")))] == 500.0
    assert ns["qm"].expiry_running
    exec(compile(roundtrip, str(page), "exec"), ns)
    assert ns["throttle_ms"] > 0
    assert not ns["qm"].expiry_running


def test_module_docstring_examples():
    import doctest

    import kquota.aio
    import kquota.metrics

    for mod in (kprom, kquota.metrics, kquota.aio):
        result = doctest.testmod(mod)
        assert result.failed == 0, mod


def test_native_exposition_equals_the_collectors():
    qm = manager()
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "alice", 'we"ird\\id\nx', 8000, now_ms=0)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "", "", 10, now_ms=0)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "é", "c4", 1, now_ms=0)
    qm.record_and_get_throttle_time_ms(Q.FETCH, "bob", "c5", 0.25, now_ms=0)
    qm.delay_queue(Q.FETCH)  # a queue-size row

    def parse(text):
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(fam.name, fam.type, fam.documentation, s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    native = parse(kprom.exposition(qm, 0).decode())
    collector = parse(generate_latest(kprom.registry_for(qm, lambda: 0)).decode())
    assert native.keys() == collector.keys()
    for k, v in collector.items():
        assert native[k] == v or (math.isnan(v) and math.isnan(native[k])), k
    assert len(native) > 10
