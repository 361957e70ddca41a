"""``simulate`` without pushing rows through the JVM (the fast path for Parquet request logs).

Spark only schedules Python tasks (``spark.range(n).mapInArrow``: DataFrame API, so it runs on
a classic session, a standalone cluster or Spark Connect alike); the tasks move the data with
pyarrow:

1. *split* — one task per input file reads it (strings stay dictionary-encoded), validates every
   row, normalizes the quota type to a code and writes each broker's rows, in file order, to an
   Arrow IPC piece under ``OUT/_kquota_tmp/``; it returns the row count per broker;
2. *replay* — one task per broker (largest first) concatenates that broker's pieces in file-name
   order, so the rows are in *input order* (files in path-name order, rows in file order: explicit,
   whatever Spark's split settings), sorts them stably by ``ts_ms``, replays them through the
   kernel, writes ``OUT/requests/part-NNNNN-kquota.parquet`` and returns small per-sensor partials
   (:mod:`kquota.pipeline.summary`) that the driver merges into ``OUT/summary/``.

The driver never collects per-request data. An executor holds one broker's requests at a time
(about 100 bytes per request) plus one input file's batch in the split stage.

When a file holds anything the fast path does not handle (a null, a bad row, a missing column),
:func:`run` returns ``None`` and ``simulate`` takes the Spark path, which keeps bad rows with their
reason. Files are written under temporary names and renamed, so a retried task is harmless;
``_SUCCESS`` marks a finished output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import numpy as np

from kquota.pipeline.replay import TYPE_CODES
from kquota.request_log_schema import MAX_ABS_TS_MS, OBSERVED_COLUMNS, QUOTA_TYPES, REQUIRED, TOPIC, is_legal_topic

SPLIT_SCHEMA = "file int, broker long, rows long, problem string"
BATCH_ROWS = 1 << 20
#: At most this many replay tasks; beyond, brokers share tasks (largest first, round robin).
MAX_REPLAY_TASKS = 512


def fs_path(uri: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path) for a local path or a URI (``file:``, ``hdfs://``, ``s3://``)."""
    from pyarrow import fs

    if uri.startswith("file:"):
        return fs.LocalFileSystem(), "/" + uri[5:].lstrip("/")
    if "://" not in uri:
        return fs.LocalFileSystem(), os.path.abspath(uri)
    return fs.FileSystem.from_uri(uri)


@dataclass
class Plan:
    """What the fast path needs: the input files in path-name order, and the output root."""

    files: list
    out_dir: str
    has_broker: bool


def plan(log: Any, out_dir: str) -> Optional[Plan]:
    """A plan when ``log`` is Parquet with natively typed columns, else ``None``."""
    from pyspark.sql import types as T

    if log.fmt != "parquet" or log.raw is None:
        return None
    fields = {f.name: f.dataType for f in log.raw.schema.fields}
    integral = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    ok = isinstance(fields["ts_ms"], integral) and isinstance(fields["value"], integral + (T.FloatType, T.DoubleType))
    if "broker" in fields and not isinstance(fields["broker"], integral):
        ok = False
    if not ok:
        return None
    files = sorted(log.raw.inputFiles())
    if not files:
        return None
    if "://" not in out_dir and not out_dir.startswith("file:"):
        out_dir = os.path.abspath(out_dir)  # tasks may run in another working directory
    return Plan(files=files, out_dir=out_dir, has_broker="broker" in fields)


def _tmp_dir(out_dir: str) -> str:
    return out_dir.rstrip("/") + "/_kquota_tmp"


def _piece(out_dir: str, file_ix: int, broker: int) -> str:
    return f"{_tmp_dir(out_dir)}/f{file_ix:06d}-b{broker}.arrows"


