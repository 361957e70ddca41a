"""Reading request logs (the schema of :mod:`kquota.request_log_schema`): format detection, schema
validation and bad-row accounting.

Columns: ``ts_ms`` integer, ``broker`` integer (optional, default 0), ``user`` string,
``client_id`` string (may be empty), ``quota_type`` PRODUCE/FETCH/REQUEST (any case), ``value``
number. A missing column, or one whose type cannot hold the field, is one
:class:`RequestLogError` naming it. Text columns of numeric fields (CSV, or JSON with a stray
string) are parsed; a value that does not parse, a null, an unknown quota type, a negative or
non-finite value or a time beyond ±2^46 ms makes its row *bad*: bad rows are counted by reason,
kept with their reason (``bad_rows``) and never silently dropped.

An optional ``topic`` column splits the log: rows with a null topic are the requests
(``requests``, what client usage, recommendation and replay read); rows with a topic are topic
rows (``topic_requests``, the requests' per-topic bytes). A topic row whose topic is empty or not
a legal Kafka topic name (a 1 MB name included), or whose type is ``REQUEST``, is bad.

The proxy's observed columns (:data:`~kquota.request_log_schema.OBSERVED_COLUMNS`: the enforced
throttle, the shadow's would-be throttle and delayed bytes) are optional: a log without them
(an older one, another source's) reads as before. When present, each is null (not observed, e.g.
no shadow configuration) or a non-negative integer; anything else (negative, NaN, a fraction,
text) makes its row bad. They are kept apart from the requests, in ``observed``.

Every row gets ``_file`` (its file's path) and ``_row`` (increasing in file order: the row index
for Parquet), so that requests with equal ``ts_ms`` are applied in *input order*: files in
path-name order, rows in file order — explicit, whatever Spark's split settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from kquota.exceptions import KQuotaError
from kquota.request_log_schema import COLUMNS, MAX_ABS_TS_MS, MAX_TOPIC_LENGTH, OBSERVED_COLUMNS, QUOTA_TYPES, \
    REQUIRED, TOPIC, TOPIC_QUOTA_TYPES

FORMATS = ("parquet", "csv", "json")
_EXTENSIONS = {
    ".parquet": "parquet", ".pq": "parquet", ".csv": "csv",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
}


class RequestLogError(KQuotaError, ValueError):
    """An unreadable request log: unknown format, missing or mistyped column."""


@dataclass
class RequestLogReader:
    """A request log as :func:`read_requests` reads and validates it: ``requests`` (valid rows
    with a null topic, normalized columns plus ``_file`` and ``_row``), ``topic_requests`` (valid
    topic rows: the same plus ``topic``), ``bad_rows`` (the raw row as text plus ``reason``),
    ``source``, ``fmt``, ``raw`` (the file as read, before validation), ``has_topics`` (whether
    the log has a ``topic`` column) and ``observed``: the valid requests' ``broker``, ``user``,
    ``client_id``, ``quota_type`` and the observed columns the log has (integers, null where not
    observed), ``None`` when it has none of them."""

    requests: Any
    bad_rows: Any
    source: str
    fmt: str
    raw: Any = None
    observed: Any = None
    topic_requests: Any = None
    has_topics: bool = False
    _bad_counts: Optional[dict[str, int]] = field(default=None, repr=False)

    def bad_counts(self) -> dict[str, int]:
        """Bad rows by reason (runs a Spark job the first time)."""
        if self._bad_counts is None:
            rows = self.bad_rows.groupBy("reason").count().collect()
            self._bad_counts = {r["reason"]: int(r["count"]) for r in rows}
        return self._bad_counts

    def write_bad_rows(self, path: str) -> dict[str, int]:
        """Writes the bad rows (Parquet) to ``path`` and returns their counts by reason, read
        back from what was written (no second pass over the log)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        self.bad_rows.coalesce(1).write.mode("overwrite").parquet(path)
        reasons = pq.read_table(path, columns=["reason"]).column("reason")
        counts = pc.value_counts(reasons).to_pylist() if len(reasons) else []
        self._bad_counts = {c["values"]: int(c["counts"]) for c in counts}
        return self._bad_counts

    def bad_total(self) -> int:
        return sum(self.bad_counts().values())


