"""The ``simulate`` summary without Spark aggregation: each replay task returns small per-sensor
partials (with the full histogram of throttles, so that p99 over all brokers is exact); the
driver merges them into the table Spark's ``summarize`` would have produced (same columns, types,
values and order; Spark's ``percentile`` interpolation reproduced)."""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from kquota.pipeline.broker import TYPE_NAMES, BrokerReplay

#: Spark schema (DDL) of the partial rows a replay task returns.
PARTIAL_SCHEMA = (
    "broker long, quota_type string, tag_user string, tag_client_id string, quota double, "
    "requests long, throttled long, total_value double, total_delay long, max_delay int, "
    "over_ms long, pushback_sum long, pushback_max long, hist_values array<int>, hist_counts array<long>"
)
SUMMARY_COLUMNS = (
    "quota_type", "tag_user", "tag_client_id", "quota", "brokers", "requests", "throttled_requests",
    "total_value", "total_delay_ms", "p99_delay_ms", "max_delay_ms", "time_over_quota_ms",
    "total_pushback_ms", "max_pushback_ms", "throttled_share",
)


def partials(broker: int, rep: BrokerReplay, ts: np.ndarray, values: np.ndarray) -> dict:
    """Per-sensor partial aggregates of one broker's replay, as columns (a dict of lists).

    Counting passes (``bincount``), no per-sensor loops over rows: sums of integers in float64
    are exact below 2^53. The throttle histogram is the zero count plus the throttled rows."""
    sensor = rep.sensor
    n_s = len(rep.sensor_type)
    throttle = rep.throttle.astype(np.int64)
    pushback = rep.sent - ts

    def total(weights: Any = None) -> np.ndarray:
        return np.bincount(sensor, weights=weights, minlength=n_s)

    count = total()
    thr = throttle > 0
    throttled = np.bincount(sensor[thr], minlength=n_s)
    delay = np.rint(total(throttle)).astype(np.int64)
    over = np.rint(total(rep.over_ms)).astype(np.int64)
    push = np.rint(total(pushback)).astype(np.int64)
    value = total(values)
    push_max = np.zeros(n_s, dtype=np.int64)
    pb = pushback > 0
    np.maximum.at(push_max, sensor[pb], pushback[pb])
    top = int(throttle.max()) + 1 if len(throttle) else 1
    combo, combo_n = np.unique(sensor[thr].astype(np.int64) * top + throttle[thr], return_counts=True)
    c_sensor, c_value = combo // top, combo % top
    bounds = np.searchsorted(c_sensor, np.arange(n_s + 1))
    cols: dict = {k: [] for k in (
        "broker", "quota_type", "tag_user", "tag_client_id", "quota", "requests", "throttled",
        "total_value", "total_delay", "max_delay", "over_ms", "pushback_sum", "pushback_max",
        "hist_values", "hist_counts")}
    for s in range(n_s):
        hv = c_value[bounds[s]:bounds[s + 1]].tolist()
        hc = combo_n[bounds[s]:bounds[s + 1]].tolist()
        zeros = int(count[s] - throttled[s])
        if zeros:
            hv, hc = [0] + hv, [zeros] + hc
        q = float(rep.sensor_quota[s])
        cols["broker"].append(int(broker))
        cols["quota_type"].append(TYPE_NAMES[int(rep.sensor_type[s])])
        cols["tag_user"].append(rep.sensor_user[s])
        cols["tag_client_id"].append(rep.sensor_client[s])
        cols["quota"].append(None if math.isnan(q) else q)
        cols["requests"].append(int(count[s]))
        cols["throttled"].append(int(throttled[s]))
        cols["total_value"].append(float(value[s]))
        cols["total_delay"].append(int(delay[s]))
        cols["max_delay"].append(int(hv[-1]))
        cols["over_ms"].append(int(over[s]))
        cols["pushback_sum"].append(int(push[s]))
        cols["pushback_max"].append(int(push_max[s]))
        cols["hist_values"].append(hv)
        cols["hist_counts"].append(hc)
    return cols


