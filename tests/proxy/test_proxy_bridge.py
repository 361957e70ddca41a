"""What crosses between the proxy's Python handlers and its native data plane: a principal
learnt by the Python SASL handler (in front of Apache Kafka's SASL_PLAINTEXT listener) must reach
the quotas of the native Produce path (``ProxyDataPlane.set_user``), and the Fetch max bytes cap
computed natively must reach the broker."""

from __future__ import annotations

import uuid
from pathlib import Path

import kquota
from kquota.kafka.protocol import apis
from kquota.proxy.request_log_writer import RequestLogWriter
from proxy_fakes import FetchRecorder
from proxy_support import ProxyThread
from proxy_wire import Wire

from confluent_kafka import Producer
from waiting import wait_until

WINDOW_NUM = 2


def logged_rows(log: RequestLogWriter, directory: Path) -> list[dict]:
    """Every row of the request log so far (``flush`` writes what is buffered)."""
    import pyarrow.parquet as pq

    log.flush()
    return [row for f in sorted(directory.glob("*.parquet")) for row in pq.read_table(str(f)).to_pylist()]


def test_sasl_principal_reaches_the_produce_quota(kafka_broker, tmp_path):
    """librdkafka authenticates as alice (SASL/PLAIN, at Kafka's broker) on every connection: her
    produce quota throttles her, the same client id as ANONYMOUS is charged nothing, and the
    request log (taken from the running proxy) names her."""
    qm = kquota.QuotaManager(window_num=WINDOW_NUM, window_size_seconds=1)
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 20_000})])
    log = RequestLogWriter(str(tmp_path), rotate_seconds=600)
    upstream = kafka_broker.listener("SASL_PLAINTEXT")
    proxy = ProxyThread(("127.0.0.1", upstream.port), qm=qm, request_log=log, sasl_listener=True)
    try:
        prefix = f"bridge-{uuid.uuid4().hex[:8]}-"
        topic = prefix + "alice"
        kafka_broker.create_topic(topic)
        kafka_broker.allow("User:alice", prefix)  # Kafka's ACLs let her write it
        throttles: list[float] = []
        p = Producer({**kafka_broker.client_config("SASL_PLAINTEXT", "alice", "PLAIN"),
                      "bootstrap.servers": proxy.address, "client.id": "sasl-client", "linger.ms": 5,
                      "throttle_cb": lambda e: throttles.append(e.throttle_time)})
        for _ in range(200):
            p.produce(topic, b"v" * 1000)
            p.poll(0)
        assert p.flush(30) == 0
        def throttled() -> bool:
            p.poll(0.1)  # serves the throttle callbacks
            return bool(throttles)

        wait_until(throttled, 10, 0)
        assert qm.measured_rate(kquota.ClientQuotaType.PRODUCE, "alice", "sasl-client") > 0
        assert qm.measured_rate(kquota.ClientQuotaType.PRODUCE, "ANONYMOUS", "sasl-client") == 0
        assert throttles and max(throttles) > 0  # 200 KB against 20 KB/s
        def produce_rows() -> list[dict]:
            return [r for r in logged_rows(log, tmp_path) if r["quota_type"] == "PRODUCE" and r["topic"] is None]

        # The native plane's rows reach the log as they are drained (every ~0.2 s).
        wait_until(lambda: sum(r["value"] for r in produce_rows()) >= 200 * 1000, 10)
        produce = produce_rows()
        assert produce and {(r["user"], r["client_id"]) for r in produce} == {("alice", "sasl-client")}
        assert sum(r["value"] for r in produce) >= 200 * 1000
    finally:
        proxy.stop()
        qm.close()


def test_fetch_max_bytes_reach_the_broker_capped():
    """Kafka: fetchMaxBytes = min(maxBytes, quota x (samples - 1) x window), minBytes capped
    likewise; a client without a quota keeps its own. A recording broker, because what the proxy
    sent on is what Kafka's broker cannot show."""
    broker = FetchRecorder()
    qm = kquota.QuotaManager(window_num=WINDOW_NUM, window_size_seconds=1)
    qm.alter_client_quotas([({"client-id": "capped"}, {"consumer_byte_rate": 50_000})])
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    request = {"ReplicaId": -1, "MaxWaitMs": 10, "MinBytes": 60_000_000, "MaxBytes": 50_000_000,
               "IsolationLevel": 0, "SessionId": 0, "SessionEpoch": -1, "ForgottenTopicsData": [], "RackId": "",
               "Topics": [{"Topic": "t", "Partitions": [{
                   "Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0, "LastFetchedEpoch": -1,
                   "LogStartOffset": -1, "PartitionMaxBytes": 10_000_000}]}]}
    try:
        for client_id, max_bytes, min_bytes in (("capped", 50_000 * (WINDOW_NUM - 1), 50_000 * (WINDOW_NUM - 1)),
                                                ("free", 50_000_000, 60_000_000)):
            w = Wire(proxy.proxy.bootstrap_address, client_id=client_id)
            resp = w.call(apis.FETCH, 12, "Fetch", request)
            assert resp["ErrorCode"] == 0
            sent = broker.requests[-1]
            assert (sent["MaxBytes"], sent["MinBytes"]) == (max_bytes, min_bytes)
            assert sent["Topics"][0]["Partitions"][0]["PartitionMaxBytes"] == 10_000_000
            w.close()
    finally:
        proxy.stop()
        qm.close()
        broker.stop()


def test_tables_handed_to_the_native_plane_match_the_codec():
    """One source for the wire rules: the native plane's tables are the codec's."""
    from kquota.kafka.protocol.codec import is_flexible
    from kquota.proxy.dispatch import _DISPATCH
    from kquota.proxy.server import python_keys, version_table
    from kquota.kafka.protocol.schemas import FLEXIBLE_FIRST, THROTTLE_FIRST

    flexible = version_table(FLEXIBLE_FIRST)
    for key in range(len(flexible)):
        for version in range(20):
            assert (flexible[key] >= 0 and version >= flexible[key]) == is_flexible(key, version), (key, version)
    throttle = version_table(THROTTLE_FIRST)
    assert {k: v for k, v in enumerate(throttle) if v >= 0} == THROTTLE_FIRST
    assert set(python_keys()) == set(_DISPATCH) - {apis.PRODUCE, apis.FETCH}
    assert not {apis.PRODUCE, apis.FETCH} & set(python_keys())  # always native
    assert {apis.API_VERSIONS, apis.METADATA, apis.SASL_AUTHENTICATE, apis.ALTER_CLIENT_QUOTAS} <= set(python_keys())
