"""`kquota demo`: the whole traffic pipeline on a synthetic sample, on an embedded Spark.

generate -> usage -> recommend (per-user quotas from the busy-but-normal seconds) -> simulate
(what those quotas would have done to the same traffic, through the kernel) -> report. Prints
each stage with its time, a summary table and the path of the HTML report.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Optional, TextIO

from kquota.pipeline.session import DEFAULT_MASTER


def run_demo(
    rows: int = 200_000,
    out_dir: Optional[str] = None,
    master: str = DEFAULT_MASTER,
    seed: int = 0,
    percentile: float = 95.0,
    headroom: float = 1.2,
    out: Optional[TextIO] = None,
) -> dict[str, object]:
    """Runs the demo; returns the output paths and the simulation summary (pandas)."""
    from kquota.pipeline.commands import spark_errors

    with spark_errors():
        return _run(rows, out_dir, master, seed, percentile, headroom, out)


def _run(rows: int, out_dir: Optional[str], master: str, seed: int, percentile: float, headroom: float,
         out: Optional[TextIO]) -> dict[str, object]:
    import pandas as pd

    from kquota.config_file import load_quota_config, quota_config_document

    from kquota.pipeline.commands import (
        Progress, make_report, print_recommendation, print_summary_table, write_recommendation_dir,
    )
    from kquota.pipeline.generate import generate
    from kquota.pipeline.recommend import recommend
    from kquota.pipeline.schema import read_requests
    from kquota.pipeline.session import get_spark
    from kquota.pipeline.simulate import simulate
    from kquota.pipeline.usage import usage

    out = out if out is not None else sys.stdout
    out_dir = out_dir or tempfile.mkdtemp(prefix="kquota-demo-")
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, k) for k in ("requests", "usage", "recommendation", "simulation")}
    paths["report"] = os.path.join(out_dir, "report.html")
    progress = Progress(out)
    print(f"kquota demo: {rows:,} synthetic requests on Spark {master}, output in {out_dir}", file=out)
    spark = progress.stage("spark", lambda: get_spark(master), lambda s: f"Spark {s.version}")
    progress.stage("generate", lambda: generate(spark, rows, paths["requests"], seed=seed),
                   lambda p: f"{rows:,} requests, 4 brokers, 50 users")
    log = read_requests(spark, paths["requests"])
    progress.stage("usage", lambda: usage(spark, log.requests, paths["usage"]),
                   lambda p: "per entity and second, at the user, client-id and user/client levels")
    per_sec = spark.read.parquet(os.path.join(paths["usage"], "per_second"))
    rec = progress.stage("recommend", lambda: recommend(per_sec, "user", percentile, headroom),
                         lambda r: f"{len(r.entries)} user quotas (p{percentile:g} of per-second rates x {headroom:g})")
    rec_paths = write_recommendation_dir(rec, paths["recommendation"])
    doc = quota_config_document(load_quota_config(rec_paths["quotas"]))
    result = progress.stage("simulate", lambda: simulate(spark, log, doc, paths["simulation"]),
                            lambda r: "recommended quotas replayed through the kernel, per broker")
    progress.stage("report", lambda: make_report(
        spark, paths["usage"], paths["simulation"], paths["recommendation"], paths["report"], "user",
        notes=(f"Synthetic sample of {rows:,} requests; quotas recommended at p{percentile:g} x {headroom:g} "
               "per user and replayed over the same traffic (open model).",)))
    summary = pd.read_parquet(result.summary_path)
    print_recommendation(rec, out, top=8)
    print("\nWhat these quotas would have done (busiest sensors first):", file=out)
    print_summary_table(summary, 10, out)
    throttled = int(summary["throttled_requests"].sum())
    print(f"\n{throttled:,} of {int(summary['requests'].sum()):,} requests throttled; "
          f"total {progress.elapsed():.1f} s", file=out)
    print(f"quota configuration: {rec_paths['quotas']}", file=out)
    print(f"report: {os.path.abspath(paths['report'])}", file=out)
    return {"paths": paths, "summary": summary, "recommendation": rec}