def spark_percentile(values: np.ndarray, counts: np.ndarray, p: float) -> float:
    """Spark's exact ``percentile`` of a histogram (``values`` ascending, their ``counts``):
    position ``(n - 1) * p``, linear interpolation between the neighbouring ranks
    (``lower + fraction * (higher - lower)``, as Spark computes it, to the last bit)."""
    total = int(counts.sum())
    position = (total - 1) * p
    lower, higher = math.floor(position), math.ceil(position)
    cum = np.cumsum(counts)
    lower_key = float(values[int(np.searchsorted(cum, lower + 1))])
    if higher == lower:
        return lower_key
    higher_key = float(values[int(np.searchsorted(cum, higher + 1))])
    if higher_key == lower_key:
        return lower_key
    return lower_key + (position - lower) * (higher_key - lower_key)


def merge(rows: Iterable[dict]) -> Any:
    """The summary table (pyarrow) from partial rows (dicts with :data:`PARTIAL_SCHEMA`'s
    fields), ordered as ``summarize`` orders it."""
    import pyarrow as pa

    groups: dict = {}
    for r in rows:
        groups.setdefault((r["quota_type"], r["tag_user"], r["tag_client_id"]), []).append(r)
    out: dict = {c: [] for c in SUMMARY_COLUMNS}
    for (qt, tu, tc), rs in groups.items():
        quotas = [r["quota"] for r in rs if r["quota"] is not None]
        requests = sum(r["requests"] for r in rs)
        throttled = sum(r["throttled"] for r in rs)
        hist: dict = {}
        for r in rs:
            for v, c in zip(r["hist_values"], r["hist_counts"]):
                hist[v] = hist.get(v, 0) + c
        hv = np.array(sorted(hist), dtype=np.int64)
        hc = np.array([hist[v] for v in hv.tolist()], dtype=np.int64)
        out["quota_type"].append(qt)
        out["tag_user"].append(tu)
        out["tag_client_id"].append(tc)
        out["quota"].append(max(quotas) if quotas else None)
        out["brokers"].append(len({r["broker"] for r in rs}))
        out["requests"].append(requests)
        out["throttled_requests"].append(throttled)
        out["total_value"].append(float(sum(r["total_value"] for r in rs)))
        out["total_delay_ms"].append(sum(r["total_delay"] for r in rs))
        out["p99_delay_ms"].append(spark_percentile(hv, hc, 0.99))
        out["max_delay_ms"].append(max(r["max_delay"] for r in rs))
        out["time_over_quota_ms"].append(sum(r["over_ms"] for r in rs))
        out["total_pushback_ms"].append(sum(r["pushback_sum"] for r in rs))
        out["max_pushback_ms"].append(max(r["pushback_max"] for r in rs))
        out["throttled_share"].append(throttled / requests)
    order = sorted(range(len(out["quota_type"])), key=lambda i: (
        -out["total_delay_ms"][i], out["quota_type"][i].encode(), out["tag_user"][i].encode(),
        out["tag_client_id"][i].encode()))
    types = {
        "quota_type": pa.string(), "tag_user": pa.string(), "tag_client_id": pa.string(),
        "quota": pa.float64(), "brokers": pa.int64(), "requests": pa.int64(),
        "throttled_requests": pa.int64(), "total_value": pa.float64(), "total_delay_ms": pa.int64(),
        "p99_delay_ms": pa.float64(), "max_delay_ms": pa.int32(), "time_over_quota_ms": pa.int64(),
        "total_pushback_ms": pa.int64(), "max_pushback_ms": pa.int64(), "throttled_share": pa.float64(),
    }
    return pa.table({c: pa.array([out[c][i] for i in order], type=types[c]) for c in SUMMARY_COLUMNS})


def partial_arrow_schema() -> Any:
    """:data:`PARTIAL_SCHEMA` as a pyarrow schema."""
    import pyarrow as pa

    return pa.schema([
        ("broker", pa.int64()), ("quota_type", pa.string()), ("tag_user", pa.string()),
        ("tag_client_id", pa.string()), ("quota", pa.float64()), ("requests", pa.int64()),
        ("throttled", pa.int64()), ("total_value", pa.float64()), ("total_delay", pa.int64()),
        ("max_delay", pa.int32()), ("over_ms", pa.int64()), ("pushback_sum", pa.int64()),
        ("pushback_max", pa.int64()), ("hist_values", pa.list_(pa.int32())),
        ("hist_counts", pa.list_(pa.int64())),
    ])
