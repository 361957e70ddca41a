"""docs/grafana/kquota-dashboard.json: every panel's PromQL names only metrics the exporter
serves. The exported names come from a real scrape of the metrics port of a manager with every
family the dashboard may show present (all four quota types recording, throttled entities, the
rest past the bound, delay queues, a running config watcher), never from a hand-written list."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import kquota
import kquota.prometheus as kprom
from kquota import ClientQuotaType as Q
from kquota.stores.url import open_store
from kquota.watcher import QuotaConfigWatcher

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "kquota-dashboard.json"

#: PromQL words that are not metric names (operators, modifiers, aggregation clauses).
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label
    matchers, ranges, grouping clauses, function calls and dashboard variables are removed."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\w+", " ", e)
    e = re.sub(r"\b[A-Za-z_]\w*\s*\(", " ", e)  # function and aggregation names
    names = set(re.findall(r"\b[A-Za-z_:][\w:]*\b", e))
    return {n for n in names if n.lower() not in PROMQL_WORDS}


def test_the_parser_finds_names_and_skips_promql():
    assert metric_names('topk($topk, kafka_server_a{entity!="other"})') == {"kafka_server_a"}
    assert metric_names("sum by (user) (rate(x_total[5m])) / on(user) y") == {"x_total", "y"}


def exported_names(tmp_path: Path) -> set[str]:
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    store = open_store(f"sqlite:///{tmp_path / 'quotas.db'}")
    store.alter([({"client-id": None}, {"producer_byte_rate": 1000, "consumer_byte_rate": 1000,
                                        "request_percentage": 10, "controller_mutation_rate": 1})])
    watcher = QuotaConfigWatcher(store, qm).start()
    try:
        for i in range(5):
            qm.record_and_get_throttle_time_ms(Q.PRODUCE, "u", f"c{i}", 50_000 if i == 0 else 10, now_ms=0)
            qm.record_and_get_throttle_time_ms(Q.FETCH, "u", f"c{i}", 50_000 if i == 0 else 10, now_ms=0)
            qm.record_request_time("u", f"c{i}", 10**9 if i == 0 else 1000, now_ms=0)
            qm.record_controller_mutations("u", f"c{i}", 100 if i == 0 else 1, now_ms=0)
        for t in (Q.PRODUCE, Q.FETCH, Q.REQUEST):
            qm.delay_queue(t)
        server, _ = kprom.start_http_server(qm, port=0, now_ms=lambda: 0, max_entities=1)
        try:
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            text = urllib.request.urlopen(url, timeout=30).read().decode()
        finally:
            server.shutdown()
    finally:
        watcher.stop()
        qm.close()
    names = set()
    for fam in text_string_to_metric_families(text):
        names.update(s.name for s in fam.samples)
    # The bound's aggregate and the per-entity series are both there: every family is present.
    assert 'entity="other"' in text and "level=" in text
    return names


@pytest.mark.process  # the sqlite store's watch finds libc through ldconfig
def test_every_panel_query_names_an_exported_metric(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names(tmp_path)
    assert dashboard["panels"]
    unknown = {}
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            missing = names - exported
            if missing:
                unknown[(panel["title"], target["expr"])] = sorted(missing)
    assert not unknown, unknown
    # The dashboard shows what the issue asks for: utilization, throttle time, byte rates, quotas.
    used = {n for p in dashboard["panels"] for t in p["targets"] for n in metric_names(t["expr"])}
    for wanted in ("kafka_server_produce_quota_utilization", "kafka_server_produce_throttle_time",
                   "kafka_server_fetch_byte_rate", "kafka_server_produce_effective_quota"):
        assert wanted in used
