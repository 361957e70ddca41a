"""``ZooKeeperConfigStore``: the connection, reads, the alter transaction and its retries."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterable, Optional

from kquota.entity import ClientQuotaEntity
from kquota.stores.base import (
    AlterEntries,
    ChangeCallback,
    ConfigStore,
    ConfigStoreError,
    ErrorCallback,
    QuotaState,
    StoreWatch,
    log_error,
)
from kquota.stores.layout import CLIENTS, IPS, TOPIC_QUOTAS, USERS, entity_path, parse_entity_path
from kquota.stores.zookeeper.codec import CorruptNode, decode_config, quota_values
from kquota.stores.zookeeper.notifications import CHANGE_PREFIX, purge_notifications
from kquota.stores.zookeeper.plan import NodeState, Op, paths_to_read, plan
from kquota.stores.zookeeper.watch import ZkWatch
from kquota.validation import validate_alter

#: Below ZooKeeper's default ``jute.maxbuffer`` (0xfffff bytes) with room for the framing.
MAX_TRANSACTION_BYTES = 1_000_000
_OP_OVERHEAD = 64  # bytes per op besides its path and data (multi header, ACL, flags; ~52 for a create)
_RETRIES = 20


class ZooKeeperConfigStore(ConfigStore):
    """Quota configuration in a ZooKeeper ensemble, in Kafka's layout.

    Args:
        hosts: ``host:port[,host:port...]``.
        chroot: optional path prefix (``/kafka`` for a Kafka cluster that uses a chroot).
        timeout: seconds to wait for the connection (and the session timeout).
        max_transaction_bytes: the largest alter transaction sent (see :mod:`kquota.stores.zookeeper`).
        read_only: ``alter`` raises; nothing is created (``describe`` and ``watch`` only).
    """

    def __init__(
        self,
        hosts: str,
        chroot: Optional[str] = None,
        timeout: float = 5.0,
        max_transaction_bytes: int = MAX_TRANSACTION_BYTES,
        read_only: bool = False,
    ) -> None:
        self.hosts = hosts
        self.read_only = bool(read_only)
        self.root = ("/" + chroot.strip("/")) if chroot and chroot.strip("/") else ""
        self.url = f"zookeeper://{hosts}{self.root}"
        self.max_transaction_bytes = int(max_transaction_bytes)
        try:
            from kazoo.client import KazooClient
            from kazoo.retry import KazooRetry
        except ImportError as e:
            raise ConfigStoreError(
                f"store {self.url}: the ZooKeeper store needs kazoo (pip install 'kquota[zookeeper]'): {e}"
            ) from None
        try:
            self._zk = KazooClient(
                hosts=hosts,
                timeout=max(float(timeout), 2.0),
                connection_retry=KazooRetry(max_tries=-1, max_delay=2.0),
                command_retry=KazooRetry(max_tries=3, max_delay=1.0),
            )
        except (ValueError, TypeError) as e:
            raise ConfigStoreError(f"invalid ZooKeeper store {self.url}: {e}") from None
        try:
            self._zk.start(timeout=float(timeout))
        except Exception as e:  # noqa: BLE001 - kazoo raises its own timeout or socket errors
            self._zk.stop()
            self._zk.close()
            reason = "no connection" if "timeout" in type(e).__name__.lower() else str(e) or type(e).__name__
            raise ConfigStoreError(f"cannot reach ZooKeeper store {self.url}: {reason} within {timeout:g} s") from None
        self._closed = False
        self._lock = threading.Lock()
        self._ensured = False
        self._next_purge = 0.0

    # ------------------------------------------------------------------ paths

    def _p(self, rel: str) -> str:
        return f"{self.root}/config/{rel}" if rel else f"{self.root}/config"

    def node_path(self, entity: ClientQuotaEntity) -> str:
        """The absolute znode path of an entity's config."""
        return self._p(entity_path(entity))

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigStoreError(f"store {self.url} is closed")

    def _fail(self, what: str, e: Exception) -> ConfigStoreError:
        return ConfigStoreError(f"store {self.url}: {what}: {type(e).__name__} {e}".rstrip())

    # ------------------------------------------------------------------ reads

    def _get_many(self, paths: list[str]) -> dict[str, Optional[tuple[bytes, Any]]]:
        from kazoo.exceptions import NoNodeError

        pending = [(p, self._zk.get_async(p)) for p in paths]
        out: dict[str, Optional[tuple[bytes, Any]]] = {}
        for p, r in pending:
            try:
                out[p] = r.get()
            except NoNodeError:
                out[p] = None
        return out

    def _children_many(self, paths: list[str]) -> dict[str, list[str]]:
        from kazoo.exceptions import NoNodeError

        pending = [(p, self._zk.get_children_async(p)) for p in paths]
        out: dict[str, list[str]] = {}
        for p, r in pending:
            try:
                out[p] = list(r.get())
            except NoNodeError:
                out[p] = []
        return out

    def describe(
        self,
        entities: Optional[Iterable[ClientQuotaEntity]] = None,
        on_error: Optional[ErrorCallback] = None,
    ) -> QuotaState:
        """Every entity with quota keys (or only ``entities``); corrupt nodes are reported and skipped."""
        self._check_open()
        report = on_error or log_error
        try:
            if entities is None:
                paths = self._all_entity_paths()
            else:
                paths = sorted({entity_path(ClientQuotaEntity(e)) for e in entities})
            nodes = self._get_many([self._p(p) for p in paths])
        except ConfigStoreError:
            raise
        except Exception as e:  # noqa: BLE001 - kazoo connection errors
            raise self._fail("cannot read", e) from None
        out: QuotaState = {}
        for rel in paths:
            node = nodes[self._p(rel)]
            if node is None:
                continue
            entity: Optional[ClientQuotaEntity] = None
            try:
                try:
                    entity = parse_entity_path(rel)
                except ValueError as e:
                    raise CorruptNode(str(e)) from None
                values = quota_values(entity, decode_config(node[0]))
            except CorruptNode as e:
                report(f"{self.url}: skipping {self._p(rel)}: {e}", entity)
                continue
            if values:
                out[entity] = values
        return out

    def _all_entity_paths(self) -> list[str]:
        top = self._children_many([self._p(USERS), self._p(CLIENTS), self._p(IPS), self._p(TOPIC_QUOTAS)])
        users = sorted(top[self._p(USERS)])
        clients = sorted(top[self._p(CLIENTS)])
        user_clients = self._children_many([self._p(f"{USERS}/{u}/{CLIENTS}") for u in users])
        paths = []
        for u in users:
            paths.append(f"{USERS}/{u}")
            paths += [f"{USERS}/{u}/{CLIENTS}/{c}" for c in sorted(user_clients[self._p(f"{USERS}/{u}/{CLIENTS}")])]
        paths += [f"{CLIENTS}/{c}" for c in clients]
        paths += [f"{IPS}/{ip}" for ip in sorted(top[self._p(IPS)])]
        paths += [f"{TOPIC_QUOTAS}/{t}" for t in sorted(top[self._p(TOPIC_QUOTAS)])]
        return paths

    # ------------------------------------------------------------------ writes

    def alter(self, entries: Iterable[Any]) -> None:
        """Validates, then applies every entry and its change notification in one transaction."""
        self._check_open()
        validated = validate_alter(entries, shadow_marks=True)
        if self.read_only:
            raise ConfigStoreError(f"store {self.url} was opened read-only")
        if not validated:
            return
        from kazoo.exceptions import (
            BadVersionError,
            NodeExistsError,
            NoNodeError,
            NotEmptyError,
            RolledBackError,
            RuntimeInconsistency,
        )

        conflicts = (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)
        # Cheap lower bound first (one node write and one notification per entity), so a hopeless
        # alter is refused before reading thousands of nodes.
        floor = sum(2 * len(self.node_path(e)) + 40 + 2 * _OP_OVERHEAD for e, _ in validated)
        self._check_size(floor, len(validated))
        with self._lock:
            try:
                for _attempt in range(_RETRIES):
                    if not self._ensured:
                        for rel in ("", USERS, CLIENTS, IPS, TOPIC_QUOTAS, "changes"):
                            self._zk.ensure_path(self._p(rel))
                        self._ensured = True
                    ops = self._plan(validated)
                    size = sum(len(op[1].encode()) + len(op[2] or b"") + _OP_OVERHEAD for op in ops)
                    self._check_size(size, len(validated))
                    t = self._zk.transaction()
                    for kind, path, data, version in ops:
                        if kind == "create":
                            t.create(path, data or b"")
                        elif kind == "set":
                            t.set_data(path, data, version=version)
                        elif kind == "delete":
                            t.delete(path, version=version)
                        else:
                            t.create(path, data, sequence=True)
                    results = t.commit()
                    # The failing op carries the cause; ops before it are rolled back, ops after it
                    # report a runtime inconsistency.
                    errors = [r for r in results if isinstance(r, Exception)
                              and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
                    if not errors:
                        break
                    self._ensured = False  # a conflict may be a removed /config: check it again
                    if not all(isinstance(r, conflicts) for r in errors):
                        raise self._fail("alter failed, nothing changed", errors[0])
                else:
                    raise ConfigStoreError(f"store {self.url}: alter kept conflicting with other writers; nothing changed")
            except ConfigStoreError:
                raise
            except Exception as e:  # noqa: BLE001 - kazoo connection errors
                raise self._fail("alter failed (if the connection dropped mid-commit it may or may not have "
                                 "been applied, never partly)", e) from None
            if time.monotonic() >= self._next_purge:
                self._next_purge = time.monotonic() + 60
                self._purge_notifications()

    def _check_size(self, size: int, entities: int) -> None:
        if size > self.max_transaction_bytes:
            raise ConfigStoreError(
                f"store {self.url}: alter of {entities} entities needs a transaction of at least {size} bytes, "
                f"above the {self.max_transaction_bytes}-byte limit (ZooKeeper's jute.maxbuffer); "
                f"nothing was written: split it into smaller alters"
            )

    def _plan(self, validated: AlterEntries) -> list[Op]:
        """Reads the touched nodes and plans the transaction (see :mod:`.plan`)."""
        data_paths, child_paths = paths_to_read(validated, self.node_path)
        nodes = self._get_many(data_paths)
        kids = self._children_many(child_paths)
        state = NodeState(
            data={p: None if n is None else (n[0], n[1].version) for p, n in nodes.items()},
            children=kids,
            exists={p: bool(kids[p]) or self._zk.exists(p) is not None for p in child_paths if p not in nodes},
        )
        return plan(validated, self.node_path, self._p("changes/" + CHANGE_PREFIX), state)

    def _purge_notifications(self) -> None:
        purge_notifications(self._zk, self._p("changes"))

    # ------------------------------------------------------------------ watch

    def watch(self, on_change: ChangeCallback, on_error: Optional[ErrorCallback] = None) -> StoreWatch:
        """Follows ``/config/changes`` with a kazoo ``ChildrenWatch``; re-reads after a session loss."""
        self._check_open()
        try:
            return ZkWatch(self._zk, self._p("changes"), self.url, on_change, on_error or log_error)
        except ConfigStoreError:
            raise
        except Exception as e:  # noqa: BLE001
            raise self._fail("cannot watch", e) from None

    def close(self) -> None:
        """Closes the ZooKeeper session; safe to call more than once."""
        if not getattr(self, "_closed", True):
            self._closed = True
            self._zk.stop()
            self._zk.close()
