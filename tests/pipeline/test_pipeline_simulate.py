"""`kquota pipeline simulate` on Spark against in-process QuotaManagers, and request-log
validation."""


import numpy as np
import pandas as pd
import pytest

import kquota
from kquota.config_file import dump_quota_config, load_quota_config, quota_config_document
from kquota.pipeline.replay import replay
from kquota.pipeline.schema import RequestLogError, read_requests
from kquota.pipeline.simulate import simulate

CONFIG = [
    ({"user": "alice"}, {"producer_byte_rate": 10_000}),
    ({"user": "bob", "client-id": "b1"}, {"producer_byte_rate": 8_000, "consumer_byte_rate": 10_000,
                                          "request_percentage": 20}),
    ({"user": None, "client-id": None}, {"consumer_byte_rate": 20_000, "request_percentage": 8}),
    ({"client-id": "shared"}, {"producer_byte_rate": 15_000}),
]
USERS = ["alice", "alice", "bob", "bob", "carol", "dave"]
CLIENTS = ["a1", "shared", "b1", "shared", "", "shared"]


def request_log(n=4000, seed=3, brokers=3):
    rng = np.random.default_rng(seed)
    who = rng.integers(0, len(USERS), n)
    quota_type = rng.choice(["PRODUCE", "fetch", "Fetch", "request"], n)
    # Unique values identify each row in the output; REQUEST values are thread-time ns.
    value = (rng.permutation(n) + 1000.0) * np.where(quota_type == "request", 30_000.0, 1.0)
    return pd.DataFrame({
        "ts_ms": rng.integers(0, 30_000, n) // 5 * 5,  # unsorted, many ties
        "broker": rng.integers(0, brokers, n),
        "user": np.array(USERS)[who],
        "client_id": np.array(CLIENTS)[who],
        "quota_type": quota_type,
        "value": value,
    })


@pytest.fixture
def quotas_file(tmp_path):
    path = tmp_path / "quotas.json"
    dump_quota_config(CONFIG, path)
    return str(path)


def in_process(df, model="open"):
    """Throttles of feeding each broker's requests, in (ts_ms, input order), to a QuotaManager."""
    want = pd.Series(0, index=df.index, dtype=np.int64)
    for _, g in df.groupby("broker"):
        g = g.sort_values("ts_ms", kind="stable")
        qm = kquota.QuotaManager()
        qm.alter_client_quotas(CONFIG)
        if model == "open":
            for i, row in g.iterrows():
                if row.quota_type.upper() == "REQUEST":
                    want[i] = qm.record_request_time(row.user, row.client_id, row.value, now_ms=int(row.ts_ms))
                else:
                    want[i] = qm.record_and_get_throttle_time_ms(
                        row.quota_type, row.user, row.client_id, row.value, now_ms=int(row.ts_ms))
        else:
            codes, uniq = pd.MultiIndex.from_arrays([g.user, g.client_id]).factorize()
            got = replay(qm, g.ts_ms.to_numpy(), g.quota_type.to_numpy(), codes, list(uniq),
                         g.value.to_numpy(), model="closed")
            want[g.index] = got
    return want


def run(spark, df, tmp_path, quotas_file, fmt="parquet", model="open"):
    src = tmp_path / f"log.{fmt}"
    if fmt == "parquet":
        df.to_parquet(src, index=False)
    elif fmt == "csv":
        df.to_csv(src, index=False)
    else:
        df.to_json(src, orient="records", lines=True)
    out = tmp_path / f"out-{fmt}-{model}"
    log = read_requests(spark, str(src))
    result = simulate(spark, log, quota_config_document(load_quota_config(quotas_file)), str(out), model=model)
    return result, pd.read_parquet(out / "requests"), pd.read_parquet(out / "summary")


def test_open_model_equals_a_quota_manager_per_broker(spark, tmp_path, quotas_file):
    df = request_log()
    result, got, summary = run(spark, df, tmp_path, quotas_file)
    assert list(got.columns) == ["ts_ms", "broker", "user", "client_id", "quota_type", "value", "throttle_ms"]
    assert got.throttle_ms.dtype == np.int32 and len(got) == len(df)
    want = in_process(df)
    merged = df.assign(want=want).merge(got[["value", "throttle_ms"]], on="value", validate="1:1")
    assert (merged.throttle_ms > 0).sum() > 50
    assert (merged[merged.quota_type == "request"].throttle_ms > 0).sum() > 10
    assert merged.throttle_ms.tolist() == merged.want.tolist()
    assert result.bad_counts == {}
    # Summary: one row per quota type and metric-tag set, consistent with the requests.
    assert not summary.duplicated(["quota_type", "tag_user", "tag_client_id"]).any()
    assert summary.requests.sum() == len(df)
    assert summary.throttled_requests.sum() == (got.throttle_ms > 0).sum()
    assert summary.total_delay_ms.sum() == got.throttle_ms.sum()
    assert summary.max_delay_ms.max() == got.throttle_ms.max()
    alice = summary[(summary.quota_type == "PRODUCE") & (summary.tag_user == "alice")].iloc[0]
    assert alice.quota == 10_000 and alice.brokers == 3 and alice.tag_client_id == ""
    assert 0 < alice.time_over_quota_ms <= alice.total_delay_ms
    assert alice.throttled_share == alice.throttled_requests / alice.requests
    assert (summary.total_pushback_ms == 0).all()