def split_file(p: Plan, file_ix: int) -> list:
    """Split task: one input file into per-broker IPC pieces. Returns ``(broker, rows)`` pairs,
    or ``[(-1, 0, problem)]`` when the file needs the Spark path."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    in_fs, in_path = fs_path(p.files[file_ix])
    out_fs, _ = fs_path(p.out_dir)
    cols = list(REQUIRED) + (["broker"] if p.has_broker else [])
    with in_fs.open_input_file(in_path) as f:
        names = set(pq.read_schema(f).names)
        pf = pq.ParquetFile(f, read_dictionary=[c for c in ("user", "client_id", "quota_type", TOPIC) if c in names])
        if not set(cols) <= names:
            return [(-1, 0, "a file lacks a column")]
        # The proxy's observed columns feed no replay, but a bad one makes its row bad (schema.py):
        # checked here so both paths skip the same rows.
        observed = [c for c in OBSERVED_COLUMNS if c in names]
        if TOPIC in names:
            cols.append(TOPIC)
        schema = pa.schema([("ts_ms", pa.int64()), ("user", pa.dictionary(pa.int32(), pa.string())),
                            ("client_id", pa.dictionary(pa.int32(), pa.string())), ("qt", pa.int8()),
                            ("value", pa.float64())])
        writers: dict = {}
        counts: dict = {}
        try:
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=cols + observed, use_threads=False):
                problem = _check_observed(batch, observed)
                if problem:
                    return [(-1, 0, problem)]
                if TOPIC in cols:
                    batch, problem = _own_rows(batch)
                    if problem:
                        return [(-1, 0, problem)]
                problem = _check(batch, [c for c in cols if c != TOPIC])
                if problem:
                    return [(-1, 0, problem)]
                n = batch.num_rows
                ts = batch.column("ts_ms").cast(pa.int64()).to_numpy()
                if n and int(np.abs(ts).max()) >= MAX_ABS_TS_MS:
                    return [(-1, 0, "ts_ms beyond 2^46")]
                value = batch.column("value").cast(pa.float64()).to_numpy()
                if n and not (np.isfinite(value).all() and (value >= 0).all()):
                    return [(-1, 0, "bad value")]
                qt = _type_codes(batch.column("quota_type"))
                if qt is None:
                    return [(-1, 0, "bad quota type")]
                broker = batch.column("broker").cast(pa.int64()).to_numpy() if p.has_broker \
                    else np.zeros(n, dtype=np.int64)
                order = np.argsort(broker, kind="stable")
                sb = broker[order]
                starts = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]]) if n else np.array([], dtype=np.int64)
                ends = np.r_[starts[1:], n]
                table = pa.table([pa.array(ts), _dict(batch.column("user")), _dict(batch.column("client_id")),
                                  pa.array(qt), pa.array(value)], schema=schema)
                for s, e in zip(starts.tolist(), ends.tolist()):
                    b = int(sb[s])
                    idx = pa.array(order[s:e])
                    if b not in writers:
                        tmp = f"{_piece(p.out_dir, file_ix, b)}.{os.getpid()}.tmp"
                        sink = out_fs.open_output_stream(tmp)
                        writers[b] = (ipc.new_stream(sink, schema), sink, tmp)
                        counts[b] = 0
                    writers[b][0].write_table(table.take(idx))
                    counts[b] += e - s
        finally:
            for w, sink, _tmp in writers.values():
                w.close()
                sink.close()
        for b, (_w, _sink, tmp) in writers.items():
            out_fs.move(tmp, _piece(p.out_dir, file_ix, b))
    return sorted(counts.items())


def _own_rows(batch: Any) -> tuple[Any, Optional[str]]:
    """The batch's requests (rows with a null topic: topic rows are not replayed), or a problem
    when a topic row is bad (the Spark path counts it)."""
    import pyarrow.compute as pc

    col = batch.column(TOPIC)
    own = pc.is_null(col)
    topics = _dict(col).dictionary.to_pylist() if len(col) else []
    if not all(is_legal_topic(t) for t in topics):
        return batch, "bad topic"
    if len(col) and pc.all(own).as_py():
        return batch, None
    kinds = _type_codes(pc.filter(batch.column("quota_type"), pc.invert(own)))
    if kinds is None or (kinds == TYPE_CODES["REQUEST"]).any():
        return batch, "bad topic row"
    return batch.filter(own), None


def _check(batch: Any, cols: list) -> Optional[str]:
    for c in cols:
        if batch.column(c).null_count:
            return f"null in {c}"
    return None


def _check_observed(batch: Any, observed: list) -> Optional[str]:
    """A problem with an observed column (nulls are fine: not observed): not an integer type, or
    a negative value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for c in observed:
        col = batch.column(c)
        if not pa.types.is_integer(col.type):
            return f"{c} is not an integer column"
        low = pc.min(col).as_py() if batch.num_rows else None
        if low is not None and low < 0:
            return f"negative {c}"
    return None


