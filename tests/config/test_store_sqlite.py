"""The SQLite store: URLs, bad files, change log, multi-process atomicity (kill -9)."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kquota import ClientQuotaEntity
from kquota.stores import ConfigStoreError, default_store_url, open_store
from kquota.stores import sqlite as sqlite_store
from waiting import wait_until

pytestmark = pytest.mark.process

E = ClientQuotaEntity


def test_url_forms(tmp_path, monkeypatch):
    s = open_store("sqlite:///" + str(tmp_path / "a.db"))
    assert s.url == "sqlite:///" + str(tmp_path / "a.db") and s.url.startswith("sqlite:////")
    s.close()
    monkeypatch.chdir(tmp_path)
    s = open_store("sqlite:///rel.db")  # SQLAlchemy's convention: relative to the working directory
    assert os.path.exists(tmp_path / "rel.db") and s.url == "sqlite:///" + str(tmp_path / "rel.db")
    s.close()
    monkeypatch.setenv("KQUOTA_STORE", "sqlite:///x/y.db")
    assert default_store_url() == "sqlite:///x/y.db"
    monkeypatch.delenv("KQUOTA_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_store_url() == "sqlite:///" + str(tmp_path / "data" / "kquota" / "quotas.db")
    s = open_store()  # the default location is created on first use
    s.alter([({"user": "a"}, {"producer_byte_rate": 1})])
    s.close()
    assert os.path.exists(tmp_path / "data" / "kquota" / "quotas.db")


@pytest.mark.parametrize("url", ["", "sqlite://", "sqlite:///", "sqlite://host/q.db", "sqlite:q.db", "sqlite:///q.db?mode=ro",
                                 "sqlite:///q#1.db", "sqlite:///100%.db", "sqlite:///%ff.db", "sqlite:///a%00.db",
                                 "sqlite:///:memory:", "mysql://x/y", "zookeeper://", 42, "a\x00b.db", "\udc80.db"])
def test_bad_urls(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigStoreError) as e:
        open_store(url)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_unopenable_files_name_the_url(tmp_path):
    with pytest.raises(ConfigStoreError, match="nonexistent-dir/q.db"):
        open_store("sqlite:///nonexistent-dir/q.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 500)
    with pytest.raises(ConfigStoreError, match=str(junk)):
        open_store("sqlite:///" + str(junk))
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER)")
    conn.execute("INSERT INTO meta VALUES ('schema', 99)")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigStoreError, match="schema version 99"):
        open_store("sqlite:///" + str(other))


def test_wal_mode_and_sequence(tmp_path):
    s = open_store("sqlite:///" + str(tmp_path / "q.db"))
    assert s._db().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert s.sequence() == 0
    s.alter([({"user": "a"}, {"producer_byte_rate": 1})])
    s.alter([({"user": "b"}, {"producer_byte_rate": 1})])
    assert s.sequence() == 2
    s.close()


def test_corrupt_rows_are_reported_and_skipped(tmp_path):
    s = open_store("sqlite:///" + str(tmp_path / "q.db"))
    s.alter([({"user": "a"}, {"producer_byte_rate": 1})])
    s._db().execute("INSERT INTO quota VALUES ('topics/t', 'producer_byte_rate', 5)")
    errors = []
    assert s.describe(on_error=lambda m, e: errors.append(m)) == {E({"user": "a"}): {"producer_byte_rate": 1.0}}
    assert len(errors) == 1 and "topics/t" in errors[0]
    s.close()


def test_large_alter_tells_watchers_to_resync(tmp_path):
    s = open_store("sqlite:///" + str(tmp_path / "q.db"), poll_interval=0.01)
    got = []
    done = threading.Event()
    w = s.watch(lambda ents: (got.append(ents), done.set()))
    try:
        s.alter([({"user": f"u{i}"}, {"producer_byte_rate": 1}) for i in range(sqlite_store.FULL_RESYNC_ENTITIES + 1)])
        assert done.wait(20)
        assert got[0] is None
    finally:
        w.stop()
        s.close()


def test_pruned_change_log_forces_a_resync(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "KEEP_CHANGES", 10)
    monkeypatch.setattr(sqlite_store, "directory_events", lambda d: None)  # only this test's _poll() calls
    s = open_store("sqlite:///" + str(tmp_path / "q.db"), poll_interval=3600)
    got = []
    w = s.watch(got.append)
    try:
        for i in range(130):  # prunes at seq 64 and 128
            s.alter([({"user": f"u{i}"}, {"producer_byte_rate": 1})])
        w._poll()  # the watch fell behind the pruned horizon: everything must be re-read
        assert got == [None]
        assert s._db().execute("SELECT count(*) FROM changes").fetchone()[0] < 130
        s.alter([({"user": "last"}, {"producer_byte_rate": 1})])
        w._poll()
        assert got[1] == frozenset({E({"user": "last"})})
    finally:
        w.stop()
        s.close()


def test_data_version_changes_with_other_connections_commits_only(tmp_path):
    """What the watch relies on: PRAGMA data_version moves when another connection (this process
    or another) commits, not for the connection's own commits nor for reads."""
    s = open_store("sqlite:///" + str(tmp_path / "q.db"))
    watcher = s._connect()
    try:
        def version():
            return watcher.execute("PRAGMA data_version").fetchone()[0]

        v = version()
        watcher.execute("SELECT * FROM quota").fetchall()
        watcher.execute("BEGIN IMMEDIATE")
        watcher.execute("UPDATE meta SET value = value WHERE key = 'schema'")
        watcher.execute("COMMIT")
        assert version() == v
        s.alter([({"user": "a"}, {"producer_byte_rate": 1})])
        assert version() != v
        v = version()
        subprocess.run([sys.executable, "-c", WRITER, s.url, "1"], input="\n", text=True, capture_output=True, check=True,
                       timeout=60)
        assert version() != v
    finally:
        watcher.close()
        s.close()


