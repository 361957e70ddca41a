"""The ``kquota pipeline ...`` subcommands: argument parsing and orchestration of the modules
(one per command) with progress lines."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from typing import Any, Callable, Iterator, Optional, TextIO

from kquota.exceptions import KQuotaError
from kquota.pipeline.session import DEFAULT_MASTER


@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """Turns an exception raised inside Spark (a Java stack or a Python worker traceback) into
    one line: the innermost Python exception's message."""
    try:
        yield
    except Exception as e:  # noqa: BLE001
        if not type(e).__module__.startswith(("pyspark", "py4j")):
            raise
        text = str(e)
        found = re.findall(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", text, re.M)
        message = found[-1][1].strip() if found else text.strip().splitlines()[0]
        raise KQuotaError(f"Spark job failed: {message}") from None


class Progress:
    """Prints ``[stage] message (x.x s)`` lines."""

    def __init__(self, out: Optional[TextIO] = None) -> None:
        self.out = out or sys.stdout
        self.start = time.perf_counter()

    def stage(self, name: str, fn: Callable[[], Any], done: Callable[[Any], str] = lambda r: "") -> Any:
        print(f"[{name}] ...", file=self.out, flush=True)
        t = time.perf_counter()
        result = fn()
        msg = done(result)
        print(f"[{name}] done in {time.perf_counter() - t:.1f} s{': ' + msg if msg else ''}", file=self.out, flush=True)
        return result

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def _spark(args: argparse.Namespace) -> Any:
    from kquota.pipeline.session import get_spark

    conf = dict(kv.split("=", 1) for kv in getattr(args, "conf", None) or [])
    return get_spark(args.master, remote=getattr(args, "remote", None), **conf)


def _emit(out: TextIO) -> Callable[[str], None]:
    """Progress lines of long stages, to the console."""
    return lambda line: print(line, file=out, flush=True)


def _bad_rows_note(counts: dict[str, int]) -> str:
    if not counts:
        return "no bad rows"
    return f"{sum(counts.values()):,} bad rows skipped (" + "; ".join(f"{n:,} {r}" for r, n in counts.items()) + ")"


def cmd_generate(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    with spark_errors():
        return _cmd_generate(args, out or sys.stdout)


def _cmd_generate(args: argparse.Namespace, out: TextIO) -> int:
    from kquota.pipeline.generate import generate
    from kquota.pipeline.progress import Watch

    spark = _spark(args)

    def run() -> str:
        with Watch(spark, "generate", args.rows, _emit(out)):
            return generate(spark, args.rows, args.out, fmt=args.format, seed=args.seed, brokers=args.brokers,
                            users=args.users, duration_s=args.duration_s)

    Progress(out).stage("generate", run, lambda p: f"{args.rows:,} requests in {p}")
    return 0


def cmd_usage(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    with spark_errors():
        return _cmd_usage(args, out or sys.stdout)


def _cmd_usage(args: argparse.Namespace, out: TextIO) -> int:
    from kquota.pipeline.schema import read_requests
    from kquota.pipeline.usage import read_entities, usage

    spark = _spark(args)
    log = read_requests(spark, args.input, args.format)
    progress = Progress(out)
    paths = progress.stage("usage", lambda: usage(spark, log.requests, args.out),
                           lambda p: f"tables in {args.out}")
    if log.observed is not None:
        from kquota.pipeline.observed import write_observed

        progress.stage("observed", lambda: write_observed(log.observed, args.out),
                       lambda p: "enforced and shadow throttles per entity in " + p)
    if log.has_topics:
        from kquota.pipeline.topics import topic_usage

        progress.stage("topic usage", lambda: topic_usage(log.topic_requests, args.out),
                       lambda p: f"tables in {os.path.join(args.out, 'topics')}")
    print(_bad_rows_note(log.write_bad_rows(os.path.join(args.out, "bad_rows"))), file=out)
    print_usage_table(read_entities(paths["entities"]), args.top, out)
    return 0


def print_usage_table(entities: Any, top: int, out: TextIO) -> None:
    from kquota.pipeline.tables import usage_lines

    print(*usage_lines(entities, top), sep="\n", file=out)


def cmd_simulate(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    with spark_errors():
        return _cmd_simulate(args, out or sys.stdout)


def _cmd_simulate(args: argparse.Namespace, out: TextIO) -> int:
    import pandas as pd

    from kquota.pipeline.quotas import load_quotas, quotas_document
    from kquota.pipeline.schema import read_requests
    from kquota.pipeline.simulate import simulate

    doc = quotas_document(load_quotas(args.quotas))
    spark = _spark(args)
    log = read_requests(spark, args.input, args.format)
    result = Progress(out).stage("simulate", lambda: simulate(spark, log, doc, args.out, model=args.model,
                                                                   progress=_emit(out)),
                                 lambda r: f"{r.model} model, output in {args.out}")
    print(_bad_rows_note(result.bad_counts), file=out)
    print_summary_table(pd.read_parquet(result.summary_path), args.top, out)
    return 0


def print_summary_table(summary: Any, top: int, out: TextIO) -> None:
    from kquota.pipeline.tables import summary_lines

    print("", *summary_lines(summary, top), sep="\n", file=out)


def cmd_recommend(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    with spark_errors():
        return _cmd_recommend(args, out or sys.stdout)


def _cmd_recommend(args: argparse.Namespace, out: TextIO) -> int:
    from kquota.pipeline.recommend import recommend
    from kquota.pipeline.schema import read_requests
    from kquota.pipeline.usage import per_second

    from kquota.pipeline.topics import recommend_topics, topic_entries, topic_per_second

    spark = _spark(args)
    topic_sec = None
    if args.usage:
        per_sec = spark.read.parquet(os.path.join(args.usage, "per_second"))
        if os.path.isdir(os.path.join(args.usage, "topics", "per_second")):
            topic_sec = spark.read.parquet(os.path.join(args.usage, "topics", "per_second"))
    else:
        log = read_requests(spark, args.input, args.format)
        per_sec = per_second(log.requests)
        topic_sec = topic_per_second(log.topic_requests) if log.has_topics else None
    rec = Progress(out).stage("recommend", lambda: recommend(per_sec, args.level, args.percentile, args.headroom),
                              lambda r: f"{len(r.entries)} entities")
    if topic_sec is not None:
        rec.topics = recommend_topics(topic_sec, args.percentile, args.headroom)
        if getattr(args, "topics", False):
            rec.entries = list(rec.entries) + topic_entries(rec.topics)
    paths = write_recommendation_dir(rec, args.out, args.bootstrap_server)
    print_recommendation(rec, out)
    print(f"quota configuration: {paths['quotas']}\nkafka-configs commands: {paths['commands']}", file=out)
    return 0


def write_recommendation_dir(rec: Any, out_dir: str, bootstrap_server: str = "localhost:9092") -> dict[str, str]:
    from kquota.pipeline.recommend import write_recommendation

    os.makedirs(out_dir, exist_ok=True)
    paths = {"quotas": os.path.join(out_dir, "quotas.json"), "commands": os.path.join(out_dir, "kafka-configs.sh"),
             "table": os.path.join(out_dir, "table.csv")}
    write_recommendation(rec, paths["quotas"], paths["commands"], bootstrap_server)
    rec.table.to_csv(paths["table"], index=False)
    if getattr(rec, "topics", None) is not None:
        paths["topics"] = os.path.join(out_dir, "topics.csv")
        rec.topics.to_csv(paths["topics"], index=False)
    return paths


def print_recommendation(rec: Any, out: TextIO, top: int = 20) -> None:
    from kquota.pipeline.tables import recommendation_lines

    print("", *recommendation_lines(rec, top), sep="\n", file=out)


def make_report(spark: Any, usage_dir: str, simulation_dir: str, recommendation_dir: str, out_path: str,
                level: str, top: int = 4, notes: tuple = ()) -> str:
    import pandas as pd

    from kquota.pipeline.observed import read_observed
    from kquota.pipeline.report import build_report, rate_series, throttle_histogram
    from kquota.pipeline.usage import read_entities

    entities = read_entities(os.path.join(usage_dir, "entities"))
    rec = pd.read_csv(os.path.join(recommendation_dir, "table.csv"), dtype={"user": object, "client_id": object},
                      keep_default_na=False, na_values={"user": [""], "client_id": [""]}) \
        if os.path.exists(os.path.join(recommendation_dir, "table.csv")) else None

    def none(v: Any) -> Any:
        return None if v is None or v != v else v

    quotas_for = {} if rec is None else {
        (none(r.user), none(r.client_id), r.quota_type): r.quota for r in rec.itertuples()}
    e = entities[(entities["level"] == level) & entities["quota_type"].isin(["PRODUCE", "FETCH"])]
    e = e.sort_values("total", ascending=False).head(top)
    chosen = [(none(r.user), none(r.client_id), r.quota_type) for r in e.itertuples()]
    per_sec = spark.read.parquet(os.path.join(usage_dir, "per_second"))
    series = rate_series(per_sec, level, chosen)
    requests = spark.read.parquet(os.path.join(simulation_dir, "requests"))
    histogram = throttle_histogram(requests)
    summary = pd.read_parquet(os.path.join(simulation_dir, "summary"))
    from kquota.pipeline.topics_report import topic_sections

    extra = topic_sections(out_path, usage_dir, simulation_dir, recommendation_dir)
    return build_report(out_path, entities, series, chosen, level, histogram, summary, rec, quotas_for,
                        notes=notes, observed=read_observed(usage_dir), extra_sections=extra)


def cmd_report(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    with spark_errors():
        return _cmd_report(args, out or sys.stdout)


def _cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    spark = _spark(args)
    path = Progress(out).stage("report", lambda: make_report(
        spark, args.usage, args.simulation, args.recommendation, args.out, args.level))
    print(f"report: {os.path.abspath(path)}", file=out)
    return 0


def _positive_int(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def add_master(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default=DEFAULT_MASTER,
                   help="Spark master URL, e.g. local[2], spark://host:7077, yarn")


def _conf(s: str) -> str:
    if "=" not in s or not s.split("=", 1)[0]:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {s!r}")
    return s


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """``--master`` plus the options for running on a cluster: ``--remote`` and ``--conf``."""
    add_master(p)
    p.add_argument("--remote", metavar="sc://HOST:PORT",
                   help="run on a Spark Connect server instead of starting Spark here (overrides --master)")
    p.add_argument("--conf", action="append", type=_conf, metavar="KEY=VALUE",
                   help="a Spark setting, repeatable (e.g. spark.archives=env.tar.gz#env, spark.executor.memory=2g)")


def add_parser(sub: Any) -> None:
    """Adds ``pipeline`` and its subcommands to the ``kquota`` parser."""
    pipe = sub.add_parser("pipeline", help="traffic analytics on Spark: generate, usage, simulate, recommend, report")
    psub = pipe.add_subparsers(dest="pipeline_command", required=True, metavar="<command>")

    def input_args(p: argparse.ArgumentParser, required: bool = True) -> None:
        p.add_argument("--input", required=required, help="request log: Parquet, CSV or JSON lines (file or directory)")
        p.add_argument("--format", choices=("parquet", "csv", "json"), help="input format (default: from the name)")

    g = psub.add_parser("generate", help="write synthetic request logs",
                        description="Write a seeded, skewed synthetic request log (a few heavy users, bursts).")
    g.add_argument("--rows", type=_positive_int, required=True, help="number of requests to write")
    g.add_argument("--out", required=True, help="output directory")
    g.add_argument("--format", choices=("parquet", "csv", "json"), default="parquet", help="output file format")
    g.add_argument("--seed", type=int, default=0, help="random seed (the same seed writes the same log)")
    g.add_argument("--brokers", type=_positive_int, default=4, help="number of brokers the requests are spread over")
    g.add_argument("--users", type=_positive_int, default=50, help="number of distinct users")
    g.add_argument("--duration-s", type=_positive_int, default=600, help="time span of the traffic, in seconds")
    add_cluster_options(g)
    g.set_defaults(func=cmd_generate)

    u = psub.add_parser("usage", help="per entity and second: rates and percentiles")
    input_args(u)
    u.add_argument("--out", required=True, help="output directory")
    u.add_argument("--top", type=_positive_int, default=10, help="rows printed per level (busiest first)")
    add_cluster_options(u)
    u.set_defaults(func=cmd_usage)

    s = psub.add_parser("simulate", help="replay a quota configuration over the logs through the kernel")
    input_args(s)
    s.add_argument("--quotas", required=True, help="quota configuration file (or config store URL)")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--model", choices=("open", "closed"), default="open",
                   help="open: requests at their recorded times; closed: throttled clients back off (KIP-219)")
    s.add_argument("--top", type=_positive_int, default=10, help="summary rows printed (most delayed first)")
    add_cluster_options(s)
    s.set_defaults(func=cmd_simulate)

    r = psub.add_parser("recommend", help="quotas from usage: percentile x headroom at a level")
    input_args(r, required=False)
    r.add_argument("--usage", help="a usage output directory (instead of --input)")
    r.add_argument("--out", required=True, help="output directory (quotas.json, kafka-configs.sh, table.csv)")
    r.add_argument("--level", choices=("user", "client-id", "user-client"), default="user",
                   help="entity level the quotas are set at")
    r.add_argument("--percentile", type=float, default=99.0,
                   help="percentile of each entity's per-second rates the quota starts from")
    r.add_argument("--headroom", type=float, default=1.2, help="factor applied to that percentile")
    r.add_argument("--topics", action="store_true",
                   help="also put the recommended topic quotas (from the log's topic rows) in quotas.json and the "
                        "script; without it they are only in topics.csv and the report")
    r.add_argument("--bootstrap-server", default="localhost:9092", help="for the kafka-configs command lines")
    add_cluster_options(r)
    r.set_defaults(func=cmd_recommend)

    rp = psub.add_parser("report", help="one self-contained HTML report")
    rp.add_argument("--usage", required=True, help="usage output directory")
    rp.add_argument("--simulation", required=True, help="simulate output directory")
    rp.add_argument("--recommendation", required=True, help="recommend output directory")
    rp.add_argument("--level", choices=("user", "client-id", "user-client"), default="user",
                    help="entity level of the usage charts and table")
    rp.add_argument("--out", required=True, help="the HTML file to write")
    add_cluster_options(rp)
    rp.set_defaults(func=cmd_report)


def check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Cross-argument checks argparse cannot express."""
    if getattr(args, "pipeline_command", None) == "recommend" and bool(args.usage) == bool(args.input):
        parser.error("recommend needs exactly one of --input and --usage")