def test_csv_and_json_logs_read_as_parquet_does(spark, tmp_path):
    df = request_log(n=300, seed=5, brokers=2)
    columns = ["ts_ms", "broker", "user", "client_id", "quota_type", "value"]
    want = df.assign(quota_type=df.quota_type.str.upper())[columns]
    for fmt in ("parquet", "csv", "json"):
        src = tmp_path / f"log.{fmt}"
        {"parquet": lambda: df.to_parquet(src, index=False), "csv": lambda: df.to_csv(src, index=False),
         "json": lambda: df.to_json(src, orient="records", lines=True)}[fmt]()
        log = read_requests(spark, str(src))
        got = log.requests.toPandas()
        # Rows keep their input order in _row; an empty client_id stays "" (not null).
        got = got.sort_values("_row")[columns].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
        assert (got[got.user == "carol"].client_id == "").all()


def test_closed_model_pushes_back_throttled_clients(spark, tmp_path, quotas_file):
    df = request_log(n=3000, seed=9, brokers=2)
    _, got, summary = run(spark, df, tmp_path, quotas_file, model="closed")
    want = in_process(df, model="closed")
    merged = df.assign(want=want).merge(got[["value", "throttle_ms"]], on="value", validate="1:1")
    assert merged.throttle_ms.tolist() == merged.want.tolist()
    assert summary.total_pushback_ms.sum() > 0 and summary.max_pushback_ms.max() > 0


def test_missing_or_mistyped_column_is_one_clear_error(spark, tmp_path):
    df = request_log(n=10)
    df.drop(columns=["value"]).to_parquet(tmp_path / "a.parquet")
    with pytest.raises(RequestLogError, match="has no column 'value'"):
        read_requests(spark, str(tmp_path / "a.parquet"))
    df.assign(ts_ms=df.ts_ms + 0.5).to_parquet(tmp_path / "b.parquet")
    with pytest.raises(RequestLogError, match="column 'ts_ms' has type double; expected an integer"):
        read_requests(spark, str(tmp_path / "b.parquet"))
    (tmp_path / "c.txt").write_text("x")
    with pytest.raises(RequestLogError, match="cannot tell the format"):
        read_requests(spark, str(tmp_path / "c.txt"))
    with pytest.raises(RequestLogError, match="does not exist"):
        read_requests(spark, str(tmp_path / "nope.csv"))


def test_bad_rows_are_counted_kept_and_skipped(spark, tmp_path, quotas_file):
    good = request_log(n=200, seed=1, brokers=1).drop(columns=["broker"])
    csv = good.to_csv(index=False)
    csv += "12x,alice,a1,PRODUCE,100\n"        # ts_ms not an integer
    csv += "100,alice,a1,DELETE,100\n"         # unknown quota type
    csv += "100,alice,a1,PRODUCE,-5\n"         # negative value
    csv += "100,alice,a1,PRODUCE,NaN\n"        # not finite
    csv += "100,,a1,PRODUCE,5\n"               # no user
    (tmp_path / "log.csv").write_text(csv)
    # No broker column: every request is on broker 0.
    log = read_requests(spark, str(tmp_path / "log.csv"))
    assert log.bad_total() == 5
    assert log.bad_counts() == {
        "ts_ms is missing or not an integer": 1,
        "quota_type is not PRODUCE, FETCH or REQUEST": 1,
        "value is missing, negative or not a finite number": 2,
        "user is missing": 1,
    }
    result = simulate(spark, log, quota_config_document(CONFIG), str(tmp_path / "out"))
    assert result.bad_counts == log.bad_counts()
    got = pd.read_parquet(tmp_path / "out" / "requests")
    assert len(got) == 200 and set(got.broker) == {0}
    bad = pd.read_parquet(result.bad_rows_path)
    assert len(bad) == 5 and set(bad.reason) == set(log.bad_counts())
    assert sorted(bad.ts_ms) == sorted(["12x", "100", "100", "100", "100"])