def detect_format(path: str, fmt: Optional[str] = None) -> str:
    """The format given, or the one the path's extension (or a directory's files) names."""
    if fmt:
        if fmt.lower() not in FORMATS:
            raise RequestLogError(f"unknown request log format {fmt!r}; expected parquet, csv or json")
        return fmt.lower()
    if not os.path.exists(path):
        raise RequestLogError(f"request log {path!r} does not exist")
    names = [path]
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith((".", "_")))
    for name in names:
        for ext, f in _EXTENSIONS.items():
            if name.lower().endswith(ext):
                return f
    raise RequestLogError(
        f"cannot tell the format of request log {path!r} from its name; pass --format parquet|csv|json"
    )


def read_requests(spark: Any, path: str, fmt: Optional[str] = None) -> RequestLogReader:
    """Reads and validates a request log. Raises :class:`RequestLogError` for a bad schema."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fmt = detect_format(path, fmt)
    reader = spark.read
    try:
        if fmt == "csv":
            # Everything as text (parsed below, so a bad cell is a bad row); no null marker, so
            # an empty client_id stays "".
            raw = reader.option("header", True).option("inferSchema", False) \
                .option("nullValue", "\u0000").option("emptyValue", "").csv(path)
        elif fmt == "json":
            raw = reader.json(path)
        else:
            raw = reader.parquet(path)
    except Exception as e:  # noqa: BLE001 - Spark raises its own analysis errors
        raise RequestLogError(f"cannot read request log {path!r} as {fmt}: {str(e).splitlines()[0]}") from None

    fields = {f.name: f.dataType for f in raw.schema.fields}
    missing = [c for c in REQUIRED if c not in fields]
    if missing:
        raise RequestLogError(
            f"request log {path!r} has no column {missing[0]!r} "
            f"(columns: {', '.join(fields) or 'none'}; required: {', '.join(REQUIRED)})"
        )
    integral = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    numeric = integral + (T.FloatType, T.DoubleType, T.DecimalType)
    expect = {
        "ts_ms": (integral + (T.StringType,), "an integer"),
        "broker": (integral + (T.StringType,), "an integer"),
        "user": ((T.StringType,), "a string"),
        "client_id": ((T.StringType,), "a string"),
        "quota_type": ((T.StringType,), "a string"),
        "value": (numeric + (T.StringType,), "a number"),
        TOPIC: ((T.StringType,), "a string"),
    }
    for name in OBSERVED_COLUMNS:
        expect[name] = (numeric + (T.StringType,), "an integer")
    for name, (types, what) in expect.items():
        if name in fields and not isinstance(fields[name], types):
            raise RequestLogError(
                f"request log {path!r}: column {name!r} has type {fields[name].simpleString()}; expected {what}"
            )

    def integer(name: str) -> Any:
        c = F.col(name)
        if isinstance(fields[name], T.StringType):
            # try_cast: "1.5" or "x" become null (a bad row), never an exception.
            return F.expr(f"try_cast(trim(`{name}`) AS BIGINT)")
        return c.cast("bigint")

    def number(name: str) -> Any:
        if isinstance(fields[name], T.StringType):
            return F.expr(f"try_cast(trim(`{name}`) AS DOUBLE)")
        return F.col(name).cast("double")

    # Parquet knows each row's index in its file; for text, ids increase in file order (the
    # pieces of one file are packed into partitions in offset order).
    row = F.col("_metadata.row_index") if fmt == "parquet" else F.monotonically_increasing_id()
    df = raw.withColumn("_row", row).withColumn("_file", F.col("_metadata.file_path"))
    ts = integer("ts_ms")
    broker = integer("broker") if "broker" in fields else F.lit(0).cast("bigint")
    qt = F.upper(F.trim(F.col("quota_type")))
    value = number("value")
    observed = [c for c in OBSERVED_COLUMNS if c in fields]
    topic = F.col(TOPIC) if TOPIC in fields else F.lit(None).cast("string")
    if fmt == "csv" and TOPIC in fields:
        # CSV has no null: an empty cell is a request's own row.
        topic = F.when(topic != "", topic)
    legal = topic.rlike(f"^[A-Za-z0-9._-]{{1,{MAX_TOPIC_LENGTH}}}$") & ~topic.isin(".", "..")
    reason = (
        F.when(ts.isNull(), F.lit("ts_ms is missing or not an integer"))
        .when(F.abs(ts) >= MAX_ABS_TS_MS, F.lit("ts_ms is beyond ±2^46 ms"))
        .when(broker.isNull(), F.lit("broker is missing or not an integer"))
        .when(F.col("user").isNull(), F.lit("user is missing"))
        .when(qt.isNull() | ~qt.isin(*QUOTA_TYPES), F.lit("quota_type is not PRODUCE, FETCH or REQUEST"))
        .when(value.isNull() | F.isnan(value) | (value < 0) | (F.abs(value) == float("inf")),
              F.lit("value is missing, negative or not a finite number"))
        # Length first: a huge name is refused without running the pattern over it.
        .when(topic.isNotNull() & ((F.length(topic) > MAX_TOPIC_LENGTH) | ~legal),
              F.lit("topic is empty or not a legal topic name"))
        .when(topic.isNotNull() & ~qt.isin(*TOPIC_QUOTA_TYPES), F.lit("a topic row's quota_type is not PRODUCE or FETCH"))
    )
    for name in observed:
        # Null (an empty CSV cell) is "not observed"; a value must be a whole number >= 0 (NaN,
        # ±inf, -1, 1.5, "x" are not).
        v = number(name)
        present = F.col(name).isNotNull()
        if isinstance(fields[name], T.StringType):
            present = present & (F.trim(F.col(name)) != "")
        reason = reason.when(present & (v.isNull() | F.isnan(v) | (v < 0) | (v >= 2.0 ** 63) | (v != F.floor(v))),
                             F.lit(f"{name} is negative or not an integer"))
    raw_columns = [c for c in COLUMNS + (TOPIC,) if c in fields]
    checked = df.select(
        F.col("_file"),
        F.col("_row"),
        ts.alias("ts_ms"),
        broker.alias("broker"),
        F.col("user"),
        F.coalesce(F.col("client_id"), F.lit("")).alias("client_id"),
        qt.alias("quota_type"),
        value.alias("value"),
        topic.alias(TOPIC),
        *[(F.col(c).cast("bigint") if isinstance(fields[c], integral) else number(c).cast("bigint")).alias(c)
          for c in observed],
        reason.alias("_reason"),
        *[F.col(c).cast("string").alias(f"_raw_{c}") for c in raw_columns + observed],
    )
    valid = checked.where(F.col("_reason").isNull())
    own = valid.where(F.col(TOPIC).isNull())
    requests = own.select("_file", "_row", *COLUMNS)
    topic_requests = valid.where(F.col(TOPIC).isNotNull()).select("_file", "_row", *COLUMNS, TOPIC)
    # What the proxy observed is on a request's own rows (its topic rows carry none).
    kept = own.select("broker", "user", "client_id", "quota_type", *observed) if observed else None
    bad = checked.where(F.col("_reason").isNotNull()).select(
        "_row", *[F.col(f"_raw_{c}").alias(c) for c in raw_columns + observed], F.col("_reason").alias("reason")
    )
    return RequestLogReader(requests=requests, bad_rows=bad, source=path, fmt=fmt, raw=raw, observed=kept,
                            topic_requests=topic_requests, has_topics=TOPIC in fields)
