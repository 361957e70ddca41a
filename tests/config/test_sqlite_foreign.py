"""A SQLite file that is not a kquota store is identified before anything is
written, refused with an error naming it, and left byte-identical (no -wal/-shm either); a
describe opens read-only."""

from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest
from store_helpers import run_cli

from kquota.stores import open_store
from kquota.stores.base import ConfigStoreError
from kquota.stores.sqlite import APPLICATION_ID, SQLiteConfigStore


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def siblings(path):
    return sorted(p for p in os.listdir(os.path.dirname(path)) if p != os.path.basename(path))


def foreign_db(path, app_id=0, wal=False):
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    if app_id:
        conn.execute(f"PRAGMA application_id = {app_id}")
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('alice')")
    conn.commit()
    conn.close()
    for suffix in ("-wal", "-shm"):
        assert not os.path.exists(path + suffix)


@pytest.mark.parametrize("kind", ["plain", "app-id", "wal-mode", "not-sqlite", "meta-lookalike"])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_foreign_file_is_refused_and_left_byte_identical(tmp_path, kind, read_only):
    path = str(tmp_path / "app.db")
    if kind == "plain":
        foreign_db(path)
    elif kind == "app-id":
        foreign_db(path, app_id=0x12345678)
    elif kind == "wal-mode":
        foreign_db(path, wal=True)
    elif kind == "not-sqlite":
        with open(path, "wb") as f:
            f.write(b"hello, world\n" * 50)
    else:
        # Tables named like ours, but not a kquota schema.
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE meta (k TEXT)")
        conn.execute("CREATE TABLE quota (x)")
        conn.execute("CREATE TABLE changes (y)")
        conn.commit()
        conn.close()
    before = digest(path)
    with pytest.raises(ConfigStoreError, match="is not a kquota store") as err:
        SQLiteConfigStore(path, read_only=read_only)
    assert path in str(err.value)
    assert digest(path) == before
    assert siblings(path) == []


@pytest.mark.process
def test_the_cli_describe_refuses_a_foreign_file_and_touches_nothing(tmp_path):
    path = str(tmp_path / "app.db")
    foreign_db(path)
    before = digest(path)
    for args in (["--describe"], ["--alter", "--add-config", "producer_byte_rate=10", "--entity-type", "users",
                                  "--entity-name", "a"]):
        r = run_cli("--store", "sqlite:///" + path, *args)
        assert r.returncode != 0
        assert "not a kquota store" in r.stderr and path in r.stderr
        assert "Traceback" not in r.stderr
    assert digest(path) == before
    assert siblings(path) == []


def test_new_stores_are_marked_and_old_unmarked_stores_adopted(tmp_path):
    path = str(tmp_path / "q.db")
    with SQLiteConfigStore(path) as s:
        s.alter([({"user": "a"}, {"producer_byte_rate": 10})])
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        # A store from before the mark: same tables, application_id 0.
        c.execute("PRAGMA application_id = 0")
    with SQLiteConfigStore(path) as s:
        assert len(s.describe()) == 1
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_read_only_open_creates_and_changes_nothing(tmp_path):
    missing = str(tmp_path / "missing.db")
    with pytest.raises(ConfigStoreError, match="no such file"):
        open_store("sqlite:///" + missing, read_only=True)
    assert os.listdir(tmp_path) == []
    path = str(tmp_path / "q.db")
    with SQLiteConfigStore(path) as s:
        s.alter([({"user": "a"}, {"producer_byte_rate": 10})])
    before = digest(path)
    ro = open_store("sqlite:///" + path, read_only=True)
    try:
        assert len(ro.describe()) == 1
        with pytest.raises(ConfigStoreError, match="read-only"):
            ro.alter([({"user": "b"}, {"producer_byte_rate": 10})])
    finally:
        ro.close()
    assert digest(path) == before
