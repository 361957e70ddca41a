"""``QuotaConfigWatcher``: keeps a ``QuotaManager`` equal to a ``ConfigStore``.

On ``start()`` the watcher registers a watch on the store, then loads everything; after that,
every change the store reports is re-read and applied to the manager as one atomic alter that
sets what the store has and removes what it no longer has, for the touched entities only.
Several processes (on several hosts for ZooKeeper) watching one store therefore converge on the
store's state. The watcher owns the manager's configuration: alters made directly on the
manager are undone at the next full resync, not necessarily before.

A re-read that fails (ZooKeeper ``ConnectionLoss``, a SQLite error) is never dropped: the
watcher retries it as a full resync with exponential backoff (50 ms doubling to 5 s) until it
succeeds, and a store reports a ZooKeeper reconnect or session loss as a full resync too. The
failures are counted (``watcher-errors-total``) and the time since the last successful sync is
exposed (``config-sync-age-seconds``; a store that confirms it is current without a change, as
the Kafka store does each second with an empty set of entities, resets it too), both as manager
metrics (``QuotaManager.metrics()`` and the Prometheus exposition) while the watcher runs.

What the manager takes is a *view* of the store: by default its enforced configuration, the
quotas marked shadow (:mod:`kquota.shadow_marks`) left out, as a manager enforces; a shadow
manager follows :func:`kquota.shadow_marks.shadow_state`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from typing import Callable, Optional

from kquota.entity import ClientQuotaEntity
from kquota.metrics import Metric
from kquota.exceptions import KQuotaError, QuotaConfigError
from kquota.shadow_marks import enforced_state
from kquota.stores.base import ConfigStore, QuotaState, StoreWatch, diff_ops

log = logging.getLogger("kquota.watcher")

_FULL = object()
_STOP = object()

#: Metric group of the watcher's own values.
WATCHER_GROUP = "ConfigWatcher"

#: First and largest delay between retries of a failed re-read (seconds).
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 5.0

#: Called after each applied change with the entities it covered (``None`` = full resync).
AppliedCallback = Callable[[Optional[frozenset[ClientQuotaEntity]]], None]


class QuotaConfigWatcher:
    """Applies a store's quota configuration, and every later change, to a ``QuotaManager``.

    Args:
        store: the ``ConfigStore`` to follow (the watcher does not close it).
        qm: the ``QuotaManager`` to keep in sync.
        on_applied: optional callback after each applied batch (from the watcher's thread).
        on_error: optional callback for problems skipped (corrupt entries, rejected values);
            by default they are logged. The last 100 are kept in ``errors``.
        view: what of the store's state the manager takes (by default
            :func:`kquota.shadow_marks.enforced_state`: the quotas marked shadow left out);
            :func:`kquota.shadow_marks.shadow_state` makes ``qm`` the marks' shadow.

    Use as a context manager, or ``start()`` / ``stop()``. ``start()`` returns once the initial
    load is applied.
    """

    def __init__(
        self,
        store: ConfigStore,
        qm: object,
        on_applied: Optional[AppliedCallback] = None,
        on_error: Optional[Callable[[str], None]] = None,
        view: Callable[[QuotaState], QuotaState] = enforced_state,
    ) -> None:
        self.store = store
        self.qm = qm
        self.view = view
        self._on_applied = on_applied
        self._on_error_cb = on_error
        self.errors: deque[str] = deque(maxlen=100)
        #: Number of batches applied (the initial load counts as one).
        self.applied_count = 0
        self._queue: "queue.Queue[object]" = queue.Queue()
        self._watch: Optional[StoreWatch] = None
        self._thread: Optional[threading.Thread] = None
        self._loaded = threading.Event()
        self._load_error: Optional[BaseException] = None
        self._cond = threading.Condition()
        #: Re-reads or applies that failed (each is retried until it succeeds).
        self.error_count = 0
        #: Whether a failed re-read waits for its retry.
        self.retry_pending = False
        self._last_sync: Optional[float] = None
        #: When (``time.time()``) a read of the store last changed the manager's quotas, and how
        #: many entities that change covered (``None`` before the first change).
        self.last_change: Optional[float] = None
        self.last_change_entities: Optional[int] = None
        #: Reads that changed the manager's quotas.
        self.change_count = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> "QuotaConfigWatcher":
        """Starts watching, then loads the store's state into the manager (waits for it)."""
        if self._thread is not None:
            raise KQuotaError("the watcher is already started")
        # Watch first, then load: a change made in between is applied twice, never missed.
        self._watch = self.store.watch(self._changed, on_error=self._store_error)
        self._queue.put(_FULL)
        add_source = getattr(self.qm, "add_metrics_source", None)
        if callable(add_source):
            add_source(self.metrics)
        self._thread = threading.Thread(target=self._run, name="kquota-config-watcher", daemon=True)
        self._thread.start()
        if not self._loaded.wait(timeout):
            self.stop()
            raise KQuotaError(f"initial load from {self.store.url} did not finish within {timeout} s")
        if self._load_error is not None:
            err = self._load_error
            self.stop()
            raise err
        return self

    def stop(self) -> None:
        """Stops the watch and the apply thread; safe to call more than once."""
        remove_source = getattr(self.qm, "remove_metrics_source", None)
        if callable(remove_source):
            remove_source(self.metrics)
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        if self._thread is not None:
            self._queue.put(_STOP)
            if threading.current_thread() is not self._thread:
                self._thread.join()
            self._thread = None

    def __enter__(self) -> "QuotaConfigWatcher":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_applied(self, count: int, timeout: float) -> bool:
        """Waits until ``applied_count >= count``; returns whether it happened in time."""
        with self._cond:
            return self._cond.wait_for(lambda: self.applied_count >= count, timeout)

    @property
    def sync_age_seconds(self) -> Optional[float]:
        """Seconds since the last successful read-and-apply (``None`` before the first)."""
        last = self._last_sync
        return None if last is None else time.monotonic() - last

    def metrics(self) -> list[Metric]:
        """``watcher-errors-total``, ``watcher-retry-pending`` and ``config-sync-age-seconds``
        (NaN before the first sync) as per-type metric rows."""
        age = self.sync_age_seconds
        return [
            Metric(WATCHER_GROUP, "watcher-errors-total", {}, float(self.error_count)),
            Metric(WATCHER_GROUP, "watcher-retry-pending", {}, 1.0 if self.retry_pending else 0.0),
            Metric(WATCHER_GROUP, "config-sync-age-seconds", {}, float("nan") if age is None else age),
        ]

    def status(self, max_rows: int = 5) -> dict[str, object]:
        """The store section of the status page (:mod:`kquota.status`): the store's URL, when a
        read last changed the manager's quotas (``time.time()``) and how many entities it covered,
        the changes applied, the sync age, the read errors and the last ``max_rows`` problems
        (at most :data:`kquota.status.MAX_ERRORS`)."""
        from kquota.status import MAX_ERRORS, shown_name

        recent = list(self.errors)[-min(max_rows, MAX_ERRORS):] if max_rows > 0 else []
        return {"url": shown_name(self.store.url), "last_change": self.last_change,
                "last_change_entities": self.last_change_entities, "changes": self.change_count,
                "sync_age_seconds": self.sync_age_seconds, "errors_total": self.error_count,
                "retry_pending": self.retry_pending, "recent_errors": [shown_name(m) for m in reversed(recent)]}

    # ------------------------------------------------------------------ callbacks

    def _changed(self, entities: Optional[frozenset[ClientQuotaEntity]]) -> None:
        self._queue.put(_FULL if entities is None else entities)

    def _report(self, message: str) -> None:
        self.errors.append(message)
        if self._on_error_cb is not None:
            try:
                self._on_error_cb(message)
            except Exception:  # noqa: BLE001 - a broken reporter must not stop the watcher
                log.exception("on_error callback failed")
        else:
            log.warning("%s", message)

    def _store_error(self, message: str, entity: Optional[ClientQuotaEntity] = None) -> None:
        self._report(message)

    # ------------------------------------------------------------------ apply loop

    def _drain(self) -> list[object]:
        items = []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                return items

    def _run(self) -> None:
        # What is still to apply: a full resync and/or touched entities. A failed batch stays
        # here (as a full resync) and is retried after `delay`, or sooner with the next change.
        full, touched, delay = False, set(), 0.0
        while True:
            if full or touched:
                try:
                    first: Optional[object] = self._queue.get(timeout=delay)
                except queue.Empty:
                    first = None  # time to retry
            else:
                first = self._queue.get()
            # Coalesce everything already queued into one read and one alter.
            items = ([] if first is None else [first]) + self._drain()
            if _STOP in items:
                return
            for item in items:
                if item is _FULL:
                    full = True
                else:
                    touched.update(item)  # type: ignore[arg-type]
            if not (full or touched):
                if items and not self.retry_pending and self._loaded.is_set():
                    self._last_sync = time.monotonic()  # the store confirmed nothing changed
                continue
            try:
                self._apply(None if full else frozenset(touched))
            except BaseException as e:  # noqa: BLE001 - reported and retried
                self.error_count += 1
                if not self._loaded.is_set():
                    self._load_error = e
                    full, touched = False, set()
                else:
                    # Whatever failed, a full re-read covers it and anything missed meanwhile.
                    full, touched = True, set()
                    delay = min(max(delay * 2, RETRY_FIRST_S), RETRY_MAX_S)
                    self.retry_pending = True
                    self._report(f"cannot apply changes from {self.store.url} (retrying in {delay:g} s): {e}")
            else:
                full, touched, delay = False, set(), 0.0
                self.retry_pending = False
                self._last_sync = time.monotonic()
            finally:
                self._loaded.set()

    def _apply(self, entities: Optional[frozenset[ClientQuotaEntity]]) -> None:
        unreadable: set[Optional[ClientQuotaEntity]] = set()

        def on_error(message: str, entity: Optional[ClientQuotaEntity]) -> None:
            unreadable.add(entity)
            self._report(message)

        wanted: QuotaState = self.view(self.store.describe(entities, on_error=on_error))
        current = self.qm.describe_client_quotas()  # type: ignore[attr-defined]
        scope = set(wanted) | (set(current) if entities is None else set(entities))
        scope -= unreadable  # a corrupt entry keeps what the manager had
        changes = []
        for entity in scope:
            ops = diff_ops(current.get(entity, {}), wanted.get(entity, {}))
            if ops:
                changes.append((entity, ops))
        if changes:
            try:
                self.qm.alter_client_quotas(changes)  # type: ignore[attr-defined]
            except QuotaConfigError:
                # The store's value is valid in general but not for this manager (e.g. a
                # request_percentage above its thread capacity): apply the rest one by one.
                for entity, ops in changes:
                    try:
                        self.qm.alter_client_quotas([(entity, ops)])  # type: ignore[attr-defined]
                    except QuotaConfigError as e:
                        self._report(f"{self.store.url}: not applied: {e}")
            self.last_change, self.last_change_entities = time.time(), len(changes)
            self.change_count += 1
        with self._cond:
            self.applied_count += 1
            self._cond.notify_all()
        if self._on_applied is not None:
            self._on_applied(entities)


def follow(store: ConfigStore, qm: object, **kwargs: object) -> QuotaConfigWatcher:
    """Starts and returns a :class:`QuotaConfigWatcher` (stop it with ``stop()``)."""
    return QuotaConfigWatcher(store, qm, **kwargs).start()  # type: ignore[arg-type]


__all__ = ["QuotaConfigWatcher", "follow"]
