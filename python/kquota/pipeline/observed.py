"""What the proxy observed, per entity: the enforced throttle against the shadow's would-be one.

A ``kquota proxy`` request log carries, besides the requests, what the proxy saw
(:data:`kquota.request_log_schema.OBSERVED_COLUMNS`): the throttle each response carried
(``throttle_time_ms``) and, with ``--shadow-store``, the shadow configuration's would-be throttle
and delayed bytes. ``kquota pipeline usage`` totals them per raw entity (user, client id) and
quota type into ``OUT/observed/``, when the log has them; ``kquota pipeline report`` shows the
table as "Enforced vs shadow".

Columns of ``observed/``: ``user, client_id, quota_type, requests`` (rows of the log),
``throttle_time_ms`` (the enforced throttle, summed), ``throttled`` (rows with one > 0),
``shadow_throttle_time_ms``, ``shadow_throttled``, ``shadow_delayed_bytes`` (the same for the
shadow), ``shadow_rows`` (rows a shadow was evaluated on). A total is null when no row of the
entity observed it (no shadow configuration, or a log without that column).
"""

from __future__ import annotations

import os
from typing import Any

#: The table's columns, in order.
OBSERVED_TABLE = ("user", "client_id", "quota_type", "requests", "throttle_time_ms", "throttled",
                  "shadow_throttle_time_ms", "shadow_throttled", "shadow_delayed_bytes", "shadow_rows")


def observed_totals(observed: Any) -> Any:
    """Per raw entity and quota type, the totals of a :class:`~kquota.pipeline.schema.RequestLogReader`'s
    ``observed`` rows (Spark), columns :data:`OBSERVED_TABLE`."""
    from pyspark.sql import functions as F

    have = set(observed.columns)

    def col(name: str) -> Any:
        return F.col(name) if name in have else F.lit(None).cast("bigint")

    def positive(name: str) -> Any:
        # Null where nothing was observed, so "no shadow" stays apart from "a shadow that never throttled".
        return F.sum(F.when(col(name).isNull(), F.lit(None)).otherwise((col(name) > 0).cast("bigint")))

    return observed.groupBy("user", "client_id", "quota_type").agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum(col("throttle_time_ms")).alias("throttle_time_ms"),
        positive("throttle_time_ms").alias("throttled"),
        F.sum(col("shadow_throttle_time_ms")).alias("shadow_throttle_time_ms"),
        positive("shadow_throttle_time_ms").alias("shadow_throttled"),
        F.sum(col("shadow_delayed_bytes")).alias("shadow_delayed_bytes"),
        F.count(col("shadow_throttle_time_ms")).alias("shadow_rows"),
    ).select(*OBSERVED_TABLE)


def write_observed(observed: Any, out_dir: str) -> str:
    """Writes :func:`observed_totals` to ``out_dir/observed/`` (one Parquet file); its path."""
    path = os.path.join(out_dir, "observed")
    observed_totals(observed).coalesce(1).write.mode("overwrite").parquet(path)
    return path


def read_observed(usage_dir: str) -> Any:
    """``usage_dir/observed/`` as pandas, ``None`` when the log had no observed column."""
    import pandas as pd

    path = os.path.join(usage_dir, "observed")
    return pd.read_parquet(path) if os.path.exists(path) else None
