"""The request log's topic column (kquota.request_log_schema) and the pipeline's topic quotas
(kquota.pipeline.topics): topic usage, recommended topic quotas, a replay with topic quotas,
and hostile topic rows."""

from __future__ import annotations

import json

import pytest
from kquota import request_log_schema
from kquota.pipeline import schema
from kquota.proxy.request_log_writer import RequestLogWriter

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

T0 = 1_700_000_000_000


def _log(tmp_path, rows, name="log.parquet", with_topic=True):
    cols = request_log_schema.COLUMNS + ((request_log_schema.TOPIC,) if with_topic else ())
    types = {"ts_ms": pa.int64(), "broker": pa.int32(), "user": pa.string(), "client_id": pa.string(),
             "quota_type": pa.string(), "value": pa.float64(), "topic": pa.string()}
    data = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    d = tmp_path / "log"
    d.mkdir(exist_ok=True)
    pq.write_table(pa.table({c: pa.array(data[c], types[c]) for c in cols}), d / name)
    return str(d)


def _two_producers(seconds=20):
    """alice/a1 and bob/b1 each produce 600 B/s into topic "shared" (60 B every 100 ms): each
    under its client quota of 1000 B/s, the topic's 1200 B/s over a topic quota of 1000 B/s."""
    rows = []
    for i in range(seconds * 10):
        ts = T0 + i * 100
        for user, client in (("alice", "a1"), ("bob", "b1")):
            rows.append((ts, 0, user, client, "PRODUCE", 60.0, None))
            rows.append((ts, 0, user, client, "PRODUCE", 60.0, "shared"))
    return rows


def test_written_topic_rows_round_trip(tmp_path, spark):
    w = RequestLogWriter(str(tmp_path / "w"), rotate_seconds=600)
    try:
        w.add(T0, "alice", "app", "PRODUCE", 900, 0)
        w.add(T0, "alice", "app", "PRODUCE", 600, topic="orders")
        w.add(T0, "alice", "app", "PRODUCE", 300, topic="audit")
    finally:
        w.close()
    (f,) = sorted((tmp_path / "w").glob("*.parquet"))
    assert pq.read_table(f).column("topic").to_pylist() == [None, "orders", "audit"]
    log = schema.read_requests(spark, str(tmp_path / "w"))
    assert log.has_topics
    assert [(r.quota_type, r.value) for r in log.requests.collect()] == [("PRODUCE", 900.0)]  # counted once
    assert sorted((r.topic, r.value) for r in log.topic_requests.collect()) == [("audit", 300.0), ("orders", 600.0)]
    assert log.bad_total() == 0


def test_a_log_without_the_column_reads_as_before(tmp_path, spark):
    log = schema.read_requests(spark, _log(tmp_path, [(T0, 0, "u", "c", "FETCH", 10.0)], with_topic=False))
    assert not log.has_topics and log.topic_requests.count() == 0
    assert [r.value for r in log.requests.collect()] == [10.0]


def test_csv_empty_topic_is_an_own_row(tmp_path, spark):
    p = tmp_path / "log.csv"
    p.write_text("ts_ms,user,client_id,quota_type,value,topic\n1,u,c,PRODUCE,5,\n1,u,c,PRODUCE,5,t1\n")
    log = schema.read_requests(spark, str(p))
    assert log.requests.count() == 1 and log.topic_requests.count() == 1 and log.bad_total() == 0


def test_hostile_topic_rows_are_bad_rows(tmp_path, spark):
    huge = "t" * (1 << 20)
    rows = [(T0, 0, "u", "c", "PRODUCE", 5.0, None),
            (T0, 0, "u", "c", "PRODUCE", 5.0, huge),
            (T0, 0, "u", "c", "PRODUCE", 5.0, ""),
            (T0, 0, "u", "c", "PRODUCE", 5.0, "a/b"),
            (T0, 0, "u", "c", "PRODUCE", 5.0, ".."),
            (T0, 0, "u", "c", "REQUEST", 5.0, "t1"),
            (T0, 0, "u", "c", "FETCH", 5.0, "t" * 249)]
    log = schema.read_requests(spark, _log(tmp_path, rows))
    assert log.bad_counts() == {"topic is empty or not a legal topic name": 4,
                                "a topic row's quota_type is not PRODUCE or FETCH": 1}
    assert log.requests.count() == 1 and log.topic_requests.count() == 1
    # simulate leaves the Arrow-direct path for the Spark path, which keeps them with their reason.
    from kquota.pipeline.simulate import simulate

    result = simulate(spark, log, {"quotas": []}, str(tmp_path / "sim"))
    assert result.bad_counts == log.bad_counts()
    assert pq.read_table(result.requests_path).num_rows == 1


