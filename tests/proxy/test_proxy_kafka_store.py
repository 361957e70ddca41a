"""``kquota proxy --store kafka:///TOPIC`` as processes: the store topic on the cluster the proxy
fronts, a quota altered by ``kquota configs --store kafka://HOST:PORT/TOPIC`` enforced live on a
real producer, and AlterClientQuotas through one proxy written to the topic and seen by another."""

from __future__ import annotations

import re
import urllib.request
import uuid

import pytest
from proxy_cli import assert_enforced_once_applied, start_proxy, stop_proxy
from proxy_support import make_topic
from proxy_wire import Wire
from store_helpers import run_cli
from waiting import free_port, wait_until

from kquota import ClientQuotaEntity
from kquota.kafka.protocol import apis
from kquota.stores import open_store

pytest.importorskip("confluent_kafka")
QUOTA = 100_000  # bytes/s of the paced producer once applied


def sync_age(metrics_port):
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return float(re.search(r"^kafka_server_config_watcher_config_sync_age_seconds (\S+)$", body, re.M).group(1))


@pytest.mark.timing
def test_a_quota_altered_with_kquota_configs_is_enforced_live(broker, tmp_path):
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    metrics_port = free_port()
    ages = []

    def apply(address):
        r = run_cli("--store", f"kafka://{broker.address}/{topic}", "--alter", "--add-config",
                    f"producer_byte_rate={QUOTA}", "--entity-type", "clients", "--entity-name", "paced")
        assert r.returncode == 0, r.stderr

    err = assert_enforced_once_applied(broker, tmp_path, make_topic(broker.address), QUOTA, apply,
                                       "--metrics-port", str(metrics_port), store=f"kafka:///{topic}",
                                       at_end=lambda: ages.append(sync_age(metrics_port)))
    assert "Traceback" not in err, err
    assert 0 <= ages[0] < 3  # the follower confirms each second that it is current


def test_alter_client_quotas_through_one_proxy_is_seen_by_another(broker, tmp_path):
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    a, a_port = start_proxy(broker, tmp_path, "--admin-principals", "ANONYMOUS", store=f"kafka:///{topic}")
    b, b_port = start_proxy(broker, tmp_path, "--describe-principals", "ANONYMOUS", store=f"kafka:///{topic}")
    try:
        w = Wire(("127.0.0.1", a_port))
        resp = w.call(apis.ALTER_CLIENT_QUOTAS, 1, "AlterClientQuotas", {"Entries": [
            {"Entity": [{"EntityType": "user", "EntityName": "carol"}],
             "Ops": [{"Key": "producer_byte_rate", "Value": 4096.0, "Remove": False}]},
            {"Entity": [{"EntityType": "user", "EntityName": "dave"}],
             "Ops": [{"Key": "producer_byte_rate", "Value": 1.5, "Remove": False}]},  # invalid: not written
        ], "ValidateOnly": False})
        w.close()
        assert [e["ErrorCode"] for e in resp["Entries"]] == [0, apis.INVALID_REQUEST]
        # In the topic on the cluster the proxies front.
        with open_store(f"kafka://{broker.address}/{topic}", read_only=True) as store:
            assert store.describe() == {ClientQuotaEntity({"user": "carol"}): {"producer_byte_rate": 4096.0}}

        def described_by_b():
            w = Wire(("127.0.0.1", b_port))
            try:
                resp = w.call(apis.DESCRIBE_CLIENT_QUOTAS, 1, "DescribeClientQuotas", {"Components": [], "Strict": False})
            finally:
                w.close()
            assert resp["ErrorCode"] == 0, resp
            return [([(e["EntityType"], e["EntityName"]) for e in x["Entity"]], [(v["Key"], v["Value"]) for v in x["Values"]])
                    for x in resp["Entries"]]

        assert wait_until(lambda: described_by_b() == [([("user", "carol")], [("producer_byte_rate", 4096.0)])])
    finally:
        results = [stop_proxy(a), stop_proxy(b)]
    for code, err in results:
        assert code == 0 and "Traceback" not in err, err
