"""`kquota demo`: the whole traffic pipeline on a synthetic sample, on an embedded Spark.

generate -> usage -> recommend (per-user quotas from the busy-but-normal seconds) -> simulate
(what those quotas would have done to the same traffic, through the kernel) -> report. Prints
each stage with its time, a summary table, the time of every stage, and what to do next. Spark's
own console lines (JVM warnings, log4j) go to ``spark.log`` in the output directory unless
``verbose``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Iterator, Optional, TextIO

from kquota.exceptions import KQuotaError
from kquota.pipeline.session import DEFAULT_MASTER


def run_demo(
    rows: int = 200_000,
    out_dir: Optional[str] = None,
    master: str = DEFAULT_MASTER,
    seed: int = 0,
    percentile: float = 95.0,
    headroom: float = 1.2,
    out: Optional[TextIO] = None,
    verbose: bool = False,
) -> dict[str, object]:
    """Runs the demo; returns the output paths, the simulation summary (pandas), the
    recommendation and the stage timings (seconds by stage name)."""
    from kquota.pipeline.commands import spark_errors

    with spark_errors(), warnings.catch_warnings():
        if not verbose:
            warnings.simplefilter("ignore")  # pyspark's own deprecation chatter
        return _run(rows, out_dir, master, seed, percentile, headroom, out, verbose)


@contextlib.contextmanager
def jvm_stderr_to(path: Optional[str]) -> Iterator[None]:
    """While the JVM starts, file descriptor 2 points at ``path`` (appended), so the JVM and
    the Python workers it forks keep writing their console lines there, not to the terminal.
    ``None``: leaves stderr alone."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


class _Stages:
    """Prints ``[stage] done in x.x s: message`` lines and keeps each stage's time."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.start = time.perf_counter()
        self.times: dict[str, float] = {}

    def run(self, name: str, fn: Callable[[], Any], done: Callable[[Any], str] = lambda r: "") -> Any:
        print(f"[{name}] ...", file=self.out, flush=True)
        t = time.perf_counter()
        result = fn()
        self.times[name] = time.perf_counter() - t
        msg = done(result)
        print(f"[{name}] done in {self.times[name]:.1f} s{': ' + msg if msg else ''}", file=self.out, flush=True)
        return result

    def line(self) -> str:
        """``spark 9.1 s, generate 3.1 s, ... total 31.6 s``."""
        parts = [f"{name} {t:.1f} s" for name, t in self.times.items()]
        return ", ".join(parts) + f"; total {time.perf_counter() - self.start:.1f} s"


def _run(rows: int, out_dir: Optional[str], master: str, seed: int, percentile: float, headroom: float,
         out: Optional[TextIO], verbose: bool) -> dict[str, object]:
    import pandas as pd

    from kquota.config_file import load_quota_config, quota_config_document
    from kquota.pipeline.commands import make_report, print_recommendation, write_recommendation_dir
    from kquota.pipeline.generate import generate
    from kquota.pipeline.recommend import recommend
    from kquota.pipeline.schema import read_requests
    from kquota.pipeline.session import get_spark
    from kquota.pipeline.simulate import simulate
    from kquota.pipeline.tables import summary_lines
    from kquota.pipeline.usage import usage

    out = out if out is not None else sys.stdout
    out_dir = os.path.abspath(out_dir or tempfile.mkdtemp(prefix="kquota-demo-"))
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, k) for k in ("requests", "usage", "recommendation", "simulation")}
    paths["report"] = os.path.join(out_dir, "report.html")
    paths["spark_log"] = os.path.join(out_dir, "spark.log")
    stages = _Stages(out)
    print(f"kquota demo: {rows:,} synthetic requests on Spark {master}, output in {out_dir}", file=out)

    def start_spark() -> Any:
        try:
            with jvm_stderr_to(None if verbose else paths["spark_log"]):
                spark = get_spark(master)
        except Exception as e:
            raise KQuotaError(f"Spark did not start ({str(e).strip().splitlines()[0]}){log_tail(paths['spark_log'])}"
                              ) from None
        if verbose:
            spark.sparkContext.setLogLevel("WARN")
        return spark

    spark = stages.run("spark", start_spark, lambda s: f"Spark {s.version}")
    stages.run("generate", lambda: generate(spark, rows, paths["requests"], seed=seed),
               lambda p: f"{rows:,} requests, 4 brokers, 50 users")
    log = read_requests(spark, paths["requests"])
    stages.run("usage", lambda: usage(spark, log.requests, paths["usage"]),
               lambda p: "per entity and second, at the user, client-id and user/client levels")
    per_sec = spark.read.parquet(os.path.join(paths["usage"], "per_second"))
    rec = stages.run("recommend", lambda: recommend(per_sec, "user", percentile, headroom),
                     lambda r: f"{len(r.entries)} user quotas (p{percentile:g} of per-second rates x {headroom:g})")
    rec_paths = write_recommendation_dir(rec, paths["recommendation"])
    doc = quota_config_document(load_quota_config(rec_paths["quotas"]))
    result = stages.run("simulate", lambda: simulate(spark, log, doc, paths["simulation"]),
                        lambda r: "recommended quotas replayed through the kernel, per broker")
    stages.run("report", lambda: make_report(
        spark, paths["usage"], paths["simulation"], paths["recommendation"], paths["report"], "user",
        notes=(f"Synthetic sample of {rows:,} requests; quotas recommended at p{percentile:g} x {headroom:g} "
               "per user and replayed over the same traffic (open model).",)))
    summary = pd.read_parquet(result.summary_path)
    print_recommendation(rec, out, top=8)
    print("\nWhat these quotas would have done, " + "\n".join(summary_lines(summary, 10)), file=out)
    throttled = int(summary["throttled_requests"].sum())
    print(f"\n{throttled:,} of {int(summary['requests'].sum()):,} requests throttled.", file=out)
    print(f"Timings: {stages.line()}", file=out)
    print(next_steps(paths, rec_paths["quotas"], verbose), file=out)
    return {"paths": paths, "summary": summary, "recommendation": rec, "timings": dict(stages.times)}


def log_tail(path: str) -> str:
    """``; spark.log says: <its first error line, else its last line>`` (empty if no log)."""
    import re

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if re.search(r"error|exception|no such file|not found", line, re.I)]
    return f"; {path} says: {(errors or lines)[0] if errors else lines[-1]}" if lines else ""


def next_steps(paths: dict[str, str], quotas_path: str, verbose: bool) -> str:
    """What to do after the demo: open the report, run the same on real logs, apply quotas."""
    from pathlib import Path

    lines = [
        "",
        "Next steps",
        f"  Open the report:  {Path(paths['report']).as_uri()}",
        "  (tables in full beside it: report-simulation.csv, report-recommendation.csv, report-usage.csv)",
        "  Run the same on your own request logs (Parquet, CSV or JSON lines with columns",
        "  ts_ms, broker, user, client_id, quota_type, value):",
        "    kquota pipeline usage     --input LOGS --out usage/",
        "    kquota pipeline recommend --usage usage/ --out rec/ --percentile 99 --headroom 1.2",
        "    kquota pipeline simulate  --input LOGS --quotas rec/quotas.json --out sim/",
        "    kquota pipeline report    --usage usage/ --simulation sim/ --recommendation rec/ --out report.html",
        "  Apply the recommended quotas to a configuration store:",
        f"    kquota configs --alter --quota-file {quotas_path}",
        "  Every command explains its options: kquota pipeline simulate -h",
    ]
    if not verbose:
        lines.append(f"  Spark's own log lines went to {paths['spark_log']} (--verbose shows them).")
    return "\n".join(lines)
