"""The request log's topic rows (kquota.request_log_schema): a multi-topic Produce through the
proxy to Apache Kafka's broker is logged as its own row plus one row per topic with that topic's
bytes, and the pipeline reads them as topic usage without counting the request twice."""

from __future__ import annotations

import struct

import pytest
from proxy_support import ProxyThread, make_topic
from proxy_wire import Wire, produce_v8
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


def produce_logged(broker, log_dir, client_id: str, body: bytes, times: int,
                   rows: int) -> tuple[list[dict], list[bytes], int]:
    """Sends the Produce v8 ``body`` ``times`` as ``client_id`` through a proxy writing its request
    log to ``log_dir``: the PRODUCE rows logged for ``client_id`` (once there are ``rows``), the
    answers' frames, and how many of the requests the proxy streamed. The log is closed on
    return."""
    qm = kquota.QuotaManager()
    log = RequestLogWriter(str(log_dir), rotate_seconds=600)
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm, request_log=log)
    try:
        streamed = proxy.proxy.streamed_requests
        w = Wire(proxy.proxy.bootstrap_address, client_id=client_id)
        try:
            answers = [w.exchange(0, 8, body) for _ in range(times)]
        finally:
            w.close()

        def mine() -> list[dict]:
            return [r for r in logged_rows(log, log_dir) if r["client_id"] == client_id and r["quota_type"] == "PRODUCE"]

        wait_until(lambda: len(mine()) >= rows, 10)
        return mine(), answers, proxy.proxy.streamed_requests - streamed
    finally:
        proxy.stop()
        log.close()
        qm.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_multi_topic_produce_is_logged_per_topic(broker, tmp_path, spark, layout):
    """One Produce request (v8, acks=1) with a record batch for each of two topics, built here
    (librdkafka sends a partition per request): the log has the request's PRODUCE row followed
    by a row per topic (same time and client, throttle on the request's row only) with that
    topic's batch bytes, and the broker appended both. No topic quota is needed for the rows;
    the pipeline reads the request once and each topic's bytes as topic rows. A request of
    200 KB is walked as it streams to the broker: the same rows, and it was streamed."""
    large_value, large_first = LAYOUTS[layout]
    log_dir = tmp_path / "log"
    small, large = make_topic(broker.address, prefix="tlog-a-"), make_topic(broker.address, prefix="tlog-b-")
    batches = {small: record_batch([b"s" * 1000] * 3), large: record_batch([b"L" * large_value] * 5)}
    if large_first:
        batches = dict(reversed(batches.items()))
    body = produce_v8(batches)
    rows, answers, streamed = produce_logged(broker, log_dir, "multi", body, times=3, rows=9)
    assert all(_partition_errors(frame) == {small: 0, large: 0} for frame in answers)  # both appended
    assert streamed == (3 if large_value > 3000 else 0)
    # The request as logged: its header (api key, version, correlation id, client id) and body.
    size = 2 + 2 + 4 + 2 + len(b"multi") + len(body)
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


def test_names_kafka_refuses_get_no_topic_row(broker, tmp_path):
    """An attack: a Produce naming thousands of names the broker refuses (too long, a slash) and
    one legal name. The log gets the request's row and one topic row (the legal name): the
    refused names land in no topic."""
    names = [f"bad/name-{i}" for i in range(2000)] + ["x" * 300, "legal-name"]
    rows, _, _ = produce_logged(broker, tmp_path / "log", "mallory", produce_v8(dict.fromkeys(names, b"")),
                                times=1, rows=2)
    assert [r["topic"] for r in rows] == [None, "legal-name"]
