"""Following ``/config/changes``: which entities changed, for a config watcher."""

from __future__ import annotations

import threading
from typing import Any, Optional

from kquota.entity import ClientQuotaEntity
from kquota.stores.base import ChangeCallback, ErrorCallback, StoreWatch
from kquota.stores.layout import is_quota_entity_path, parse_entity_path
from kquota.stores.zookeeper.notifications import notification_entity_path, sequence_number


class ZkWatch(StoreWatch):
    """A kazoo ``ChildrenWatch`` on the notifications, reporting the entities they name; after
    a disconnection or session loss, a full resync (``on_change(None)``)."""

    def __init__(
        self, zk: Any, changes_path: str, url: str, on_change: ChangeCallback, on_error: ErrorCallback
    ) -> None:
        """Watches ``changes_path`` on the kazoo client ``zk``; ``url`` names the store in errors."""
        from kazoo.recipe.watchers import ChildrenWatch

        self._url = url
        self._zk = zk
        self._on_change = on_change
        self._on_error = on_error
        self._stopped = False
        self._lost = False
        self._lock = threading.Lock()
        self._path = changes_path
        self._zk.ensure_path(self._path)
        self._last = max((sequence_number(n) for n in self._zk.get_children(self._path)), default=-1)
        self._zk.add_listener(self._on_state)
        self._watch = ChildrenWatch(self._zk, self._path, self._on_children)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: only flag and hand off. Notifications may have
        # been missed while disconnected (SUSPENDED) or with the session (LOST): resync all.
        if state in ("LOST", "SUSPENDED"):
            self._lost = True
        elif state == "CONNECTED" and self._lost and not self._stopped:
            self._lost = False
            self._on_change(None)

    def _on_children(self, children: list[str]) -> Optional[bool]:
        if self._stopped:
            return False
        from kazoo.exceptions import NoNodeError

        with self._lock:
            fresh = sorted((s, n) for n in children if (s := sequence_number(n)) > self._last)
            changed: set[ClientQuotaEntity] = set()
            for seq, name in fresh:
                path = f"{self._path}/{name}"
                try:
                    data, _ = self._zk.get(path)
                except NoNodeError:
                    continue  # purged by a writer: its change is older than our load
                except Exception as e:  # noqa: BLE001 - connection trouble
                    # Which entity changed is unknown until the node is read: hand off a full
                    # resync, which the watcher retries until the store answers.
                    self._on_error(f"{self._url}: cannot read {path}: {e}", None)
                    if changed:
                        self._on_change(frozenset(changed))
                    self._on_change(None)
                    return None
                self._last = max(self._last, seq)
                try:
                    rel = notification_entity_path(data)
                    if rel is None or not is_quota_entity_path(rel):
                        continue  # a topic, broker or ip change: not ours
                    changed.add(parse_entity_path(rel))
                except ValueError as e:
                    self._on_error(f"{self._url}: skipping change notification {path}: {e}", None)
            if changed:
                self._on_change(frozenset(changed))
        return None

    def stop(self) -> None:
        """Stops reporting changes (idempotent)."""
        self._stopped = True
        try:
            self._zk.remove_listener(self._on_state)
        except Exception:  # noqa: BLE001
            pass

