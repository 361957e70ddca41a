"""``kquota pipeline usage``: who uses what, at each KIP-55 level, per broker and second.

Quotas are enforced per broker over one-second samples, so the unit of usage is one entity's
total on one broker in one second. Levels: ``user-client`` (user and client-id), ``user`` and
``client-id``. Rates are bytes/s for PRODUCE and FETCH and, for REQUEST, the percentage of one
thread's time (thread-time ns per second / 10^7, as Kafka's ``request_percentage`` counts).

Tables written under ``OUT/``:

* ``per_second/`` — ``level, user, client_id, quota_type, broker, second, rate, requests``
  (``user`` is null at the client-id level, ``client_id`` at the user level);
* ``entities/`` — per level, entity and quota type: ``unit, requests, total, seconds`` (active
  broker-seconds), ``brokers, mean_rate, p50, p95, p99, max``; percentiles are over the
  broker-seconds in which the entity sent anything.
"""

from __future__ import annotations

import os
from typing import Any

LEVELS = {
    "user-client": ("user", "client_id"),
    "user": ("user",),
    "client-id": ("client_id",),
}
UNITS = {"PRODUCE": "B/s", "FETCH": "B/s", "REQUEST": "%"}
#: REQUEST values are thread-time nanoseconds; 1e9 ns in a second is 100 %.
NANOS_PER_PERCENT = 1e7


def per_second(requests: Any) -> Any:
    """Per level, entity, quota type, broker and second: the rate and the request count."""
    from pyspark.sql import functions as F

    scaled = F.when(F.col("quota_type") == "REQUEST", F.col("value") / NANOS_PER_PERCENT).otherwise(F.col("value"))
    base = (
        requests.select("user", "client_id", "quota_type", "broker",
                        F.floor(F.col("ts_ms") / 1000).cast("long").alias("second"), scaled.alias("v"))
        .groupBy("user", "client_id", "quota_type", "broker", "second")
        .agg(F.sum("v").alias("rate"), F.count(F.lit(1)).alias("requests"))
    )
    frames = []
    for level, keys in LEVELS.items():
        agg = base.groupBy(*keys, "quota_type", "broker", "second").agg(
            F.sum("rate").alias("rate"), F.sum("requests").alias("requests"))
        frames.append(agg.select(
            F.lit(level).alias("level"),
            (F.col("user") if "user" in keys else F.lit(None).cast("string")).alias("user"),
            (F.col("client_id") if "client_id" in keys else F.lit(None).cast("string")).alias("client_id"),
            "quota_type", "broker", "second", "rate", "requests"))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def entity_stats(per_sec: Any) -> Any:
    """Per level, entity and quota type: totals and the distribution of per-second rates."""
    from pyspark.sql import functions as F

    q = F.percentile_approx("rate", [0.5, 0.95, 0.99], 10_000)
    units = F.create_map(*[x for k, u in UNITS.items() for x in (F.lit(k), F.lit(u))])
    return (
        per_sec.groupBy("level", "user", "client_id", "quota_type")
        .agg(
            F.sum("requests").alias("requests"),
            F.sum("rate").alias("total"),
            F.count(F.lit(1)).alias("seconds"),
            F.countDistinct("broker").alias("brokers"),
            F.avg("rate").alias("mean_rate"),
            q.alias("_q"),
            F.max("rate").alias("max"),
        )
        .select("level", "user", "client_id", "quota_type", units[F.col("quota_type")].alias("unit"),
                "requests", "total", "seconds", "brokers", "mean_rate",
                F.col("_q")[0].alias("p50"), F.col("_q")[1].alias("p95"), F.col("_q")[2].alias("p99"), "max")
    )


def usage(spark: Any, requests: Any, out_dir: str) -> dict[str, str]:
    """Writes ``per_second/`` and ``entities/`` under ``out_dir``; returns their paths."""
    from pyspark import StorageLevel

    per_sec = per_second(requests).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        paths = {"per_second": os.path.join(out_dir, "per_second"), "entities": os.path.join(out_dir, "entities")}
        per_sec.write.mode("overwrite").partitionBy("level").parquet(paths["per_second"])
        entity_stats(per_sec).coalesce(1).write.mode("overwrite").parquet(paths["entities"])
    finally:
        per_sec.unpersist()
    return paths


def read_entities(path: str) -> Any:
    """The ``entities/`` table as pandas."""
    import pandas as pd

    return pd.read_parquet(path)


def entity_label(user: Any, client_id: Any) -> str:
    """``users/alice/clients/app`` style label of a usage row (null sides left out)."""
    parts = []
    if user is not None and user == user:
        parts.append(f"users/{user}")
    if client_id is not None and client_id == client_id:
        parts.append("clients/" + (client_id or '""'))
    return "/".join(parts)
