"""generate, usage, recommend, report and the `kquota pipeline` CLI on the shared Spark session."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from kquota.cli import main
from kquota.config_file import load_quota_config
from kquota.pipeline.generate import generate, generate_frame
from kquota.pipeline.recommend import kafka_configs_commands, recommend
from kquota.pipeline.schema import read_requests
from kquota.pipeline.usage import per_second


@pytest.fixture(scope="module")
def sample(spark, tmp_path_factory):
    """A small generated log, written once, as pandas and as a path."""
    path = str(tmp_path_factory.mktemp("gen") / "log")
    generate(spark, 20_000, path, seed=4, brokers=3, users=12, duration_s=60)
    return path, pd.read_parquet(path)


def test_generate_is_seeded_skewed_and_well_formed(spark, sample):
    _, df = sample
    assert list(df.columns) == ["ts_ms", "broker", "user", "client_id", "quota_type", "value"]
    assert len(df) == 20_000 and set(df.broker) == {0, 1, 2}
    assert set(df.quota_type) == {"PRODUCE", "FETCH", "REQUEST"}
    assert (df.value > 0).all() and (df.client_id == "").any()
    counts = df.user.value_counts()
    assert counts.iloc[0] > 5 * counts.iloc[-1]  # skewed users
    # Same seed, other partitioning: same rows; another seed: other rows.
    key = ["ts_ms", "broker", "user", "client_id", "quota_type", "value"]
    again = generate_frame(spark, 20_000, seed=4, brokers=3, users=12, duration_s=60, partitions=5).toPandas()
    pd.testing.assert_frame_equal(df.sort_values(key).reset_index(drop=True),
                                  again.sort_values(key).reset_index(drop=True), check_dtype=False)
    other = generate_frame(spark, 1000, seed=5, brokers=3, users=12, duration_s=60).toPandas()
    assert not other.value.equals(df.value.head(1000))


def expected_per_second(df, keys):
    d = df.assign(second=df.ts_ms // 1000,
                  rate=np.where(df.quota_type == "REQUEST", df.value / 1e7, df.value))
    return d.groupby(keys + ["quota_type", "broker", "second"], dropna=False)["rate"].sum()


def test_usage_per_second_and_recommendation_match_pandas(spark, sample):
    path, df = sample
    per_sec = per_second(read_requests(spark, path).requests).toPandas()
    for level, keys in (("user", ["user"]), ("client-id", ["client_id"]), ("user-client", ["user", "client_id"])):
        got = per_sec[per_sec.level == level].set_index(keys + ["quota_type", "broker", "second"])["rate"]
        want = expected_per_second(df, keys)
        pd.testing.assert_series_equal(got.sort_index(), want.sort_index(), check_names=False, check_index_type=False, rtol=1e-9)
    rec = recommend(spark.createDataFrame(per_sec), level="user", percentile=100, headroom=1.5)
    # At the 100th percentile the quota is the busiest broker-second x headroom, rounded up.
    top_user = df.user.value_counts().index[0]
    rates = expected_per_second(df, ["user"])
    produce_max = rates.loc[(top_user, "PRODUCE")].max()
    row = rec.table[(rec.table.user == top_user) & (rec.table.quota_type == "PRODUCE")].iloc[0]
    assert row.config_key == "producer_byte_rate" and row.quota == np.ceil(produce_max * 1.5)
    by_entity = {e.entries.get("user"): c for e, c in rec.entries}
    assert by_entity[top_user]["producer_byte_rate"] == row.quota
    request_row = rec.table[(rec.table.user == top_user) & (rec.table.quota_type == "REQUEST")].iloc[0]
    assert request_row.config_key == "request_percentage"
    assert request_row.quota == np.ceil(rates.loc[(top_user, "REQUEST")].max() * 1.5 * 100 - 1e-9) / 100
    # Empty client-ids cannot carry a quota: skipped and counted at the client-id level.
    by_client = recommend(spark.createDataFrame(per_sec), level="client-id")
    assert by_client.skipped == 1 and all(e.entries["client-id"] for e, _ in by_client.entries)
    with pytest.raises(ValueError, match="level must be one of"):
        recommend(spark.createDataFrame(per_sec), level="broker")


def test_kafka_configs_command_lines():
    entries = [({"user": "alice"}, {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
               ({"user": None, "client-id": "it's"}, {"consumer_byte_rate": 2048.0})]
    from kquota.entity import ClientQuotaEntity

    lines = kafka_configs_commands([(ClientQuotaEntity(e), c) for e, c in entries], "b:9092")
    assert lines[0] == ("kafka-configs.sh --bootstrap-server b:9092 --alter --add-config "
                        "producer_byte_rate=1024,request_percentage=12.5 --entity-type users --entity-name alice")
    assert lines[1].endswith("--entity-type users --entity-default --entity-type clients --entity-name 'it'\"'\"'s'")


def test_cli_pipeline_end_to_end_and_self_contained_report(spark, sample, tmp_path, capsys):
    path, df = sample
    out = tmp_path
    assert main(["pipeline", "usage", "--input", path, "--out", str(out / "usage"), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "Top 3 at level user" in text and "no bad rows" in text
    assert main(["pipeline", "recommend", "--usage", str(out / "usage"), "--out", str(out / "rec"),
                 "--percentile", "90", "--headroom", "1.1"]) == 0
    entries = load_quota_config(out / "rec" / "quotas.json")  # a file the CLI and stores accept
    assert len(entries) == df.user.nunique()
    script = (out / "rec" / "kafka-configs.sh").read_text()
    assert script.count("kafka-configs.sh --bootstrap-server localhost:9092 --alter") == len(entries)
    assert main(["pipeline", "simulate", "--input", path, "--quotas", str(out / "rec" / "quotas.json"),
                 "--out", str(out / "sim"), "--model", "closed"]) == 0
    assert "closed model" in capsys.readouterr().out
    summary = pd.read_parquet(out / "sim" / "summary")
    assert summary.throttled_requests.sum() > 0
    assert main(["pipeline", "report", "--usage", str(out / "usage"), "--simulation", str(out / "sim"),
                 "--recommendation", str(out / "rec"), "--out", str(out / "report.html")]) == 0
    html = (out / "report.html").read_text()
    for section in ('id="rates"', 'id="throttles"', 'id="simulation"', 'id="recommendation"', 'id="usage"'):
        assert section in html
    assert html.count("<svg") >= 3 and "<polyline" in html and re.search(r"quota [\d.]+ [KMG]?B/s", html)
    assert html.count("<figure>") == html.count("<figcaption>") >= 3
    # Self-contained: links only to its own sections and to the CSV tables written beside it.
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert all(h.startswith("#") or re.fullmatch(r"report-\w+\.csv", h) for h in hrefs), hrefs
    for name in ("simulation", "recommendation", "usage"):
        assert (out / f"report-{name}.csv").stat().st_size > 0
    assert not re.search(r"src\s*=|https?://|<script|@import|url\(", html)


def test_cli_errors_are_one_line(spark, sample, tmp_path, capsys):
    path, _ = sample
    assert main(["pipeline", "simulate", "--input", path, "--quotas", str(tmp_path / "none.json"),
                 "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kquota: error: cannot read quota configuration") and "Traceback" not in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": -1}}]}))
    assert main(["pipeline", "simulate", "--input", path, "--quotas", str(bad), "--out", str(tmp_path / "o")]) == 1
    assert "producer_byte_rate" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["pipeline", "recommend", "--out", str(tmp_path / "r")])
    assert "exactly one of --input and --usage" in capsys.readouterr().err