def test_an_idle_watch_sleeps_until_a_commit_wakes_it(tmp_path, monkeypatch):
    """No wake-ups while nothing changes (not one per poll_interval), and a commit from another
    process is seen through the file event, long before the idle safety check."""
    if sqlite_store.directory_events(str(tmp_path)) is None:
        pytest.skip("no inotify on this platform: the watch polls")
    checks = []
    real = sqlite_store._SQLiteWatch._check
    monkeypatch.setattr(sqlite_store._SQLiteWatch, "_check", lambda self: (checks.append(1), real(self)))
    s = open_store("sqlite:///" + str(tmp_path / "q.db"), poll_interval=0.01)
    got = threading.Event()
    w = s.watch(lambda ents: got.set())
    try:
        time.sleep(sqlite_store.SETTLE_S + 0.5)  # the span under test: past it the watch goes idle
        checks.clear()
        time.sleep(1.0)  # the measured span: a quiet second
        assert checks == []  # polling every 10 ms would have checked about 100 times
        subprocess.run([sys.executable, "-c", WRITER, s.url, "1"], input="\n", text=True, capture_output=True, check=True,
                       timeout=60)
        assert got.wait(sqlite_store.IDLE_CHECK_S / 2)
        assert 0 < len(checks) < 200
    finally:
        w.stop()
        s.close()


WRITER = textwrap.dedent("""
    import sys
    from kquota.stores import open_store
    s = open_store(sys.argv[1])
    n = int(sys.argv[2])
    print("ready", flush=True)
    sys.stdin.readline()
    s.alter([({"user": f"user-{i}", "client-id": f"c{i % 7}"}, {"producer_byte_rate": i + 1, "consumer_byte_rate": 2 * i + 1})
             for i in range(n)])
    print("done", flush=True)
""")


def _start_writer(url, n):
    p = subprocess.Popen([sys.executable, "-c", WRITER, url, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "ready"
    p.stdin.write("go\n")
    p.stdin.flush()
    return p


def _wal_size(path):
    try:
        return os.path.getsize(str(path) + "-wal")
    except OSError:
        return 0


def test_kill_9_mid_alter_leaves_old_or_new_state(tmp_path):
    db = tmp_path / "q.db"
    url = "sqlite:///" + str(db)
    s = open_store(url)
    s.alter([({"user": "user-0", "client-id": "c0"}, {"producer_byte_rate": 999}), ({"user": "keep"}, {"producer_byte_rate": 5})])
    old = s.describe()
    s.close()
    n = 50_000
    new = dict(old)
    for i in range(n):
        new[E({"user": f"user-{i}", "client-id": f"c{i % 7}"})] = {"producer_byte_rate": float(i + 1),
                                                                 "consumer_byte_rate": float(2 * i + 1)}
    # 1) killed while the transaction is being written: the WAL grows by the spilled pages of the
    #    uncommitted transaction; kill as soon as it has grown by 256 KiB.
    base = _wal_size(db)
    p = _start_writer(url, n)
    wait_until(lambda: _wal_size(db) >= base + 256 * 1024 or p.poll() is not None, 120, 0.002)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    out = p.stdout.read()
    reader = open_store(url)
    state = reader.describe()
    assert state == old or state == new, f"mixed state: {len(state)} entities"
    if "done" not in out:
        assert state == old  # killed before alter() returned and before commit: nothing applied
    # 2) a later alter and reader still work on the same file (the aborted transaction was
    #    rolled back from the WAL on the next open).
    reader.alter([({"user": "keep"}, {"producer_byte_rate": 6})])
    assert reader.describe()[E({"user": "keep"})] == {"producer_byte_rate": 6.0}
    reader.close()


def test_kill_9_at_any_moment_never_mixes(tmp_path):
    db = tmp_path / "q.db"
    url = "sqlite:///" + str(db)
    s = open_store(url)
    s.alter([({"user": "keep"}, {"producer_byte_rate": 5})])
    old = s.describe()
    n = 20_000
    new = dict(old)
    for i in range(n):
        new[E({"user": f"user-{i}", "client-id": f"c{i % 7}"})] = {"producer_byte_rate": float(i + 1),
                                                                 "consumer_byte_rate": float(2 * i + 1)}
    for delay in (0.1, 0.6, 1.2):
        p = _start_writer(url, n)
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        state = s.describe()
        assert state == old or state == new, f"mixed state after a kill at {delay} s: {len(state)} entities"
        if state == new:
            break
    s.close()
