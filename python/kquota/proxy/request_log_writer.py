"""``--request-log DIR``: every recorded request as a row of the pipeline's request log.

Rows (the columns of :mod:`kquota.request_log_schema`, the one definition of the schema) are
buffered and written by a background thread as Parquet files
``requests-<first ts>-<seq>.parquet``, a new file every ``rotate_rows`` rows or
``rotate_seconds`` seconds, so ``kquota pipeline usage/recommend/simulate --input DIR`` reads
real traffic. The proxy is one quota domain (one ``QuotaManager`` for every broker), so
``broker`` is 0: ``simulate`` then replays the traffic exactly as the proxy enforced it.
The buffer is bounded: rows beyond ``max_pending_rows`` are dropped and counted, never
blocking traffic.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Optional

from kquota.request_log_schema import arrow_schema

log = logging.getLogger("kquota.proxy")


class RequestLogWriter:
    """Writes a rotated Parquet request log in ``directory`` (created if missing); rows in the
    order of :data:`kquota.request_log_schema.WRITTEN_COLUMNS`."""

    def __init__(self, directory: str, rotate_rows: int = 100_000, rotate_seconds: float = 60.0,
                 max_pending_rows: int = 1_000_000, broker: int = 0) -> None:
        import pyarrow  # type: ignore[import-untyped]  # noqa: F401  (fail at start, not at the first flush)

        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.rotate_rows = rotate_rows
        self.rotate_seconds = rotate_seconds
        self.max_pending_rows = max_pending_rows
        self.broker = broker
        self.dropped = 0
        self.files_written = 0
        self._rows: list[tuple] = []
        self._pending = 0
        self._lock = threading.Lock()
        self._batches: queue.Queue[Optional[list[tuple]]] = queue.Queue()
        self._seq = 0
        self._last_flush = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="kquota-request-log", daemon=True)
        self._thread.start()

    def add(self, ts_ms: int, user: str, client_id: str, quota_type: str, value: float, throttle_time_ms: int = 0,
            shadow_throttle_time_ms: Optional[int] = None, shadow_delayed_bytes: Optional[float] = None,
            topic: Optional[str] = None) -> None:
        """Buffers one row (cheap; never blocks on I/O): the log's columns, then what the proxy
        observed (:data:`kquota.request_log_schema.OBSERVED_COLUMNS`; the shadow's ``None``
        without a shadow configuration); ``topic`` ``None`` for a request's own row, the topic
        for a topic row (:data:`kquota.request_log_schema.TOPIC`)."""
        with self._lock:
            if self._pending >= self.max_pending_rows:
                self.dropped += 1
                return
            self._rows.append((ts_ms, self.broker, user, client_id, quota_type, float(value), topic, int(throttle_time_ms),
                               shadow_throttle_time_ms,
                               None if shadow_delayed_bytes is None else int(shadow_delayed_bytes)))
            self._pending += 1
            if len(self._rows) >= self.rotate_rows or time.monotonic() - self._last_flush >= self.rotate_seconds:
                self._hand_over()

    def _hand_over(self) -> None:
        if self._rows:
            self._batches.put(self._rows)
            self._rows = []
        self._last_flush = time.monotonic()

    def flush(self) -> None:
        """Writes what is buffered now (as its own file) and waits for it."""
        with self._lock:
            self._hand_over()
        self._batches.join()

    def close(self) -> None:
        """Flushes and stops the writer thread."""
        self.flush()
        self._batches.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        schema = arrow_schema()
        while True:
            try:
                rows = self._batches.get(timeout=min(self.rotate_seconds, 5.0))
            except queue.Empty:
                # Quiet traffic: rows older than rotate_seconds are written anyway.
                with self._lock:
                    if self._rows and time.monotonic() - self._last_flush >= self.rotate_seconds:
                        self._hand_over()
                continue
            try:
                if rows is None:
                    return
                columns = list(zip(*rows))
                table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)],
                                             schema=schema)
                self._seq += 1
                base = f"requests-{rows[0][0]}-{self._seq:06d}.parquet"
                tmp = os.path.join(self.directory, f".{base}.tmp")  # hidden: Spark skips it
                pq.write_table(table, tmp)
                os.replace(tmp, os.path.join(self.directory, base))  # readers never see half a file
                self.files_written += 1
            except Exception as e:  # noqa: BLE001 - a failed write loses rows, never traffic
                log.error("request log: cannot write %d rows: %s", len(rows or ()), e)
            finally:
                if rows is not None:
                    with self._lock:
                        self._pending -= len(rows)
                self._batches.task_done()