def _dict(col: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_dictionary(col.type):
        return col.cast(pa.dictionary(pa.int32(), pa.string()))
    return col.cast(pa.string()).dictionary_encode()


def _type_codes(col: Any) -> Optional[np.ndarray]:
    """int8 codes of a quota-type column (trimmed of spaces, any case), or ``None`` if one is
    not PRODUCE, FETCH or REQUEST."""
    col = _dict(col)
    names = [s.strip(" ").upper() for s in col.dictionary.to_pylist()]
    lut = np.array([TYPE_CODES.get(s, -1) for s in names] or [-1], dtype=np.int8)
    codes = lut[col.indices.to_numpy(zero_copy_only=False)] if len(col) else np.zeros(0, dtype=np.int8)
    if len(codes) and (codes < 0).any():
        return None
    return codes


def replay_brokers(p: Plan, quotas_doc: dict, model: str, task: int, brokers: list) -> list:
    """Replay task: each of ``brokers`` (``(broker, [file indices])``) in full; writes
    ``requests/part-<task>-kquota.parquet`` and returns per-sensor partial rows."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    from kquota.pipeline.broker import entity_list, factorize_pairs, replay_sorted
    from kquota.pipeline.summary import partials

    out_fs, out_root = fs_path(p.out_dir)
    path = f"{out_root}/requests/part-{task:05d}-kquota.parquet"
    # Written in the scratch directory (readers of requests/ never see a partial file: a
    # failed attempt leaves its file there), renamed into place when complete.
    tmp = f"{_tmp_dir(out_root)}/part-{task:05d}.{os.getpid()}.tmp"
    rows: list = []
    writer = None
    try:
        for broker, file_ixs in brokers:
            pieces = []
            for f in file_ixs:
                with out_fs.open_input_file(fs_path(_piece(p.out_dir, f, broker))[1]) as src:
                    pieces.append(ipc.open_stream(src).read_all())
            t = pa.concat_tables(pieces).unify_dictionaries().combine_chunks()
            del pieces
            ts = t.column("ts_ms").to_numpy()
            # Input order is the concatenation order: a stable sort by time keeps it for ties.
            order = np.argsort(ts, kind="stable")
            ts = ts[order]
            users = t.column("user").chunk(0).dictionary
            clients = t.column("client_id").chunk(0).dictionary
            u_idx = t.column("user").chunk(0).indices.to_numpy()[order]
            c_idx = t.column("client_id").chunk(0).indices.to_numpy()[order]
            types = t.column("qt").to_numpy()[order]
            values = t.column("value").to_numpy()[order]
            del t, order  # memory: one broker's sorted columns from here on
            codes, pair_keys = factorize_pairs(u_idx, len(users), c_idx, len(clients))
            entities = entity_list(pair_keys, users.to_pylist(), clients.to_pylist())
            rep = replay_sorted(quotas_doc, model, ts, types, codes, entities, values)
            del codes
            type_names = pa.array(QUOTA_TYPES)
            for a in range(0, len(ts), BATCH_ROWS):
                # One row group at a time: zero-copy views, so output costs no per-broker memory.
                z = slice(a, a + BATCH_ROWS)
                out = pa.table({
                    "ts_ms": pa.array(ts[z]),
                    "broker": pa.array(np.full(len(ts[z]), broker, dtype=np.int64)),
                    "user": pa.DictionaryArray.from_arrays(pa.array(u_idx[z]), users),
                    "client_id": pa.DictionaryArray.from_arrays(pa.array(c_idx[z]), clients),
                    "quota_type": pa.DictionaryArray.from_arrays(pa.array(types[z].astype(np.int32)), type_names),
                    "value": pa.array(values[z]),
                    "throttle_ms": pa.array(rep.throttle[z]),
                })
                if writer is None:
                    writer = pq.ParquetWriter(tmp, out.schema, filesystem=out_fs, store_schema=False,
                                              use_dictionary=["user", "client_id", "quota_type"])
                writer.write_table(out, row_group_size=BATCH_ROWS)
            del u_idx, c_idx, types
            part = partials(broker, rep, ts, values)
            rows.extend(dict(zip(part, vals)) for vals in zip(*part.values()))
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        out_fs.move(tmp, path)
    return rows


def assign(counts: dict, tasks: int) -> list:
    """Brokers (with their row counts) to at most ``tasks`` replay tasks: largest first, each to
    the task with the fewest rows so far."""
    by_size = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    n = max(1, min(tasks, len(by_size)))
    load = [0] * n
    out: list = [[] for _ in range(n)]
    for b, rows in by_size:
        i = load.index(min(load))
        out[i].append(b)
        load[i] += rows
    return out


def _reset(out_fs: Any, path: str) -> None:
    from pyarrow import fs

    if out_fs.get_file_info(path).type != fs.FileType.NotFound:
        out_fs.delete_dir(path)
    out_fs.create_dir(path, recursive=True)


def _success(out_fs: Any, directory: str) -> None:
    with out_fs.open_output_stream(f"{directory}/_SUCCESS"):
        pass


def run(spark: Any, p: Plan, quotas_doc: dict, model: str, bad_columns: list,
        emit: Optional[Callable[[str], None]] = None) -> Optional[dict]:
    """Runs the fast path; returns ``{"requests", "summary", "bad_rows"}`` paths, or ``None``
    (nothing written but the scratch directory, removed again) when the Spark path must run."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kquota.pipeline.progress import Watch
    from kquota.pipeline.summary import PARTIAL_SCHEMA, merge, partial_arrow_schema

    out_fs, root = fs_path(p.out_dir)
    tmp = _tmp_dir(root)
    _reset(out_fs, tmp)
    try:
        n = len(p.files)

        def split_fn(batches: Iterator[Any]) -> Iterator[Any]:
            for b in batches:
                for fid in b.column(0).to_pylist():
                    res = split_file(p, fid)
                    yield pa.RecordBatch.from_pydict({
                        "file": pa.array([fid] * len(res), pa.int32()),
                        "broker": pa.array([r[0] for r in res], pa.int64()),
                        "rows": pa.array([r[1] for r in res], pa.int64()),
                        "problem": pa.array([r[2] if len(r) > 2 else None for r in res], pa.string())})

        with Watch(spark, "simulate: split", None, emit):
            split = spark.range(0, n, 1, n).mapInArrow(split_fn, SPLIT_SCHEMA).collect()
        if any(r["problem"] for r in split):
            return None
        counts: dict = {}
        files_of: dict = {}
        for r in sorted(split, key=lambda r: (r["broker"], r["file"])):
            counts[r["broker"]] = counts.get(r["broker"], 0) + r["rows"]
            files_of.setdefault(r["broker"], []).append(r["file"])
        total = sum(counts.values())
        groups = assign(counts, MAX_REPLAY_TASKS)
        tasks = [[(b, files_of[b]) for b in g] for g in groups]
        _reset(out_fs, f"{root}/requests")
        schema = partial_arrow_schema()

        def replay_fn(batches: Iterator[Any]) -> Iterator[Any]:
            for b in batches:
                for t in b.column(0).to_pylist():
                    rows = replay_brokers(p, quotas_doc, model, t, tasks[t])
                    yield pa.RecordBatch.from_pylist(rows, schema=schema)

        k = len(tasks)
        with Watch(spark, "simulate: replay", total, emit):
            parts = spark.range(0, k, 1, k).mapInArrow(replay_fn, PARTIAL_SCHEMA).collect() if counts else []
        _success(out_fs, f"{root}/requests")
        summary = merge(r.asDict() for r in parts)
        _reset(out_fs, f"{root}/summary")
        pq.write_table(summary, f"{root}/summary/part-00000-kquota.parquet", filesystem=out_fs, store_schema=False)
        _success(out_fs, f"{root}/summary")
        _reset(out_fs, f"{root}/bad_rows")
        bad = pa.schema([("_row", pa.int64())] + [(c, pa.string()) for c in bad_columns] + [("reason", pa.string())])
        pq.write_table(bad.empty_table(), f"{root}/bad_rows/part-00000-kquota.parquet", filesystem=out_fs,
                       store_schema=False)
        _success(out_fs, f"{root}/bad_rows")
    finally:
        out_fs.delete_dir(tmp)
    return {"requests": f"{p.out_dir}/requests", "summary": f"{p.out_dir}/summary",
            "bad_rows": f"{p.out_dir}/bad_rows", "rows": total}
