"""``kquota pipeline simulate``: what a quota configuration would have done to recorded traffic.

Quotas are per broker, so the requests are grouped by broker and each group is replayed, in
``ts_ms`` order (ties in input order), through one fresh ``QuotaManager`` configured with the
file, with the batch API (:func:`kquota.pipeline.replay.replay`). In the open model the
throttles are exactly those of feeding the same requests, in the same order, to a
``QuotaManager`` per broker; the closed model lets throttled clients back off as KIP-219 clients
do (see :mod:`kquota.pipeline.replay`).

Output (``shared/spec/pipeline.md``):

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
* ``OUT/bad_rows/`` — rows of the input that could not be replayed, with their reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from kquota.pipeline.replay import MODELS, TYPE_CODES
from kquota.pipeline.schema import RequestLog

OUTPUT_SCHEMA = (
    "ts_ms long, broker long, user string, client_id string, quota_type string, value double, "
    "throttle_ms int, sent_ms long, tag_user string, tag_client_id string, quota double, over_ms long"
)
REQUEST_COLUMNS = ("ts_ms", "broker", "user", "client_id", "quota_type", "value", "throttle_ms")
_TYPE_NAMES = {code: name for name, code in TYPE_CODES.items()}


def replay_broker(pdf: Any, quotas_doc: dict, model: str) -> Any:
    """Replays one broker's requests (a pandas frame of the log's columns plus ``_row``) through a
    fresh, configured ``QuotaManager``; returns them in replay order with ``throttle_ms``,
    ``sent_ms``, the metric tags, the limit and each row's share of the time over quota."""
    import pandas as pd

    from kquota.config_file import parse_quota_config
    from kquota.manager import QuotaManager
    from kquota.pipeline.replay import replay, type_codes

    pdf = pdf.sort_values(["ts_ms", "_row"], kind="stable", ignore_index=True)
    qm = QuotaManager()
    qm.alter_client_quotas(parse_quota_config(quotas_doc, source="--quotas"))
    codes, entities = _factorize_entities(pdf["user"], pdf["client_id"])
    # Few distinct spellings of the type: map those, not every row.
    type_idx, type_names = pd.factorize(pdf["quota_type"], sort=False)
    types = type_codes(np.asarray(type_names, dtype=object))[type_idx]
    throttle, sent = replay(
        qm, pdf["ts_ms"].to_numpy(np.int64), types, codes.astype(np.int32), entities,
        pdf["value"].to_numpy(np.float64), model=model, return_sent=True,
    )
    # Metric tags and limit of each (entity, quota type) present.
    key = codes.astype(np.int64) * 4 + types
    ukeys, inverse = np.unique(key, return_inverse=True)
    tag_user, tag_client, limit = [], [], []
    for k in ukeys:
        u, c = entities[int(k) // 4]
        t = _TYPE_NAMES[int(k) % 4]
        tags = qm.quota_metric_tags(t, u, c)
        tag_user.append(tags["user"])
        tag_client.append(tags["client-id"])
        q = qm.quota_limit(t, u, c)
        limit.append(np.nan if q is None else q)
    out = pdf.drop(columns=["_row"])
    out["throttle_ms"] = throttle
    out["sent_ms"] = sent
    out["tag_user"] = np.asarray(tag_user, dtype=object)[inverse]
    out["tag_client_id"] = np.asarray(tag_client, dtype=object)[inverse]
    out["quota"] = np.asarray(limit, dtype=np.float64)[inverse]
    # One id per sensor (quota type, metric tags): computed on the few (entity, type) keys.
    sensor_of_key = pd.MultiIndex.from_arrays(
        [ukeys % 4, np.asarray(tag_user, dtype=object), np.asarray(tag_client, dtype=object)]
    ).factorize()[0]
    out["over_ms"] = _over_quota_shares(out, sensor_of_key[inverse])
    return out


def _factorize_entities(users: Any, clients: Any) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Dense ids of the (user, client_id) pairs, in order of first appearance, and the pairs.

    Factorizes each column alone (hashing strings once each) and then the integer pair keys: far
    cheaper than factorizing tuples."""
    import pandas as pd

    u_codes, u_uniques = pd.factorize(users, sort=False)
    c_codes, c_uniques = pd.factorize(clients, sort=False)
    n_c = max(len(c_uniques), 1)
    pair = u_codes.astype(np.int64) * n_c + c_codes
    codes, pair_uniques = pd.factorize(pair, sort=False)
    entities = [(str(u_uniques[k // n_c]), str(c_uniques[k % n_c])) for k in pair_uniques.tolist()]
    return codes.astype(np.int32), entities


def _over_quota_shares(out: Any, sensor: np.ndarray) -> np.ndarray:
    """Each row's contribution to the union of its sensor's throttle intervals, so that the sum
    over a sensor's rows is the time the sensor was over quota (``sensor``: each row's sensor id)."""
    import pandas as pd

    start = out["sent_ms"].to_numpy(np.int64)
    end = start + out["throttle_ms"].to_numpy(np.int64)
    order = np.lexsort((start, sensor))
    s_sensor, s_start, s_end = sensor[order], start[order], end[order]
    frame = pd.DataFrame({"sensor": s_sensor, "end": s_end})
    prev_end = frame.groupby("sensor")["end"].cummax().groupby(frame["sensor"]).shift(1)
    prev = prev_end.to_numpy(dtype=np.float64, na_value=-np.inf)
    share = np.clip(s_end - np.maximum(s_start, prev), 0, None).astype(np.int64)
    result = np.empty_like(share)
    result[order] = share
    return result


@dataclass
class SimulateResult:
    """Paths written and counts."""

    requests_path: str
    summary_path: str
    bad_rows_path: str
    bad_counts: dict[str, int]
    model: str


def simulate(
    spark: Any,
    log: RequestLog,
    quotas_doc: dict,
    out_dir: str,
    model: str = "open",
    progress: Optional[Callable[[str], None]] = None,
) -> SimulateResult:
    """Replays ``log`` against the configuration ``quotas_doc`` and writes ``out_dir``."""
    from pyspark import StorageLevel

    if model not in MODELS:
        raise ValueError(f"model must be 'open' or 'closed', not {model!r}")

    def per_broker(pdf: Any) -> Any:
        return replay_broker(pdf, quotas_doc, model)

    replayed = log.requests.groupBy("broker").applyInPandas(per_broker, schema=OUTPUT_SCHEMA)
    replayed = replayed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        requests_path = os.path.join(out_dir, "requests")
        replayed.select(*REQUEST_COLUMNS).write.mode("overwrite").parquet(requests_path)
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
