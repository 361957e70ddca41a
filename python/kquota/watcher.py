"""``QuotaConfigWatcher``: keeps a ``QuotaManager`` equal to a ``ConfigStore``.

On ``start()`` the watcher registers a watch on the store, then loads everything; after that,
every change the store reports is re-read and applied to the manager as one atomic alter that
sets what the store has and removes what it no longer has, for the touched entities only.
Several processes (on several hosts for ZooKeeper) watching one store therefore converge on the
store's state. The watcher owns the manager's configuration: alters made directly on the
manager are undone at the next full resync, not necessarily before.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from typing import Callable, Optional

from kquota.entity import ClientQuotaEntity
from kquota.exceptions import KQuotaError, QuotaConfigError
from kquota.stores.base import ConfigStore, QuotaState, StoreWatch, diff_ops

log = logging.getLogger("kquota.watcher")

_FULL = object()
_STOP = object()

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

    Use as a context manager, or ``start()`` / ``stop()``. ``start()`` returns once the initial
    load is applied.
    """

    def __init__(
        self,
        store: ConfigStore,
        qm: object,
        on_applied: Optional[AppliedCallback] = None,
        on_error: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.store = store
        self.qm = qm
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

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> "QuotaConfigWatcher":
        """Starts watching, then loads the store's state into the manager (waits for it)."""
        if self._thread is not None:
            raise KQuotaError("the watcher is already started")
        # Watch first, then load: a change made in between is applied twice, never missed.
        self._watch = self.store.watch(self._changed, on_error=self._store_error)
        self._queue.put(_FULL)
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

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            # Coalesce everything already queued into one read and one alter.
            full = item is _FULL
            touched: set[ClientQuotaEntity] = set() if full else set(item)  # type: ignore[arg-type]
            stop = False
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                if more is _FULL:
                    full = True
                else:
                    touched.update(more)  # type: ignore[arg-type]
            try:
                self._apply(None if full else frozenset(touched))
            except BaseException as e:  # noqa: BLE001 - reported; the next change retries
                if not self._loaded.is_set():
                    self._load_error = e
                else:
                    self._report(f"cannot apply changes from {self.store.url}: {e}")
            finally:
                self._loaded.set()
            if stop:
                return

    def _apply(self, entities: Optional[frozenset[ClientQuotaEntity]]) -> None:
        unreadable: set[Optional[ClientQuotaEntity]] = set()

        def on_error(message: str, entity: Optional[ClientQuotaEntity]) -> None:
            unreadable.add(entity)
            self._report(message)

        wanted: QuotaState = self.store.describe(entities, on_error=on_error)
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
        with self._cond:
            self.applied_count += 1
            self._cond.notify_all()
        if self._on_applied is not None:
            self._on_applied(entities)


def follow(store: ConfigStore, qm: object, **kwargs: object) -> QuotaConfigWatcher:
    """Starts and returns a :class:`QuotaConfigWatcher` (stop it with ``stop()``)."""
    return QuotaConfigWatcher(store, qm, **kwargs).start()  # type: ignore[arg-type]


__all__ = ["QuotaConfigWatcher", "follow"]
