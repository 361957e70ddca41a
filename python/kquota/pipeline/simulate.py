"""``kquota pipeline simulate``: what a quota configuration would have done to recorded traffic.

Quotas are per broker, so the requests are grouped by broker and each group is replayed, in
``ts_ms`` order (ties in input order), through one fresh ``QuotaManager`` configured with the
file, with the batch API (:func:`kquota.pipeline.replay.replay`). In the open model the
throttles are exactly those of feeding the same requests, in the same order, to a
``QuotaManager`` per broker; the closed model lets throttled clients back off as KIP-219 clients
do (see :mod:`kquota.pipeline.replay`).

Output (``docs/pipeline.md``):

* ``OUT/requests/`` — the input columns plus ``throttle_ms`` (int);
* ``OUT/summary/`` — one row per quota type and metric-tag set (the sensor the requests were
  recorded under; one such sensor on each broker): ``quota_type``, ``tag_user``,
  ``tag_client_id``, ``quota`` (the limit, null when unlimited), ``brokers``, ``requests``,
  ``throttled_requests``, ``throttled_share``, ``total_value``, ``total_delay_ms``,
  ``p99_delay_ms``, ``max_delay_ms`` (delay = the throttle a request earned, i.e. how long the
  client had to wait), ``time_over_quota_ms`` (summed over brokers: the length of the union of
  the intervals ``[sent, sent + throttle)`` of the sensor's throttled requests),
  ``total_pushback_ms`` and ``max_pushback_ms`` (closed model: how far throttles pushed
  requests back from their recorded time; 0 in the open model);
* ``OUT/bad_rows/`` — rows of the input that could not be replayed, with their reason;
* ``OUT/topics/`` — with ``topics/<t>`` entries in the configuration (a replay with topic
  quotas, :mod:`kquota.pipeline.topics`), per topic and type: ``quota``, ``requests``,
  ``total_bytes``, ``throttled_requests``, ``total_delay_ms``, ``orphan_rows``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from kquota.pipeline.replay import MODELS
from kquota.pipeline.schema import RequestLogReader
from kquota.pipeline.topics import has_topic_quotas
from kquota.request_log_schema import COLUMNS, OBSERVED_COLUMNS, SIMULATED_COLUMNS, TOPIC

OUTPUT_SCHEMA = (
    "ts_ms long, broker long, user string, client_id string, quota_type string, value double, "
    "throttle_ms int, sent_ms long, tag_user string, tag_client_id string, quota double, over_ms long"
)


def replay_broker(pdf: Any, quotas_doc: dict, model: str) -> Any:
    """Spark path: replays one broker's requests (a pandas frame of the log's columns plus
    ``_file`` and ``_row``) in input order (:mod:`kquota.pipeline.schema`); returns them in
    replay order with ``throttle_ms``, ``sent_ms``, the metric tags, the limit and each row's
    share of the time over quota."""
    import pandas as pd

    from kquota.pipeline.broker import entity_list, factorize_pairs, replay_sorted
    from kquota.pipeline.replay import type_codes

    pdf = pdf.sort_values(["ts_ms", "_file", "_row"], kind="stable", ignore_index=True)
    u_codes, u_uniques = pd.factorize(pdf["user"], sort=False)
    c_codes, c_uniques = pd.factorize(pdf["client_id"], sort=False)
    codes, pair_keys = factorize_pairs(u_codes, len(u_uniques), c_codes, len(c_uniques))
    entities = entity_list(pair_keys, u_uniques, c_uniques)
    # Few distinct spellings of the type: map those, not every row.
    type_idx, type_names = pd.factorize(pdf["quota_type"], sort=False)
    types = type_codes(np.asarray(type_names, dtype=object))[type_idx]
    ts = pdf["ts_ms"].to_numpy(np.int64)
    rep = replay_sorted(quotas_doc, model, ts, types, codes, entities, pdf["value"].to_numpy(np.float64))
    out = pdf.drop(columns=["_file", "_row"])
    out["throttle_ms"] = rep.throttle
    out["sent_ms"] = rep.sent
    out["tag_user"] = np.asarray(rep.sensor_user, dtype=object)[rep.sensor]
    out["tag_client_id"] = np.asarray(rep.sensor_client, dtype=object)[rep.sensor]
    out["quota"] = rep.sensor_quota[rep.sensor]
    out["over_ms"] = rep.over_ms
    return out


@dataclass
class SimulateResult:
    """Paths written and counts."""

    requests_path: str
    summary_path: str
    bad_rows_path: str
    bad_counts: dict[str, int]
    model: str
    topics_path: Optional[str] = None


def simulate(
    spark: Any,
    log: RequestLogReader,
    quotas_doc: dict,
    out_dir: str,
    model: str = "open",
    progress: Optional[Callable[[str], None]] = None,
) -> SimulateResult:
    """Replays ``log`` against the configuration ``quotas_doc`` and writes ``out_dir``.

    Parquet logs take the Arrow-direct path (:mod:`kquota.pipeline.direct`); CSV, JSON and logs
    with nulls or bad rows take the Spark path. Both give the same output. ``progress`` receives
    progress lines of long stages."""
    from kquota.pipeline import direct

    if model not in MODELS:
        raise ValueError(f"model must be 'open' or 'closed', not {model!r}")
    if has_topic_quotas(quotas_doc):
        return simulate_topics(spark, log, quotas_doc, out_dir, model, progress)
    p = direct.plan(log, out_dir)
    if p is not None:
        bad_columns = [c for c in COLUMNS + (TOPIC,) + OBSERVED_COLUMNS if c in log.raw.columns]
        done = direct.run(spark, p, quotas_doc, model, bad_columns, progress)
        if done is not None:
            return SimulateResult(done["requests"], done["summary"], done["bad_rows"], {}, model)
        if progress:
            progress("input has nulls or bad rows: taking the Spark path")
    return simulate_spark(spark, log, quotas_doc, out_dir, model, progress)


def simulate_spark(
    spark: Any,
    log: RequestLogReader,
    quotas_doc: dict,
    out_dir: str,
    model: str = "open",
    progress: Optional[Callable[[str], None]] = None,
) -> SimulateResult:
    """The Spark path of :func:`simulate` (any input format, bad rows kept with their reason)."""
    from pyspark import StorageLevel

    def per_broker(pdf: Any) -> Any:
        return replay_broker(pdf, quotas_doc, model)

    replayed = log.requests.groupBy("broker").applyInPandas(per_broker, schema=OUTPUT_SCHEMA)
    replayed = replayed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        requests_path = os.path.join(out_dir, "requests")
        replayed.select(*SIMULATED_COLUMNS).write.mode("overwrite").parquet(requests_path)
        if progress:
            progress(f"replayed requests written to {requests_path}")
        summary = summarize(replayed)
        summary_path = os.path.join(out_dir, "summary")
        summary.coalesce(1).write.mode("overwrite").parquet(summary_path)
    finally:
        replayed.unpersist()
    bad_path = os.path.join(out_dir, "bad_rows")
    bad_counts = log.write_bad_rows(bad_path)
    return SimulateResult(requests_path, summary_path, bad_path, bad_counts, model)


def simulate_topics(
    spark: Any,
    log: RequestLogReader,
    quotas_doc: dict,
    out_dir: str,
    model: str = "open",
    progress: Optional[Callable[[str], None]] = None,
) -> SimulateResult:
    """:func:`simulate` with topic quotas: every broker's requests and topic rows in one task
    (a topic's budget is over all brokers; :mod:`kquota.pipeline.topics`)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from kquota.pipeline.topics import replay_with_topics, topic_summary

    if model != "open":
        raise ValueError("a replay with topic quotas has the open model only (requests at their recorded times)")

    def one_domain(pdf: Any) -> Any:
        import pandas as pd

        own, topic_rows = pdf[pdf[TOPIC].isna()], pdf[pdf[TOPIC].notna()]
        out, per_topic = replay_with_topics(own.drop(columns=[TOPIC, "_g"]), topic_rows.drop(columns=["_g"]),
                                            quotas_doc, model)
        per_topic = per_topic.drop(columns=["_file", "_row"]).assign(sent_ms=per_topic["ts_ms"], over_ms=0)
        return pd.concat([out.drop(columns=["_file", "_row"]).assign(**{TOPIC: None}), per_topic],
                         ignore_index=True)

    rows = log.requests.withColumn(TOPIC, F.lit(None).cast("string"))
    if log.topic_requests is not None:
        rows = rows.unionByName(log.topic_requests)
    replayed = rows.withColumn("_g", F.lit(0)).groupBy("_g").applyInPandas(
        one_domain, schema=OUTPUT_SCHEMA + f", {TOPIC} string").persist(StorageLevel.MEMORY_AND_DISK)
    try:
        own = replayed.where(F.col(TOPIC).isNull())
        requests_path = os.path.join(out_dir, "requests")
        own.select(*SIMULATED_COLUMNS).write.mode("overwrite").parquet(requests_path)
        if progress:
            progress(f"replayed requests (with topic quotas) written to {requests_path}")
        summary_path = os.path.join(out_dir, "summary")
        summarize(own).coalesce(1).write.mode("overwrite").parquet(summary_path)
        topics_path = os.path.join(out_dir, "topics")
        os.makedirs(topics_path, exist_ok=True)
        topic_summary(replayed.where(F.col(TOPIC).isNotNull()), quotas_doc).to_parquet(
            os.path.join(topics_path, "part-00000.parquet"), index=False)
    finally:
        replayed.unpersist()
    bad_path = os.path.join(out_dir, "bad_rows")
    bad_counts = log.write_bad_rows(bad_path)
    return SimulateResult(requests_path, summary_path, bad_path, bad_counts, model, topics_path)


def summarize(replayed: Any) -> Any:
    """The per quota type and metric-tag set summary of replayed requests."""
    from pyspark.sql import functions as F

    throttled = F.col("throttle_ms") > 0
    pushback = F.col("sent_ms") - F.col("ts_ms")
    return (
        replayed.groupBy("quota_type", "tag_user", "tag_client_id")
        .agg(
            F.max("quota").alias("quota"),
            F.countDistinct("broker").alias("brokers"),
            F.count(F.lit(1)).alias("requests"),
            F.sum(throttled.cast("long")).alias("throttled_requests"),
            F.sum("value").alias("total_value"),
            F.sum(F.col("throttle_ms").cast("long")).alias("total_delay_ms"),
            F.percentile(F.col("throttle_ms"), F.lit(0.99)).alias("p99_delay_ms"),
            F.max("throttle_ms").alias("max_delay_ms"),
            F.sum("over_ms").alias("time_over_quota_ms"),
            F.sum(pushback).alias("total_pushback_ms"),
            F.max(pushback).alias("max_pushback_ms"),
        )
        .withColumn("throttled_share", F.col("throttled_requests") / F.col("requests"))
        .orderBy(F.desc("total_delay_ms"), "quota_type", "tag_user", "tag_client_id")
    )
