"""The request log's topic rows (kquota.request_log_schema): a multi-topic Produce through the
proxy to Apache Kafka's broker is logged as its own row plus one row per topic with that topic's
bytes, and the pipeline reads them as topic usage without counting the request twice."""

from __future__ import annotations

import struct

import pytest
from proxy_support import ProxyThread, make_topic
from proxy_wire import Wire
from record_batch import record_batch
from test_proxy_bridge import logged_rows
from waiting import wait_until

import kquota
from kquota.proxy.request_log_writer import RequestLogWriter

pytest.importorskip("confluent_kafka")  # make_topic
pq = pytest.importorskip("pyarrow.parquet")


def _partition_errors(frame: bytes) -> dict[str, int]:
    """Each topic's (one partition's) error code in a Produce v8 response."""
    out, at = {}, 8  # correlation id, topic count
    for _ in range(struct.unpack_from(">i", frame, 4)[0]):
        n = struct.unpack_from(">h", frame, at)[0]
        name = frame[at + 2:at + 2 + n].decode()
        at += 2 + n
        assert struct.unpack_from(">i", frame, at)[0] == 1
        out[name] = struct.unpack_from(">h", frame, at + 8)[0]
        at += 4 + 4 + 2 + 8 + 8 + 8
        assert struct.unpack_from(">i", frame, at)[0] == 0  # no record errors
        at += 4
        m = struct.unpack_from(">h", frame, at)[0]
        at += 2 + max(m, 0)
    return out


#: (each large record's size, whether the large topic comes first): a request held whole (under
#: the 64 KiB a request is streamed from), then streamed requests (sent on to the broker as their
#: topics are walked, the batches relayed unread) whose last batch is the large one or the small.
LAYOUTS = {"held whole": (3000, False), "streamed, large batch last": (40_000, False),
           "streamed, large batch first": (40_000, True)}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_multi_topic_produce_is_logged_per_topic(broker, tmp_path, spark, layout):
    """One Produce request (v8, acks=1) with a record batch for each of two topics, built here
    (librdkafka sends a partition per request): the log has the request's PRODUCE row followed
    by a row per topic (same time and client, throttle on the request's row only) with that
    topic's batch bytes, and the broker appended both. No topic quota is needed for the rows;
    the pipeline reads the request once and each topic's bytes as topic rows. A request of
    200 KB is walked as it streams to the broker: the same rows, and it was streamed."""
    large_value, large_first = LAYOUTS[layout]
    qm = kquota.QuotaManager()
    log_dir = tmp_path / "log"
    log = RequestLogWriter(str(log_dir), rotate_seconds=600)
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm, request_log=log)
    try:
        small, large = make_topic(proxy.address, prefix="tlog-a-"), make_topic(proxy.address, prefix="tlog-b-")
        batches = {small: record_batch([b"s" * 1000] * 3), large: record_batch([b"L" * large_value] * 5)}
        if large_first:
            batches = dict(reversed(batches.items()))
        body = struct.pack(">hhi", -1, 1, 5000) + struct.pack(">i", 2)
        for name, batch in batches.items():
            body += struct.pack(">h", len(name)) + name.encode() + struct.pack(">i", 1)
            body += struct.pack(">ii", 0, len(batch)) + batch
        host, port = proxy.proxy.bootstrap_address
        w = Wire((host, port), client_id="multi")
        streamed = proxy.proxy.streamed_requests
        try:
            for _ in range(3):
                w.send_raw(w.frame(0, 8, body))
                frame = w.read_frame()
                assert struct.unpack_from(">i", frame)[0] == w.corr
                assert _partition_errors(frame) == {small: 0, large: 0}  # both appended
        finally:
            w.close()

        def mine() -> list[dict]:
            return [r for r in logged_rows(log, log_dir) if r["client_id"] == "multi" and r["quota_type"] == "PRODUCE"]

        wait_until(lambda: len(mine()) >= 9, 10)
        rows = mine()
        streamed = proxy.proxy.streamed_requests - streamed
    finally:
        proxy.stop()
        log.close()
        qm.close()
    size = len(w.frame(0, 8, body)) - 4
    assert streamed == (3 if large_value > 3000 else 0)
    per_request = [(None, size)] + [(t, len(b)) for t, b in batches.items()]
    assert [(r["topic"], r["value"]) for r in rows] == per_request * 3
    assert all(r["ts_ms"] == rows[i - i % 3]["ts_ms"] for i, r in enumerate(rows))
    assert all(r["throttle_time_ms"] == 0 for r in rows)
    # The pipeline: the requests once, the topics' bytes per topic.
    from kquota.pipeline.schema import read_requests

    read = read_requests(spark, str(log_dir))
    assert read.bad_total() == 0
    mine_q = "client_id = 'multi' AND quota_type = 'PRODUCE'"
    assert read.requests.where(mine_q).groupBy().sum("value").first()[0] == 3 * size
    got = {r["topic"]: r["sum(value)"] for r in read.topic_requests.where(mine_q).groupBy("topic").sum("value").collect()}
    assert got == {t: 3.0 * len(b) for t, b in batches.items()}


def _produce_v8(topics: list[str]) -> bytes:
    """A Produce v8 body (acks=1) naming ``topics``, one partition each with empty records."""
    body = struct.pack(">hhi", -1, 1, 5000) + struct.pack(">i", len(topics))
    for name in topics:
        raw = name.encode()
        body += struct.pack(">h", len(raw)) + raw + struct.pack(">i", 1) + struct.pack(">ii", 0, 0)
    return body


def test_names_kafka_refuses_get_no_topic_row(broker, tmp_path):
    """An attack: a Produce naming thousands of names the broker refuses (too long, a slash) and
    one legal name. The log gets the request's row and one topic row (the legal name): the
    refused names land in no topic."""
    qm = kquota.QuotaManager()
    log_dir = tmp_path / "log"
    log = RequestLogWriter(str(log_dir), rotate_seconds=600)
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm, request_log=log)
    try:
        host, port = proxy.proxy.bootstrap_address
        w = Wire((host, port), client_id="mallory")
        try:
            w.send_raw(w.frame(0, 8, _produce_v8([f"bad/name-{i}" for i in range(2000)] + ["x" * 300, "legal-name"])))
            frame = w.read_frame()
            assert struct.unpack_from(">i", frame)[0] == w.corr
        finally:
            w.close()

        def mine() -> list[dict]:
            return [r for r in logged_rows(log, log_dir) if r["client_id"] == "mallory" and r["quota_type"] == "PRODUCE"]

        wait_until(lambda: len(mine()) >= 2, 10)
        rows = mine()
    finally:
        proxy.stop()
        log.close()
        qm.close()
    assert [r["topic"] for r in rows] == [None, "legal-name"]