def test_usage_and_recommendation_of_topics(tmp_path, spark):
    import argparse
    import io

    from kquota.pipeline.commands import cmd_recommend, cmd_usage

    src = _log(tmp_path, _two_producers())
    out = tmp_path / "usage"
    args = argparse.Namespace(input=src, format=None, out=str(out), top=5, master="local[2]", remote=None, conf=None)
    assert cmd_usage(args, io.StringIO()) == 0
    import pandas as pd

    ent = pd.read_parquet(out / "topics" / "entities")
    (row,) = ent.itertuples()
    assert (row.topic, row.quota_type, row.requests, row.total) == ("shared", "PRODUCE", 400, 24_000.0)
    assert row.max == 1200.0 and row.seconds == 20 and T0 // 1000 <= row.peak_second < T0 // 1000 + 20
    # The client usage counts each request once: 600 B/s per user, not 1200.
    users = pd.read_parquet(out / "entities")
    assert users[(users["level"] == "user")]["max"].max() == 600.0
    rec_dir = tmp_path / "rec"
    rargs = argparse.Namespace(input=None, format=None, usage=str(out), out=str(rec_dir), level="user",
                               percentile=99.0, headroom=1.5, bootstrap_server="proxy:9092", master="local[2]",
                               remote=None, conf=None, topics=False)
    assert cmd_recommend(rargs, io.StringIO()) == 0
    # Without --topics the topic quotas are recommended (topics.csv) but not put in the configuration.
    assert "topic" not in (rec_dir / "quotas.json").read_text()
    assert (rec_dir / "topics.csv").read_text().splitlines() == [
        "topic,quota_type,config_key,observed,quota", "shared,PRODUCE,producer_byte_rate,1200.0,1800.0"]
    rargs.topics = True
    assert cmd_recommend(rargs, io.StringIO()) == 0
    doc = json.loads((rec_dir / "quotas.json").read_text())
    assert {"entity": {"topic": "shared"}, "config": {"producer_byte_rate": 1800}} in doc["quotas"]
    assert {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 900}} in doc["quotas"]
    script = (rec_dir / "kafka-configs.sh").read_text()
    assert "kquota configs --bootstrap-server proxy:9092 --alter --add-config producer_byte_rate=1800 " \
           "--entity-type topics --entity-name shared" in script


def test_a_topic_quota_throttles_two_clients_together(tmp_path, spark):
    import pandas as pd
    from kquota.pipeline.schema import read_requests
    from kquota.pipeline.simulate import simulate

    log = read_requests(spark, _log(tmp_path, _two_producers()))
    clients = {"quotas": [{"entity": {"user": u}, "config": {"producer_byte_rate": 1000}} for u in ("alice", "bob")]}
    alone = simulate(spark, log, clients, str(tmp_path / "alone"))  # the Arrow-direct path
    replayed = pd.read_parquet(alone.requests_path)
    assert len(replayed) == 400 and replayed["value"].sum() == 24_000  # the topic rows are not requests
    assert replayed["throttle_ms"].max() == 0  # 600 B/s each: under 1000
    with_topic = {"quotas": clients["quotas"] + [{"entity": {"topic": "shared"}, "config": {"producer_byte_rate": 1000}}]}
    both = simulate(spark, log, with_topic, str(tmp_path / "both"))
    req = pd.read_parquet(both.requests_path)
    assert len(req) == 400  # the topic rows are not replayed as requests of their own
    throttled = req[req["throttle_ms"] > 0]
    assert set(throttled["user"]) == {"alice", "bob"}
    topics = pd.read_parquet(both.topics_path)
    (t,) = topics.itertuples()
    assert (t.topic, t.quota, t.requests, t.orphan_rows) == ("shared", 1000.0, 400, 0)
    assert t.throttled_requests == len(throttled) and t.total_delay_ms == int(throttled["throttle_ms"].sum())
    # The same replay through the kernel by hand: one handle per client, the topic on each request.
    import kquota

    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1000}), ({"user": "bob"}, {"producer_byte_rate": 1000}),
                            ({"topic": "shared"}, {"producer_byte_rate": 1000})])
    h = {u: qm.client(u, c) for u, c in (("alice", "a1"), ("bob", "b1"))}
    expect = [h[u].produce_response(60.0, 0.0, True, T0 + i * 100, topics=[("shared", 60.0)])[0]
              for i in range(200) for u in ("alice", "bob")]
    qm.close()
    assert req["throttle_ms"].tolist() == expect
    with pytest.raises(Exception, match="open model only"):
        simulate(spark, log, with_topic, str(tmp_path / "closed"), model="closed")


def test_the_report_has_the_topic_sections(tmp_path, spark):
    import argparse
    import io

    from kquota.pipeline.commands import cmd_recommend, cmd_usage, make_report
    from kquota.pipeline.schema import read_requests
    from kquota.pipeline.simulate import simulate

    src = _log(tmp_path, _two_producers(5))
    common = dict(master="local[2]", remote=None, conf=None, format=None)
    cmd_usage(argparse.Namespace(input=src, out=str(tmp_path / "u"), top=5, **common), io.StringIO())
    cmd_recommend(argparse.Namespace(input=src, usage=None, out=str(tmp_path / "r"), level="user", percentile=99.0,
                                     headroom=1.2, bootstrap_server="x:1", topics=True, **common), io.StringIO())
    doc = json.loads((tmp_path / "r" / "quotas.json").read_text())
    simulate(spark, read_requests(spark, src), doc, str(tmp_path / "s"))
    path = make_report(spark, str(tmp_path / "u"), str(tmp_path / "s"), str(tmp_path / "r"),
                       str(tmp_path / "report.html"), "user")
    html = open(path, encoding="utf-8").read()
    for section in ("Topic usage", "Recommended topic quotas", "Replay with topic quotas"):
        assert section in html
    assert "topics/shared" in html
    assert (tmp_path / "report-topic-replay.csv").exists()
