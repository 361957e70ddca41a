"""The ZooKeeper transaction of an alter, planned from the nodes read (pure; no connection).

Given the validated entries and what the touched nodes hold, :func:`plan` returns the ops of one
``multi`` transaction: creates (parents first, without data as Kafka creates them), data sets
with the version read (so a concurrent writer makes the transaction fail and be retried),
deletes (leaves first: Kafka's ``tryCleanQuotaNodes`` removes an emptied leaf, then an emptied
``clients`` container, then a user node left with no config and no children) and one change
notification per entity.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from kquota.entity import CLIENT_ID, USER, ClientQuotaEntity
from kquota.stores.base import AlterEntries, format_value
from kquota.stores.zookeeper.codec import CorruptNode, decode_config, encode_config
from kquota.stores.zookeeper.notifications import notification_data

#: ``entity -> absolute znode path of its config``.
NodePath = Callable[[ClientQuotaEntity], str]


class Op(NamedTuple):
    """One op of the transaction: ``kind`` is ``create``, ``set``, ``delete`` or ``notify`` (a
    sequential create under ``path``); ``version`` is the one read (-1: any)."""

    kind: str
    path: str
    data: Optional[bytes]
    version: int


class NodeState(NamedTuple):
    """What the touched nodes held when read."""

    #: Data paths (see :func:`paths_to_read`) -> ``(data, version)``, or ``None`` if absent.
    data: dict[str, Optional[tuple[bytes, int]]]
    #: Child paths -> the names of their children (empty if absent).
    children: dict[str, list[str]]
    #: Whether each child path that is not a data path exists (a ``clients`` container).
    exists: dict[str, bool]


def parent(path: str) -> str:
    """The parent znode path."""
    return path.rsplit("/", 1)[0]


def _is_pair(entity: ClientQuotaEntity) -> bool:
    return USER in entity and CLIENT_ID in entity


def paths_to_read(validated: AlterEntries, node_path: NodePath) -> tuple[list[str], list[str]]:
    """``(data paths, child paths)`` to read before planning: each entity's node, and for a
    ``users/<u>/clients/<c>`` entity also its user node and ``clients`` container."""
    data_paths: set[str] = set()
    child_paths: set[str] = set()
    for entity, _ in validated:
        node = node_path(entity)
        data_paths.add(node)
        child_paths.add(node)
        if _is_pair(entity):
            user = parent(parent(node))
            data_paths.add(user)
            child_paths.update((user, parent(node)))
    return sorted(data_paths), sorted(child_paths)


def plan(validated: AlterEntries, node_path: NodePath, notify_path: str, state: NodeState) -> list[Op]:
    """The transaction's ops for ``validated`` over the nodes in ``state``; ``notify_path`` is
    the prefix of the sequential notification nodes (``.../config/changes/config_change_``)."""
    exists = {p: n is not None for p, n in state.data.items()}
    for p, present in state.exists.items():
        exists.setdefault(p, present)
    for p, kids in state.children.items():
        exists.setdefault(p, bool(kids))
    version = {p: n[1] for p, n in state.data.items() if n is not None}
    children = {p: set(c) for p, c in state.children.items()}
    configs: dict[str, dict[str, str]] = {}
    for p, n in state.data.items():
        try:
            configs[p] = decode_config(n[0]) if n is not None else {}
        except CorruptNode:
            configs[p] = {}  # an alter replaces a node nobody can read
    original_data = {p: (n[0] if n is not None else None) for p, n in state.data.items()}
    original_exists = dict(exists)

    def add(path: str) -> None:
        if not exists.get(path):
            exists[path] = True
            children.setdefault(path, set())
            children.setdefault(parent(path), set()).add(path.rsplit("/", 1)[1])

    def remove(path: str) -> None:
        exists[path] = False
        children.get(parent(path), set()).discard(path.rsplit("/", 1)[1])

    for entity, ops in validated:
        node = node_path(entity)
        cfg = dict(configs.get(node, {}))
        for k, v in ops.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = format_value(v)
        configs[node] = cfg
        if cfg or children.get(node):
            if _is_pair(entity):
                add(parent(parent(node)))
                add(parent(node))
            add(node)
            continue
        # Kafka's tryCleanQuotaNodes: an empty leaf goes, then an emptied clients container,
        # then a user node left with no config and no children.
        if exists.get(node):
            remove(node)
        if _is_pair(entity):
            container = parent(node)
            user = parent(container)
            if exists.get(container) and not children.get(container):
                remove(container)
                if exists.get(user) and not configs.get(user) and not children.get(user):
                    remove(user)

    out: list[Op] = []
    altered = {node_path(entity) for entity, _ in validated}
    created = sorted((p for p in exists if exists[p] and not original_exists.get(p)), key=lambda p: p.count("/"))
    deleted = sorted((p for p in exists if not exists[p] and original_exists.get(p)), key=lambda p: -p.count("/"))
    for p in created:
        # Parents Kafka would create on the way (a user node, a clients container) get no data.
        out.append(Op("create", p, encode_config(configs[p]) if configs.get(p) else b"", -1))
    for p in sorted(altered):
        if exists.get(p) and original_exists.get(p):
            new = encode_config(configs[p])
            if new != original_data.get(p):
                out.append(Op("set", p, new, version.get(p, -1)))
    for p in deleted:
        out.append(Op("delete", p, None, version.get(p, -1)))
    for entity, _ in validated:
        out.append(Op("notify", notify_path, notification_data(entity), -1))
    return out
