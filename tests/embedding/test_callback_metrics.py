"""Metrics of callback-tagged sensors, and of request/mutation sensors, read back as Kafka names."""

import kquota
from kquota import ClientQuotaType as Q


class Grouped(kquota.ClientQuotaCallback):
    def quota_metric_tags(self, quota_type, principal, client_id):
        return {"quota-group": "g"}

    def quota_limit(self, quota_type, metric_tags):
        return 100.0


def test_metrics_carry_the_callbacks_own_tags():
    qm = kquota.QuotaManager(callback=Grouped(), expiry_interval_seconds=None)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "x", 10, now_ms=0)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "b", "y", 10, now_ms=0)
    rows = {(m.name, tuple(m.tags.items())): m.value for m in qm.metrics(now_ms=0) if m.group == "Produce"}
    assert rows[("byte-rate", (("quota-group", "g"),))] == 2.0  # 20 B over a fresh 10 s window
    assert rows[("quota-limit", (("quota-group", "g"),))] == 100.0


def test_request_and_mutation_metrics():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    qm.alter_client_quotas([({"user": None}, {"request_percentage": 50, "controller_mutation_rate": 10})])
    qm.record_controller_mutations("u", "c", 30, now_ms=0)
    qm.record_request_time("u", "c", 1e9, now_ms=0)
    qm.record_exempt_request_time(1e9, now_ms=0)
    got = {(m.group, m.name): m.value for m in qm.metrics(now_ms=1000)}
    assert got[("Request", "request-time")] == 10.0  # 100 % over W = 1 s elapsed + 9 windows
    assert got[("ControllerMutation", "tokens")] == 90.0  # 110 - 30 + 10 refilled
    assert got[("ControllerMutation", "mutation-rate")] == 30 / 31  # broker metrics window
    assert got[("Request", "exempt-request-time")] == 100 / 31
    # A scrape does not consume or store the bucket's refill.
    assert qm.controller_mutation_tokens("u", "c", now_ms=1000) == 90.0


def test_prometheus_paths_agree_on_callback_tag_maps():
    """Both Prometheus paths write a tag map other than {user, client-id} as its JSON in the
    ``user`` label (no internal prefix), so the native exposition and the collector agree."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    import kquota.prometheus as prom

    qm = kquota.QuotaManager(callback=Grouped(), expiry_interval_seconds=None)
    qm.record_and_get_throttle_time_ms(Q.PRODUCE, "a", "x", 10, now_ms=0)

    def labels(text):
        return {
            tuple(sorted(s.labels.items()))
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if fam.name == "kafka_server_produce_byte_rate"
        }

    native = labels(prom.exposition(qm, now_ms=0).decode())
    collected = labels(generate_latest(prom.registry_for(qm, now_ms=lambda: 0)).decode())
    assert native == collected == {(("client_id", ""), ("user", '[["quota-group","g"]]'),)}
