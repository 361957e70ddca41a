"""A proxy with an enforced and a shadow configuration, each a SQLite store followed by its own
QuotaManager (or, ``marked``, one store whose quotas marked shadow the shadow manager follows), and
a request log: what the shadow test and ``benches/bench_shadow.py`` both run."""

from __future__ import annotations

import os
from typing import Any

import kquota
from kquota.proxy.request_log_writer import RequestLogWriter
from kquota.shadow_marks import marked as mark, shadow_state
from kquota.stores.sqlite import SQLiteConfigStore
from kquota.watcher import QuotaConfigWatcher
from proxy_support import ProxyThread


class ShadowRig:
    """``enforced.db`` and ``shadow.db`` under ``directory`` (polled every ``poll`` s), their
    managers (``qm``, ``shadow_qm``, made with ``manager_args``), the request log in
    ``directory/log`` and ``proxy`` in front of ``broker`` (host, port). ``marked``: no
    ``shadow.db``; the shadow is ``enforced.db``'s quotas marked shadow (``kquota proxy
    --shadow-marked``). :meth:`close` stops everything, the proxy first."""

    def __init__(self, broker: tuple[str, int], directory: str, poll: float = 0.2, marked: bool = False,
                 **manager_args: Any) -> None:
        self.marked = marked
        self.directory = directory
        self.log_dir = os.path.join(directory, "log")
        self.enforced_url = "sqlite:///" + os.path.join(directory, "enforced.db")
        self.shadow_url = "sqlite:///" + os.path.join(directory, "shadow.db")
        self.enforced_store = SQLiteConfigStore(os.path.join(directory, "enforced.db"), poll_interval=poll)
        self.shadow_store = self.enforced_store if marked else \
            SQLiteConfigStore(os.path.join(directory, "shadow.db"), poll_interval=poll)
        self.qm = kquota.QuotaManager(**manager_args)
        self.shadow_qm = kquota.QuotaManager(**manager_args)
        self.watchers = [QuotaConfigWatcher(self.enforced_store, self.qm).start(),
                         QuotaConfigWatcher(self.shadow_store, self.shadow_qm,
                                            **({"view": shadow_state} if marked else {})).start()]
        self.request_log = RequestLogWriter(self.log_dir, rotate_seconds=600)
        self.proxy = ProxyThread(broker, qm=self.qm, store=self.enforced_store, shadow=self.shadow_qm,
                                 request_log=self.request_log)

    def set_shadow(self, entries: list[tuple[dict, dict]]) -> None:
        """Alters the shadow configuration: ``shadow.db``, or ``enforced.db``'s marks."""
        if self.marked:
            entries = [(e, {mark(k): v for k, v in ops.items()}) for e, ops in entries]
        self.shadow_store.alter(entries)

    def promote_args(self) -> list[str]:
        """``kquota configs --promote-shadow`` from the shadow store (or the marks) into the enforced one."""
        if self.marked:
            return ["configs", "--promote-shadow", "--store", self.enforced_url]
        return ["configs", "--promote-shadow", "--shadow-store", self.shadow_url, "--store", self.enforced_url]

    def own_rows(self) -> list[dict]:
        """The request log's rows of the requests themselves (their topic rows left out: the same
        bytes again, per topic)."""
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        return [r for r in pq.read_table(self.log_dir).to_pylist() if r.get("topic") is None]

    def close(self) -> None:
        self.proxy.stop()
        self.request_log.close()
        for w in self.watchers:
            w.stop()
        self.enforced_store.close()
        if not self.marked:
            self.shadow_store.close()
        self.qm.close()
        self.shadow_qm.close()
