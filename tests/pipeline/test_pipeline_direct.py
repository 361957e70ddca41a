"""The Arrow-direct `simulate` path against the Spark path and in-process replay: identical
requests and summary, input order explicit (files in name order, rows in file order)."""

import os

import numpy as np
import pandas as pd
import pytest

from kquota.config_file import quota_config_document
from kquota.pipeline import direct
from kquota.pipeline.progress import format_line
from kquota.pipeline.schema import read_requests
from kquota.pipeline.simulate import simulate, simulate_spark
from kquota.pipeline.summary import spark_percentile
from test_pipeline_simulate import CONFIG, in_process, request_log
from waiting import wait_until


def split_log(df, path):
    """Writes ``df`` as three files whose name order (a, b, c) is not their size order, so Spark's
    packing (largest first) would order them b, c, a."""
    os.makedirs(path)
    parts = {"a": df.iloc[:500], "b": df.iloc[500:4000], "c": df.iloc[4000:]}
    for name, part in parts.items():
        part.to_parquet(os.path.join(path, f"{name}.parquet"), index=False)
    return str(path)


@pytest.mark.parametrize("model", ["open", "closed"])
def test_direct_path_equals_spark_path_and_in_process(spark, tmp_path, model):
    df = request_log(n=6000, seed=11, brokers=3)
    src = split_log(df, tmp_path / "log")
    doc = quota_config_document(CONFIG)
    log = read_requests(spark, src)
    assert direct.plan(log, str(tmp_path / "x")) is not None
    lines = []
    fast = simulate(spark, log, doc, str(tmp_path / "fast"), model=model, progress=lines.append)
    assert os.path.exists(tmp_path / "fast" / "requests" / "_SUCCESS")
    assert any(n.endswith("-kquota.parquet") for n in os.listdir(tmp_path / "fast" / "requests"))
    assert not os.path.exists(tmp_path / "fast" / "_kquota_tmp")
    slow = simulate_spark(spark, read_requests(spark, src), doc, str(tmp_path / "slow"), model=model)
    got_f = pd.read_parquet(fast.requests_path)
    got_s = pd.read_parquet(slow.requests_path)
    assert list(got_f.columns) == list(got_s.columns)
    assert got_f.dtypes.to_dict() == got_s.dtypes.to_dict()
    key = ["broker", "ts_ms", "value"]
    pd.testing.assert_frame_equal(got_f.sort_values(key).reset_index(drop=True),
                                  got_s.sort_values(key).reset_index(drop=True))
    # Input order = files in name order: the same throttles as replaying the concatenation.
    want = in_process(df, model=model)
    merged = df.assign(want=want).merge(got_f[["value", "throttle_ms"]], on="value", validate="1:1")
    assert merged.throttle_ms.tolist() == merged.want.tolist()
    assert (merged.throttle_ms > 0).sum() > 50
    sum_f = pd.read_parquet(fast.summary_path)
    sum_s = pd.read_parquet(slow.summary_path)
    pd.testing.assert_frame_equal(sum_f, sum_s)
    assert sum_f.quota.isna().any()  # unlimited quotas are null, not NaN, on both paths
    assert pd.read_parquet(fast.bad_rows_path).columns.tolist() == pd.read_parquet(slow.bad_rows_path).columns.tolist()


def test_nulls_or_bad_rows_take_the_spark_path(spark, tmp_path):
    df = request_log(n=300, seed=2, brokers=2)
    df.loc[7, "quota_type"] = "DELETE"
    df.loc[9, "user"] = None
    src = str(tmp_path / "log.parquet")
    df.to_parquet(src, index=False)
    lines = []
    result = simulate(spark, read_requests(spark, src), quota_config_document(CONFIG), str(tmp_path / "out"),
                      progress=lines.append)
    assert any("Spark path" in s for s in lines)
    assert result.bad_counts == {"quota_type is not PRODUCE, FETCH or REQUEST": 1, "user is missing": 1}
    assert len(pd.read_parquet(result.requests_path)) == 298
    assert not os.path.exists(tmp_path / "out" / "_kquota_tmp")


def test_spark_percentile_interpolates_as_spark_does(spark):
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 7, 100, 1001, 1001, 5000):
        xs = rng.integers(0, 50, n) * rng.integers(1, 1000)
        hv, hc = np.unique(xs, return_counts=True)
        want = spark.createDataFrame(pd.DataFrame({"x": xs.astype(np.int32)})) \
            .selectExpr("percentile(x, 0.99) as p").collect()[0]["p"]
        assert spark_percentile(hv, hc, 0.99) == want


def test_brokers_are_assigned_largest_first_to_the_least_loaded_task():
    assert direct.assign({0: 10, 1: 50, 2: 30, 3: 25}, 2) == [[1, 0], [2, 3]]
    assert direct.assign({5: 1}, 4) == [[5]]


def test_progress_line_has_stage_rows_and_eta():
    assert format_line("simulate: replay", 10_000_000, 2, 4, 6.0) == \
        "[simulate: replay] 5,000,000/10,000,000 rows (2/4 tasks), 6 s, ETA 6 s"
    assert format_line("split", None, 0, 4, 1.0) == "[split] (0/4 tasks), 1 s, ETA unknown"
    assert format_line("split", None, 0, 0, 2.0) == "[split] starting, 2 s"


def test_over_quota_shares_sum_to_the_union_of_throttle_intervals():
    from kquota.pipeline.broker import over_quota_shares

    rng = np.random.default_rng(5)
    for model_sorted in (True, False):
        n = 400
        sent = rng.integers(0, 2000, n)
        if model_sorted:
            sent = np.sort(sent)
        throttle = np.where(rng.random(n) < 0.6, rng.integers(1, 120, n), 0).astype(np.int32)
        sensor = rng.integers(0, 4, n)
        share = over_quota_shares(sent.astype(np.int64), throttle, sensor)
        assert (share >= 0).all() and (share[throttle == 0] == 0).all()
        for s in range(4):
            covered = set()
            for a, d in zip(sent[sensor == s], throttle[sensor == s]):
                covered.update(range(int(a), int(a) + int(d)))
            assert share[sensor == s].sum() == len(covered)


def test_watch_reports_a_running_stage(spark):
    import re
    import time

    from kquota.pipeline.progress import Watch

    def slow(batches):
        for b in batches:
            time.sleep(2.5)  # the span under test: a stage long enough to report on
            yield b

    lines = []
    with Watch(spark, "slow", 4000, lines.append, first_s=0.5, every_s=0.5):
        # One stage of four tasks (the noop sink adds no stage of its own).
        spark.range(0, 4000, 1, 4).mapInArrow(slow, "id long").write.format("noop").mode("overwrite").save()
        # The watcher's next poll after the job reports it done.
        wait_until(lambda: lines and lines[-1].startswith("[slow] 4,000/4,000 rows (4/4 tasks)"), 10)
    assert lines, "no progress line during a 5 s stage"
    pattern = r"\[slow\] ([\d,]+/4,000 rows \(\d/4 tasks\), \d+ s, ETA (\d+ s|unknown)|starting, \d+ s)"
    assert all(re.fullmatch(pattern, s) for s in lines), lines
    assert any("/4 tasks" in s for s in lines), lines
    assert lines[-1].startswith("[slow] 4,000/4,000 rows (4/4 tasks)") and lines[-1].endswith("ETA 0 s"), lines
