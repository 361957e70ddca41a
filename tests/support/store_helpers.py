"""Helpers for the store tests: store fixtures (SQLite always, ZooKeeper when reachable, Kafka on
the session's Apache Kafka broker, the ``broker`` fixture)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid

import pytest

ZK_ENV = "KQUOTA_TEST_ZK"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def zk_address():
    """The test ZooKeeper's host:port; fails under CI=true when absent, else skips."""
    addr = os.environ.get(ZK_ENV, "127.0.0.1:21810")
    host, _, port = addr.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except (OSError, ValueError) as e:
        msg = (f"ZooKeeper not reachable at {addr} ({e}); start one with `bash scripts/zookeeper.sh start` "
               f"or set {ZK_ENV}")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        import kazoo  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"kazoo missing: {e}")
        pytest.skip(f"kazoo missing: {e}")
    return addr


def fresh_zk_url():
    """A zookeeper:// URL with a chroot of its own (tests never see each other's nodes)."""
    return f"zookeeper://{zk_address()}/kquota-test-{uuid.uuid4().hex[:12]}"


def fresh_sqlite_url(tmp_path):
    return "sqlite:///" + str(tmp_path / "quotas.db")


def fresh_kafka_url(broker):
    """A kafka:// URL with a topic of its own on ``broker`` (the ``broker`` fixture)."""
    return f"kafka://{broker.address}/kquota-test-{uuid.uuid4().hex[:12]}"


def store_url(kind, tmp_path, request=None):
    """A fresh store URL of ``kind``; ``kafka`` takes the module's ``broker`` fixture from ``request``."""
    if kind == "kafka":
        return fresh_kafka_url(request.getfixturevalue("broker"))
    return fresh_sqlite_url(tmp_path) if kind == "sqlite" else fresh_zk_url()


def assert_kafka_layout(store, nodes: dict) -> None:
    """Each of ``nodes`` (a path under a ZooKeeper ``store``'s root: its JSON) is written as Kafka
    writes it, and a change notification (Kafka's ``/config/changes``) names its entity."""
    zk, changes = store._zk, store._p("changes")
    notes = [json.loads(zk.get(f"{changes}/{n}")[0]) for n in sorted(zk.get_children(changes))]
    for path, doc in nodes.items():
        assert json.loads(zk.get(store._p(path))[0]) == doc, path
        assert {"version": 2, "entity_path": path} in notes, (path, notes)


def assert_bad_nodes_skipped(store, nodes: dict, described: dict) -> list:
    """Writes ``nodes`` (a path under a ZooKeeper ``store``'s root: its data) as another writer
    might have left them: the store still describes ``described``, the bad entries skipped. The
    messages of the entries it reported."""
    for path, data in nodes.items():
        store._zk.create(store._p(path), data)
    errors: list = []
    assert store.describe(on_error=lambda m, e: errors.append(m)) == described
    return errors


def run_cli(*args, env_extra=None, stdin=None):
    """Runs `python -m kquota configs ...` in a subprocess; returns CompletedProcess."""
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "kquota", "configs", *args],
        capture_output=True, text=True, env=env, input=stdin, timeout=120,
    )


