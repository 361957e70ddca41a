"""Quota configuration in ZooKeeper, in Apache Kafka's own layout (via kazoo).

Nodes (names sanitized with Kafka's ``Sanitizer``; ``<default>`` for defaults)::

    /config/users/<user>                   {"version":1,"config":{"producer_byte_rate":"1024"}}
    /config/users/<user>/clients/<client>  same shape
    /config/clients/<client>               same shape
    /config/changes/config_change_NNNNNNNNNN   {"version":2,"entity_path":"users/user1"}

Values are strings, as Kafka's tools write them. Keys kquota does not know (e.g. SCRAM
credentials in a user node) are kept as they are. A removal deletes the key; a node left with an
empty config and no children is deleted as Kafka's ``AdminZkClient`` does (then an emptied
``clients`` container, then an empty user node).

An alter is one ZooKeeper ``multi`` transaction (node writes and change notifications together),
with optimistic version checks and a retry on conflict, so readers and a killed writer never see
half an alter. ZooKeeper refuses requests above ``jute.maxbuffer`` (1 MiB by default); an alter
whose transaction would exceed ``max_transaction_bytes`` is refused before anything is written
(split it, or raise ``jute.maxbuffer`` on the servers and this limit together).
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any, Iterable, Optional

from kquota.entity import CLIENT_ID, USER, ClientQuotaEntity
from kquota.exceptions import QuotaConfigError
from kquota.stores.base import (
    ChangeCallback,
    ConfigStore,
    ConfigStoreError,
    ErrorCallback,
    QuotaState,
    StoreWatch,
    format_value,
    log_error,
    validate_alter,
)
from kquota.stores.layout import CLIENTS, USERS, entity_path, is_quota_entity_path, parse_entity_path

CHANGE_PREFIX = "config_change_"
#: Kafka's ``config.change.expiration.ms`` default for notifications: 15 minutes.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
#: Below ZooKeeper's default ``jute.maxbuffer`` (0xfffff bytes) with room for the framing.
MAX_TRANSACTION_BYTES = 1_000_000
_OP_OVERHEAD = 64  # bytes per op besides its path and data (multi header, ACL, flags; ~52 for a create)
_RETRIES = 20


class _Corrupt(Exception):
    pass


def _decode(data: Optional[bytes]) -> dict[str, str]:
    """A config node's ``config`` object (all keys, values as strings); ``_Corrupt`` if unreadable."""
    if data is None or not data.strip():
        return {}  # Kafka creates parent nodes without data
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _Corrupt(f"not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise _Corrupt("not a JSON object")
    config = doc.get("config", {})
    if not isinstance(config, dict):
        raise _Corrupt('"config" is not a JSON object')
    out = {}
    for k, v in config.items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _Corrupt(f"config key {k!r}: value {v!r} is not a string")
        out[k] = v if isinstance(v, str) else json.dumps(v)
    return out


def _encode(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode("utf-8")


def _quota_values(entity: ClientQuotaEntity, config: dict[str, str]) -> dict[str, float]:
    """The quota keys of a node's config as numbers, validated like an alter."""
    from kquota.manager import CONFIG_KEYS, QuotaManager

    out: dict[str, float] = {}
    for key in CONFIG_KEYS:
        if key in config:
            text = config[key].strip()
            try:
                value = float(text)
            except ValueError:
                raise _Corrupt(f"config key {key}: {config[key]!r} is not a number") from None
            if not math.isfinite(value):
                raise _Corrupt(f"config key {key}: {config[key]!r} is not a finite number")
            out[key] = value
    try:
        QuotaManager().alter_client_quotas([(entity, out)], validate_only=True)
    except QuotaConfigError as e:
        raise _Corrupt(str(e)) from None
    return out


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


class ZooKeeperConfigStore(ConfigStore):
    """Quota configuration in a ZooKeeper ensemble, in Kafka's layout.

    Args:
        hosts: ``host:port[,host:port...]``.
        chroot: optional path prefix (``/kafka`` for a Kafka cluster that uses a chroot).
        timeout: seconds to wait for the connection (and the session timeout).
        max_transaction_bytes: the largest alter transaction sent (see the module docstring).
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
            raise ConfigStoreError(f"store {self.url}: the ZooKeeper store needs kazoo (pip install 'kquota[zookeeper]'): {e}") from None
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
                    raise _Corrupt(str(e)) from None
                values = _quota_values(entity, _decode(node[0]))
            except _Corrupt as e:
                report(f"{self.url}: skipping {self._p(rel)}: {e}", entity)
                continue
            if values:
                out[entity] = values
        return out

    def _all_entity_paths(self) -> list[str]:
        top = self._children_many([self._p(USERS), self._p(CLIENTS)])
        users = sorted(top[self._p(USERS)])
        clients = sorted(top[self._p(CLIENTS)])
        user_clients = self._children_many([self._p(f"{USERS}/{u}/{CLIENTS}") for u in users])
        paths = []
        for u in users:
            paths.append(f"{USERS}/{u}")
            paths += [f"{USERS}/{u}/{CLIENTS}/{c}" for c in sorted(user_clients[self._p(f"{USERS}/{u}/{CLIENTS}")])]
        paths += [f"{CLIENTS}/{c}" for c in clients]
        return paths

    # ------------------------------------------------------------------ writes

    def alter(self, entries: Iterable[Any]) -> None:
        """Validates, then applies every entry and its change notification in one transaction."""
        self._check_open()
        validated = validate_alter(entries)
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
                        for rel in ("", USERS, CLIENTS, "changes"):
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

    def _plan(self, validated: list[tuple[ClientQuotaEntity, dict[str, Optional[float]]]]) -> list[tuple]:
        """Reads the touched nodes and returns the transaction's ops (kind, path, data, version)."""
        data_paths: set[str] = set()
        child_paths: set[str] = set()
        for entity, _ in validated:
            node = self.node_path(entity)
            data_paths.add(node)
            child_paths.add(node)
            if USER in entity and CLIENT_ID in entity:
                user = _parent(_parent(node))
                data_paths.add(user)
                child_paths.update((user, _parent(node)))
        nodes = self._get_many(sorted(data_paths))
        kids = self._children_many(sorted(child_paths))
        exists = {p: n is not None for p, n in nodes.items()}
        for p in child_paths:
            exists.setdefault(p, bool(kids[p]) or self._zk.exists(p) is not None)
        version = {p: n[1].version for p, n in nodes.items() if n is not None}
        children = {p: set(c) for p, c in kids.items()}
        configs: dict[str, dict[str, str]] = {}
        for p, n in nodes.items():
            try:
                configs[p] = _decode(n[0]) if n is not None else {}
            except _Corrupt:
                configs[p] = {}  # an alter replaces a node nobody can read
        original_data = {p: (n[0] if n is not None else None) for p, n in nodes.items()}
        original_exists = dict(exists)

        def add(path: str) -> None:
            if not exists.get(path):
                exists[path] = True
                children.setdefault(path, set())
                children.setdefault(_parent(path), set()).add(path.rsplit("/", 1)[1])

        def remove(path: str) -> None:
            exists[path] = False
            children.get(_parent(path), set()).discard(path.rsplit("/", 1)[1])

        for entity, ops in validated:
            node = self.node_path(entity)
            cfg = dict(configs.get(node, {}))
            for k, v in ops.items():
                if v is None:
                    cfg.pop(k, None)
                else:
                    cfg[k] = format_value(v)
            configs[node] = cfg
            is_pair = USER in entity and CLIENT_ID in entity
            if cfg or children.get(node):
                if is_pair:
                    add(_parent(_parent(node)))
                    add(_parent(node))
                add(node)
                continue
            # Kafka's tryCleanQuotaNodes: an empty leaf goes, then an emptied clients container,
            # then a user node left with no config and no children.
            if exists.get(node):
                remove(node)
            if is_pair:
                container = _parent(node)
                user = _parent(container)
                if exists.get(container) and not children.get(container):
                    remove(container)
                    if exists.get(user) and not configs.get(user) and not children.get(user):
                        remove(user)

        ops_out: list[tuple] = []
        altered = {self.node_path(entity) for entity, _ in validated}
        created = sorted((p for p in exists if exists[p] and not original_exists.get(p)), key=lambda p: p.count("/"))
        deleted = sorted((p for p in exists if not exists[p] and original_exists.get(p)), key=lambda p: -p.count("/"))
        for p in created:
            # Parents Kafka would create on the way (a user node, a clients container) get no data.
            ops_out.append(("create", p, _encode(configs[p]) if configs.get(p) else b"", -1))
        for p in sorted(altered):
            if exists.get(p) and original_exists.get(p):
                new = _encode(configs[p])
                if new != original_data.get(p):
                    ops_out.append(("set", p, new, version.get(p, -1)))
        for p in deleted:
            ops_out.append(("delete", p, None, version.get(p, -1)))
        for entity, _ in validated:
            note = json.dumps({"version": 2, "entity_path": entity_path(entity)}, separators=(",", ":")).encode()
            ops_out.append(("notify", self._p("changes/" + CHANGE_PREFIX), note, -1))
        return ops_out

    def _purge_notifications(self) -> None:
        """Deletes change notifications older than Kafka's 15 minutes (best effort)."""
        try:
            changes = self._p("changes")
            names = sorted(n for n in self._zk.get_children(changes) if n.startswith(CHANGE_PREFIX))
            horizon = time.time() * 1000 - CHANGE_EXPIRATION_MS
            for name in names[:1000]:
                stat = self._zk.exists(f"{changes}/{name}")
                if stat is None:
                    continue
                if stat.ctime >= horizon:
                    break
                self._zk.delete(f"{changes}/{name}")
        except Exception:  # noqa: BLE001 - purging is housekeeping; another writer may race us
            pass

    # ------------------------------------------------------------------ watch

    def watch(self, on_change: ChangeCallback, on_error: Optional[ErrorCallback] = None) -> StoreWatch:
        """Follows ``/config/changes`` with a kazoo ``ChildrenWatch``; re-reads after a session loss."""
        self._check_open()
        try:
            return _ZkWatch(self, on_change, on_error or log_error)
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


def _seq(name: str) -> int:
    try:
        return int(name[len(CHANGE_PREFIX) :]) if name.startswith(CHANGE_PREFIX) else -1
    except ValueError:
        return -1


def notification_entity_path(data: bytes) -> Optional[str]:
    """The ``entity_path`` a change notification names (version 2, or version 1 for clients).

    Raises ``ValueError`` for an unreadable notification.
    """
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    version = doc.get("version")
    if version == 2:
        path = doc.get("entity_path")
        if not isinstance(path, str):
            raise ValueError("version 2 notification without a string 'entity_path'")
        return path
    if version == 1:
        kind, name = doc.get("entity_type"), doc.get("entity_name")
        if not isinstance(kind, str) or not isinstance(name, str):
            raise ValueError("version 1 notification without 'entity_type' and 'entity_name'")
        return f"{kind}/{name}"
    raise ValueError(f"unsupported notification version {version!r} (supported: 1 and 2)")


class _ZkWatch(StoreWatch):
    def __init__(self, store: ZooKeeperConfigStore, on_change: ChangeCallback, on_error: ErrorCallback) -> None:
        from kazoo.recipe.watchers import ChildrenWatch

        self._store = store
        self._zk = store._zk
        self._on_change = on_change
        self._on_error = on_error
        self._stopped = False
        self._lost = False
        self._lock = threading.Lock()
        self._path = store._p("changes")
        self._zk.ensure_path(self._path)
        self._last = max((_seq(n) for n in self._zk.get_children(self._path)), default=-1)
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
            fresh = sorted((s, n) for n in children if (s := _seq(n)) > self._last)
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
                    self._on_error(f"{self._store.url}: cannot read {path}: {e}", None)
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
                    self._on_error(f"{self._store.url}: skipping change notification {path}: {e}", None)
            if changed:
                self._on_change(frozenset(changed))
        return None

    def stop(self) -> None:
        self._stopped = True
        try:
            self._zk.remove_listener(self._on_state)
        except Exception:  # noqa: BLE001
            pass

