"""``kquota proxy --store kafka:///TOPIC`` as processes: the store topic on the cluster the proxy
fronts, a quota altered by ``kquota configs --store kafka://HOST:PORT/TOPIC`` enforced live on a
real producer, and AlterClientQuotas through one proxy written to the topic and seen by another."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import pytest
from proxy_support import Meter, make_topic, produce_loop
from waiting import free_port, wait_port, wait_until
from proxy_wire import Wire
from store_helpers import run_cli

from kquota import ClientQuotaEntity
from kquota.kafka.protocol import apis
from kquota.stores import open_store

pytest.importorskip("confluent_kafka")
WAIT = 30  # seconds: a hang guard, not a timing assertion


def start_proxy(broker, topic, *extra):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", broker.address, "--listen",
         f"127.0.0.1:{port}", "--store", f"kafka:///{topic}", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        wait_port(port, 30)
    except TimeoutError:
        proc.kill()
        raise AssertionError(proc.communicate()[1].decode()) from None
    return proc, port


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err.decode()



def sync_age(metrics_port):
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return float(re.search(r"^kafka_server_config_watcher_config_sync_age_seconds (\S+)$", body, re.M).group(1))


@pytest.mark.timing
def test_a_quota_altered_with_kquota_configs_is_enforced_live(broker):
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    quota = 100_000
    metrics_port = free_port()
    proc, port = start_proxy(broker, topic, "--quota-window-num", "2", "--metrics-port", str(metrics_port))
    data = make_topic(broker.address)
    meter, halt = Meter(), threading.Event()
    producer = threading.Thread(target=produce_loop, args=(f"127.0.0.1:{port}", data, "paced", meter, halt))
    try:
        producer.start()
        assert wait_until(meter.total), "nothing delivered through the proxy"
        started = time.monotonic()
        time.sleep(1)  # the measured window of the unlimited rate
        unlimited = meter.rate(started, started + 1)
        r = run_cli("--store", f"kafka://{broker.address}/{topic}", "--alter", "--add-config",
                    f"producer_byte_rate={quota}", "--entity-type", "clients", "--entity-name", "paced")
        assert r.returncode == 0, r.stderr
        applied = time.monotonic()
        time.sleep(9)  # the measured window: the enforced rate is over its last 6 s
        age = sync_age(metrics_port)
    finally:
        halt.set()
        producer.join(30)
        code, err = stop(proc)
    assert code == 0 and "Traceback" not in err, err
    enforced = meter.rate(applied + 3, applied + 9)
    assert unlimited > 3 * quota, (unlimited, quota)
    assert 0.3 * quota <= enforced <= 1.2 * quota, (enforced, quota)
    assert max(meter.throttles, default=0) > 0
    assert 0 <= age < 3  # the follower confirms each second that it is current


def test_alter_client_quotas_through_one_proxy_is_seen_by_another(broker):
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    a, a_port = start_proxy(broker, topic, "--admin-principals", "ANONYMOUS")
    b, b_port = start_proxy(broker, topic, "--describe-principals", "ANONYMOUS")
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
        results = [stop(a), stop(b)]
    for code, err in results:
        assert code == 0 and "Traceback" not in err, err
