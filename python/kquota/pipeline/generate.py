"""``kquota pipeline generate``: synthetic request logs of any size, seeded and reproducible.

Every column is a pure function of the row number and the seed (64-bit hashes, no ``rand()``),
so the same arguments give the same log whatever the partitioning or the cluster. The traffic
is shaped like a real cluster's: users follow a steep power law (a few users send most bytes),
each user spreads its requests over a few clients (the first one busiest) and ``""`` client-ids
appear, requests land on all brokers, sizes are log-normal, and each user has bursts: 10-second
windows in which its requests are ten times larger.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from kquota.request_log_schema import COLUMNS

#: Share of each quota type in the generated traffic.
TYPE_MIX = (("PRODUCE", 0.55), ("FETCH", 0.40), ("REQUEST", 0.05))
WRITERS = {"parquet": "parquet", "csv": "csv", "json": "json"}


def generate_frame(
    spark: Any,
    rows: int,
    seed: int = 0,
    brokers: int = 4,
    users: int = 50,
    clients_per_user: int = 3,
    duration_s: int = 600,
    start_ms: int = 1_700_000_000_000,
    partitions: Optional[int] = None,
) -> Any:
    """The synthetic log as a Spark DataFrame (columns of ``docs/pipeline.md``)."""
    from pyspark.sql import functions as F

    for name, v, lo in (("rows", rows, 1), ("brokers", brokers, 1), ("users", users, 1),
                        ("clients_per_user", clients_per_user, 1), ("duration_s", duration_s, 1)):
        if not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    from kquota.pipeline.session import parallelism

    parts = partitions or max(1, min(parallelism(spark) * 2, rows // 250_000 + 1))
    span = 2**53

    def uniform(k: int) -> Any:
        # A uniform [0, 1) from a 64-bit hash of (seed, row, k).
        h = F.xxhash64(F.lit(seed), F.col("id"), F.lit(k))
        return (F.pmod(h, F.lit(span)).cast("double") / float(span))

    def hashed(k: int, *cols: Any) -> Any:
        return F.pmod(F.xxhash64(F.lit(seed), F.lit(k), *cols), F.lit(span)).cast("double") / float(span)

    df = spark.range(0, rows, numPartitions=parts)
    user_ix = F.least(F.floor(F.pow(uniform(1), F.lit(3.0)) * users), F.lit(users - 1))
    user_digits = user_ix.cast("string")
    client_ix = F.least(F.floor(F.pow(uniform(2), F.lit(2.0)) * clients_per_user), F.lit(clients_per_user - 1))
    df = df.select(
        "id",
        # "user-%03d" without Java's formatter (the hot spot of this job): pad to three digits.
        F.concat(F.lit("user-"), F.lpad(user_digits, F.greatest(F.length(user_digits), F.lit(3)), "0")).alias("user"),
        client_ix.alias("client_ix"),
        (uniform(3) < 0.08).alias("anonymous_client"),
        F.floor(uniform(4) * brokers).cast("int").alias("broker"),
        uniform(5).alias("type_u"),
        (F.lit(start_ms) + F.floor(F.col("id") * (duration_s * 1000.0 / rows))
         + F.floor(uniform(6) * 40)).cast("long").alias("ts_ms"),
        # Box-Muller normal for log-normal sizes.
        (F.sqrt(-2.0 * F.log(1.0 - uniform(7))) * F.cos(2 * math.pi * uniform(8))).alias("z"),
    )
    quota_type = F.when(F.col("type_u") < TYPE_MIX[0][1], F.lit("PRODUCE")) \
        .when(F.col("type_u") < TYPE_MIX[0][1] + TYPE_MIX[1][1], F.lit("FETCH")).otherwise(F.lit("REQUEST"))
    window = F.floor((F.col("ts_ms") - start_ms) / 10_000)
    burst = hashed(9, F.col("user"), window) < 0.04
    size = F.exp(F.lit(math.log(6_000.0)) + 1.1 * F.col("z"))
    nanos = F.exp(F.lit(math.log(150_000.0)) + 0.8 * F.col("z"))
    value = F.when(quota_type == "REQUEST", nanos).otherwise(size) * F.when(burst, 10.0).otherwise(1.0)
    columns = {
        "ts_ms": F.col("ts_ms"),
        "broker": F.col("broker"),
        "user": F.col("user"),
        "client_id": F.when(F.col("anonymous_client"), F.lit(""))
        .otherwise(F.concat(F.col("user"), F.lit("-app-"), F.col("client_ix").cast("string"))),
        "quota_type": quota_type,
        "value": F.floor(value + 1).cast("double"),
    }
    return df.select(*(columns[c].alias(c) for c in COLUMNS))  # the log's column order


def generate(spark: Any, rows: int, out: str, fmt: str = "parquet", **kwargs: Any) -> str:
    """Writes a synthetic log of ``rows`` requests to ``out`` (a directory) and returns it."""
    if fmt not in WRITERS:
        raise ValueError(f"format must be parquet, csv or json, not {fmt!r}")
    df = generate_frame(spark, rows, **kwargs)
    writer = df.write.mode("overwrite")
    if fmt == "parquet":
        # Near-unique columns: dictionary attempts on them are wasted work.
        writer = writer.option("parquet.enable.dictionary#ts_ms", "false") \
            .option("parquet.enable.dictionary#value", "false")
    if fmt == "csv":
        writer = writer.option("header", True)
    getattr(writer, WRITERS[fmt])(out)
    return out
