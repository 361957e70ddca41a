"""Console progress of long Spark stages: stage name, rows done, elapsed time and ETA.

Rows done are estimated from finished tasks (each stage's tasks carry similar row counts). The
task counts come from Spark's status tracker on a classic session and from the progress handler
on Spark Connect; a line is printed only once a stage has run ``first_s`` seconds, then every
``every_s`` seconds, so short jobs stay quiet.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional


def format_line(stage: str, total: Optional[int], tasks_done: int, tasks: int, elapsed: float) -> str:
    """``[stage] 5,000,000/10,000,000 rows (2/4 tasks), 6 s, ETA 6 s`` (rows estimated from the
    share of finished tasks; without a row total, tasks only)."""
    if not tasks:
        return f"[{stage}] starting, {elapsed:.0f} s"
    frac = tasks_done / tasks
    eta = f"ETA {elapsed * (1 - frac) / frac:.0f} s" if frac else "ETA unknown"  # elapsed includes start-up
    rows = f"{int(total * frac):,}/{total:,} rows " if total is not None else ""
    return f"[{stage}] {rows}({tasks_done}/{tasks} tasks), {elapsed:.0f} s, {eta}"


class Watch:
    """Context manager that reports a Spark stage's progress through ``emit`` while it runs."""

    def __init__(self, spark: Any, stage: str, total_rows: Optional[int], emit: Optional[Callable[[str], None]],
                 first_s: float = 5.0, every_s: float = 5.0) -> None:
        self.spark, self.stage, self.total, self.emit = spark, stage, total_rows, emit
        self.first_s, self.every_s = first_s, every_s
        self._stages: dict = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._handler: Any = None
        self._tracker: Any = None
        self._lock = threading.Lock()

    def __enter__(self) -> "Watch":
        if self.emit is None:
            return self
        self.start = time.monotonic()
        if hasattr(self.spark, "registerProgressHandler") and not hasattr(self.spark, "_jsparkSession"):
            def handler(stages: Any, inflight_tasks: int, operation_id: Any, done: bool) -> None:
                with self._lock:
                    for s in stages or ():
                        self._stages[s.stage_id] = (s.num_completed_tasks, s.num_tasks)
            self._handler = handler
            self.spark.registerProgressHandler(handler)
        else:
            self._tracker = self.spark.sparkContext.statusTracker()
        self._thread = threading.Thread(target=self._loop, name="kquota-progress", daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        if self._tracker is None:
            return
        # Stages seen before are read again: a stage that just finished counts all its tasks.
        for sid in set(self._tracker.getActiveStageIds()) | set(self._stages):
            info = self._tracker.getStageInfo(sid)
            if info is not None:
                with self._lock:
                    self._stages[sid] = (info.numCompletedTasks, info.numTasks)

    def line(self) -> str:
        """The current progress line."""
        with self._lock:
            done_t = sum(c for c, _ in self._stages.values())
            all_t = sum(t for _, t in self._stages.values())
        return format_line(self.stage, self.total, done_t, all_t, time.monotonic() - self.start)

    def _loop(self) -> None:
        next_at = self.start + self.first_s
        while not self._stop.wait(0.5):
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - progress must never break the job
                continue
            if time.monotonic() >= next_at:
                self.emit(self.line())  # type: ignore[misc]
                next_at += self.every_s

    def __exit__(self, *exc: Any) -> None:
        if self.emit is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._handler is not None:
            self.spark.removeProgressHandler(self._handler)
