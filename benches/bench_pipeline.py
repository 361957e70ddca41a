"""Pipeline benchmarks (run with a release build; results in benches/results/pipeline.{md,json}).

1. Kernel batch replay throughput, one thread: ``kquota.pipeline.replay`` over numpy arrays
   (target >= 5M requests/s per core), open and closed model.
2. ``generate`` + ``simulate`` of 10M requests on ``local[2]`` (target <= 30 s), the Spark floor
   over the same log (simulate / floor target <= 2x) and, with several ``--spark-rows``, the scale curve.

Usage: ``python benches/bench_pipeline.py [--replay-rows N] [--spark-rows N] [--no-write]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np

import kquota
from kquota._kquota import __build_profile__
from kquota.pipeline.replay import replay

HERE = os.path.dirname(os.path.abspath(__file__))
QUOTAS = [
    ({"user": None}, {"producer_byte_rate": 400_000, "consumer_byte_rate": 800_000, "request_percentage": 5}),
    ({"user": "user-000"}, {"producer_byte_rate": 2_000_000}),
]


def bench_replay(rows: int, entities: int = 1000, repeats: int = 3) -> dict:
    rng = np.random.default_rng(0)
    ts = np.sort(rng.integers(0, 600_000, rows)).astype(np.int64)
    types = rng.choice(np.array([0, 1], np.int8), rows)
    ids = rng.integers(0, entities, rows).astype(np.int32)
    values = rng.integers(100, 20_000, rows).astype(np.float64)
    names = [(f"user-{i % 200:03d}", f"client-{i}") for i in range(entities)]
    out = {}
    for model in ("open", "closed"):
        best = float("inf")
        throttled = 0
        for _ in range(repeats):
            qm = kquota.QuotaManager()
            qm.alter_client_quotas(QUOTAS)
            t = time.perf_counter()
            th = replay(qm, ts, types, ids, names, values, model=model)
            best = min(best, time.perf_counter() - t)
            throttled = int((th > 0).sum())
        out[model] = {"rows": rows, "entities": entities, "seconds": best,
                      "requests_per_s": rows / best, "throttled": throttled}
    return out


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _python_worker_peak_rss_mb() -> float:
    """Largest peak RSS (VmHWM) of this machine's PySpark Python workers, in MB."""
    peak = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b"pyspark.daemon" not in cmd and b"pyspark.worker" not in cmd:
                continue
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            continue
    return peak / 1024


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system, with reaped children) of ``root`` and its descendants: the
    JVM, the Python daemon and its workers. A load-independent measure next to wall time."""
    parent, cpu = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(pid)] = int(fields[1])
        cpu[int(pid)] = sum(int(x) for x in fields[11:15]) / tick

    def under(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parent.get(pid, 1)
        return False

    return sum(c for pid, c in cpu.items() if under(pid))


def _cpu(spark: object) -> float:
    t = os.times()
    return t.user + t.system + _tree_cpu_s(spark.sparkContext._gateway.proc.pid)  # type: ignore[attr-defined]


def bench_spark(rows: int, master: str = "local[2]", path: str = "direct", compare: bool = False) -> dict:
    """generate + simulate of ``rows`` requests, and the Spark floor over the same log: read it,
    group by broker (a shuffle on broker), write the same rows plus an int column. With
    ``compare``, also the Spark path (the plan before the Arrow-direct path) on the same log, and
    a check that both paths wrote the same summary and throttles."""
    from pyspark.sql import functions as F

    from kquota.config_file import quota_config_document
    from kquota.pipeline.generate import generate
    from kquota.pipeline.schema import read_requests
    from kquota.pipeline.session import get_spark
    from kquota.pipeline.simulate import simulate, simulate_spark

    work = tempfile.mkdtemp(prefix="kquota-bench-")
    try:
        load_before = _load()
        t = time.perf_counter()
        spark = get_spark(master, app_name="kquota-bench")
        startup = time.perf_counter() - t
        c = _cpu(spark)
        t = time.perf_counter()
        generate(spark, rows, os.path.join(work, "log"), seed=1)
        gen = time.perf_counter() - t
        gen_cpu = _cpu(spark) - c
        c = _cpu(spark)
        t = time.perf_counter()
        log = read_requests(spark, os.path.join(work, "log"))
        run = simulate if path == "direct" else simulate_spark
        result = run(spark, log, quota_config_document(QUOTAS), os.path.join(work, "sim"))
        sim = time.perf_counter() - t
        sim_cpu = _cpu(spark) - c
        worker_rss = _python_worker_peak_rss_mb()
        c = _cpu(spark)
        t = time.perf_counter()
        raw = spark.read.parquet(os.path.join(work, "log"))
        raw.repartition(spark.sparkContext.defaultParallelism * 2, "broker") \
            .withColumn("throttle_ms", F.lit(0)).write.mode("overwrite").parquet(os.path.join(work, "floor"))
        floor = time.perf_counter() - t
        floor_cpu = _cpu(spark) - c
        import pandas as pd

        summary = pd.read_parquet(result.summary_path)
        extra: dict = {}
        if compare:
            c = _cpu(spark)
            t = time.perf_counter()
            other = simulate_spark(spark, read_requests(spark, os.path.join(work, "log")),
                                   quota_config_document(QUOTAS), os.path.join(work, "sim-spark"))
            extra = {"spark_path_s": time.perf_counter() - t, "spark_path_cpu_s": _cpu(spark) - c}
            pd.testing.assert_frame_equal(summary, pd.read_parquet(other.summary_path))
            a = spark.read.parquet(result.requests_path)
            b = spark.read.parquet(other.requests_path)
            extra["paths_identical"] = a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0
        spark.stop()
        return {"rows": rows, "master": master, "path": path, "spark_startup_s": startup, "generate_s": gen,
                "simulate_s": sim, "generate_plus_simulate_s": gen + sim, "floor_s": floor,
                "simulate_over_floor": sim / floor, "generate_cpu_s": gen_cpu, "simulate_cpu_s": sim_cpu,
                "floor_cpu_s": floor_cpu, "python_worker_peak_rss_mb": worker_rss,
                "load_before": load_before, "load_after": _load(), **extra,
                "requests": int(summary.requests.sum()), "throttled": int(summary.throttled_requests.sum())}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--replay-rows", type=int, default=10_000_000)
    p.add_argument("--spark-rows", default="10000000",
                   help="comma-separated sizes; the first is the headline row, all form the scale curve")
    p.add_argument("--path", choices=("direct", "spark"), default="direct",
                   help="simulate path: direct (Parquet fast path, the default) or spark (the fallback)")
    p.add_argument("--compare", action="store_true",
                   help="also time the Spark path on the first size's log and check both paths agree")
    p.add_argument("--no-write", action="store_true")
    a = p.parse_args()
    res = {"build": __build_profile__, "python": sys.version.split()[0], "machine": platform.machine(),
           "cpus": os.cpu_count(), "replay": bench_replay(a.replay_rows)}
    print(json.dumps(res["replay"], indent=1), flush=True)
    res["spark_runs"] = []
    for i, n in enumerate(int(x) for x in a.spark_rows.split(",")):
        res["spark_runs"].append(bench_spark(n, path=a.path, compare=a.compare and i == 0))
        print(json.dumps(res["spark_runs"][-1], indent=1), flush=True)
    r, s = res["replay"], res["spark_runs"][0]
    res["spark"] = s

    def met(ok: bool) -> str:
        return "met" if ok else "not met"

    md = [
        "# Pipeline benchmarks", "",
        f"Build: {res['build']}; Python {res['python']}; {res['cpus']} CPUs ({res['machine']}). "
        f"Generated by `python benches/bench_pipeline.py` (simulate path: {a.path}). Load average "
        f"(1/5/15 min) before: {s['load_before']}, after: {s['load_after']}.", "",
        "CPU-s: CPU seconds of the driver, the JVM and its Python workers during the stage (a "
        "measure the other jobs on a shared machine inflate far less than wall time).", "",
        "| measure | result | target |", "|---|---|---|",
        f"| batch replay, open model, one thread ({r['open']['rows']:,} requests, {r['open']['entities']} clients) "
        f"| {r['open']['requests_per_s'] / 1e6:.1f}M requests/s | ≥ 5M/s ({met(r['open']['requests_per_s'] >= 5e6)}) |",
        f"| batch replay, closed model, one thread | {r['closed']['requests_per_s'] / 1e6:.1f}M requests/s | — |",
        f"| `generate` {s['rows']:,} requests on {s['master']} | {s['generate_s']:.1f} s "
        f"({s['generate_cpu_s']:.0f} CPU-s) | — |",
        f"| `simulate` {s['rows']:,} requests on {s['master']} (read, replay per broker, write requests + summary) "
        f"| {s['simulate_s']:.1f} s ({s['simulate_cpu_s']:.0f} CPU-s) | — |",
        f"| `generate` + `simulate` | {s['generate_plus_simulate_s']:.1f} s | ≤ 30 s "
        f"({met(s['generate_plus_simulate_s'] <= 30)}) |",
        f"| Spark floor, same run (read the log, group by broker, write the rows + an int column) "
        f"| {s['floor_s']:.1f} s ({s['floor_cpu_s']:.0f} CPU-s) | — |",
        f"| `simulate` / Spark floor | {s['simulate_over_floor']:.2f}× | ≤ 2× ({met(s['simulate_over_floor'] <= 2)}) |",
        *([f"| the Spark path (the plan before this one: `applyInPandas`, persist, Spark summary) on the same log "
           f"| {s['spark_path_s']:.1f} s ({s['spark_path_cpu_s']:.0f} CPU-s); same summary and rows: "
           f"{'yes' if s['paths_identical'] else 'NO'} | — |"] if "spark_path_s" in s else []),
        f"| peak RSS of one Python worker during `simulate` | {s['python_worker_peak_rss_mb']:.0f} MB | — |",
        f"| Spark session start (not included above) | {s['spark_startup_s']:.1f} s | — |",
        "",
    ]
    if len(res["spark_runs"]) > 1:
        md += ["## Scale curve (same run)", "",
               "| requests | generate | simulate | ns per request (simulate) | simulate CPU-s | floor | simulate / floor "
               "| worker peak RSS |", "|---|---|---|---|---|---|---|---|"]
        for x in res["spark_runs"]:
            md.append(f"| {x['rows']:,} | {x['generate_s']:.1f} s | {x['simulate_s']:.1f} s | "
                      f"{x['simulate_s'] / x['rows'] * 1e9:.0f} | {x['simulate_cpu_s']:.0f} | {x['floor_s']:.1f} s | "
                      f"{x['simulate_over_floor']:.2f}× | {x['python_worker_peak_rss_mb']:.0f} MB |")
        md.append("")
    if not a.no_write:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "pipeline.json"), "w") as f:
            json.dump(res, f, indent=2)
        with open(os.path.join(HERE, "results", "pipeline.md"), "w") as f:
            f.write("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
