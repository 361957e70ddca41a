"""The embedded default store: one SQLite file (WAL), safe for several processes.

Schema: ``quota(entity, key, value)`` keyed by the entity's Kafka-layout path
(``users/alice/clients/<default>``), ``meta(key, value)`` holding the change sequence number
``seq``, and ``changes(seq, entity)`` naming the entities each alter touched (``*`` when an
alter touched more than ``FULL_RESYNC_ENTITIES`` entities: watchers then re-read everything).

An alter is one ``BEGIN IMMEDIATE`` transaction (validate first, then write the values, bump
``seq``, log the change), so a reader or a process killed mid-way sees the old or the new state,
never a mix. Watchers wake on file events, check ``PRAGMA data_version``, then ``seq`` (one
indexed row read), and re-read only what changed.

A kquota store is marked with ``PRAGMA application_id`` (:data:`APPLICATION_ID`). An existing
file is identified from its header before anything is written: a file that is not a kquota store
is refused with an error naming it and left byte-identical (no tables, no WAL switch, no
``-wal``/``-shm`` files). Stores made before the mark existed (kquota's three tables, schema 1,
application_id 0) are recognized and marked on their first read-write open. ``read_only=True``
opens with SQLite's ``mode=ro`` and never creates or changes anything.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import urllib.parse
from typing import Any, Iterable, Optional

from kquota.entity import ClientQuotaEntity
from kquota.stores.base import ChangeCallback, ConfigStore, ConfigStoreError, ErrorCallback, QuotaState, StoreWatch, log_error
from kquota.stores.file_events import directory_events
from kquota.stores.layout import entity_path, parse_entity_path
from kquota.validation import validate_alter

SCHEMA_VERSION = 1
#: An alter touching more entities than this logs one "everything changed" row instead.
FULL_RESYNC_ENTITIES = 256
#: How many alters the change log keeps; a watcher further behind re-reads everything.
KEEP_CHANGES = 1000
#: How long a writer waits for another process's transaction (ms).
BUSY_TIMEOUT_MS = 10_000
_ALL = "*"
#: After a file event, how long a watch checks every ``FAST_CHECK_S`` at most (seconds) ...
FAST_S, FAST_CHECK_S = 0.5, 0.01
#: ... and then every ``poll_interval``, until this long after the event (seconds).
SETTLE_S = 2.0
#: With file events, the longest a watch sleeps between two checks (seconds).
IDLE_CHECK_S = 5.0
#: ``PRAGMA application_id`` of a kquota store ("kqta").
APPLICATION_ID = 0x6B717461
_HEADER = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS quota (
    entity TEXT NOT NULL, key TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (entity, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changes (seq INTEGER NOT NULL, entity TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS changes_seq ON changes (seq);
INSERT OR IGNORE INTO meta VALUES ('schema', 1), ('seq', 0), ('pruned_through', 0);
"""


def absolute_path(path: str) -> str:
    """``path`` made absolute (against the working directory) with one leading slash: POSIX keeps
    a leading ``//`` (implementation-defined; Linux reads it as ``/``), which would make the
    ``file:`` URI or the ``sqlite:`` URL built from it ambiguous."""
    out = os.path.abspath(path)
    return "/" + out.lstrip("/") if out.startswith("//") else out


def sqlite_url(path: str) -> str:
    """The canonical URL of a SQLite file: ``sqlite:///`` + the percent-encoded absolute path
    (see :mod:`kquota.stores.url`), which opens the same file from any working directory."""
    return "sqlite:///" + urllib.parse.quote(absolute_path(os.fspath(path)), safe="/:@+,=~")


class SQLiteConfigStore(ConfigStore):
    """Quota configuration in one SQLite file.

    Args:
        path: the database file (created with its tables if missing; its directory must exist).
        poll_interval: seconds between a watch's checks while a change settles (after a file
            event), or always where file events are unavailable (see ``_SQLiteWatch``).
        read_only: open with SQLite's ``mode=ro``: never create, mark or change the file
            (``describe`` and ``watch`` only; ``alter`` raises).
    """

    def __init__(self, path: str, poll_interval: float = 0.05, read_only: bool = False) -> None:
        self.path = os.fspath(path)
        # The canonical URL (sqlite:/// + the encoded absolute path): reopens this file from anywhere.
        self.url = sqlite_url(self.path)
        self.poll_interval = float(poll_interval)
        self.read_only = bool(read_only)
        self._lock = threading.Lock()
        self._identify()
        self._conn: Optional[sqlite3.Connection] = self._connect()
        try:
            if self.read_only:
                self._check_schema(self._conn)
            else:
                self._init_schema(self._conn)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ connections

    def _error(self, what: str, e: Exception) -> ConfigStoreError:
        return ConfigStoreError(f"store {self.url}: {what}: {e}")

    def _foreign(self, why: str) -> ConfigStoreError:
        return ConfigStoreError(
            f"{self.path} is not a kquota store ({why}); refusing to use it, the file was not modified"
        )

    def _identify(self) -> None:
        """Checks an existing file before anything opens it for writing: raises for anything
        that is not a kquota store (or one made before the application_id mark, which
        `_init_schema` then marks), and for a missing file in read-only mode."""
        try:
            with open(self.path, "rb") as f:
                header = f.read(100)
        except FileNotFoundError:
            if self.read_only:
                raise ConfigStoreError(f"store {self.url}: no such file (nothing was created)") from None
            return
        except OSError as e:
            raise self._error("cannot open the database file", e) from None
        if not header:
            if self.read_only:
                raise ConfigStoreError(f"store {self.url}: the file is empty, not a kquota store yet")
            return  # an empty file: becomes a new store
        if len(header) < 100 or not header.startswith(_HEADER):
            raise self._foreign("not an SQLite database")
        app_id = int.from_bytes(header[68:72], "big")
        if app_id == APPLICATION_ID:
            return
        if app_id != 0:
            raise self._foreign(f"SQLite application_id {app_id:#x}, a kquota store has {APPLICATION_ID:#x}")
        # application_id 0: a store from before the mark, or any other SQLite file. Look without
        # locks or journal files (immutable=1 reads the file as it is and writes nothing).
        try:
            probe = sqlite3.connect(self._uri("ro&immutable=1"), uri=True, check_same_thread=False)
        except sqlite3.Error as e:
            raise self._foreign(f"unreadable: {e}") from None
        try:
            tables = {r[0] for r in probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables and header[18] == 2:
                # A WAL database without tables: a store another process is creating (the WAL
                # switch comes first), or one killed at that moment. Nothing to damage.
                return
            row = None
            if "meta" in tables:
                try:
                    row = probe.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                except sqlite3.Error:
                    row = None
        except sqlite3.Error as e:
            raise self._foreign(f"unreadable: {e}") from None
        finally:
            probe.close()
        if row is not None and isinstance(row[0], int) and row[0] != SCHEMA_VERSION:
            # Another kquota version's store: say so (and still touch nothing).
            raise ConfigStoreError(f"store {self.url}: schema version {row[0]}, this kquota reads {SCHEMA_VERSION}")
        if not {"meta", "quota", "changes"} <= tables or row is None:
            raise self._foreign(f"its tables are {', '.join(sorted(tables)) or 'none'}")

    def _uri(self, mode: str) -> str:
        # file:// + a path with one leading slash: an empty authority (bare "file:" + "//var/..."
        # made "var" the authority: "invalid uri authority"); ?, #, % and spaces quoted.
        return "file://" + urllib.parse.quote(absolute_path(self.path), safe="/") + "?mode=" + mode

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.read_only:
                conn = sqlite3.connect(
                    self._uri("ro"), uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                    check_same_thread=False,
                )
            else:
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise self._error("cannot open the database file", e) from None
        if self.read_only:
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            except sqlite3.Error as e:
                conn.close()
                raise self._error("cannot open the database", e) from None
            return conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"cannot switch to WAL journal mode (got {mode})")
            # FULL: an acknowledged alter survives a power cut, not only a process crash.
            conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as e:
            conn.close()
            raise self._error("cannot open the database", e) from None
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        try:
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        except (sqlite3.Error, TypeError) as e:
            raise self._foreign(f"unreadable: {e}") from None
        if version != SCHEMA_VERSION:
            raise ConfigStoreError(f"store {self.url}: schema version {version}, this kquota reads {SCHEMA_VERSION}")

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                if app_id not in (0, APPLICATION_ID):
                    # Changed since it was identified: still not ours.
                    raise ConfigStoreError(f"{self.path} is not a kquota store (application_id {app_id:#x})")
                if app_id == 0:
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                # executescript() would commit first; one statement at a time keeps the lock.
                for statement in filter(None, (part.strip() for part in _SCHEMA.split(";"))):
                    conn.execute(statement)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        except sqlite3.Error as e:
            raise self._error("not a kquota store (or unreadable)", e) from None
        if version != SCHEMA_VERSION:
            raise ConfigStoreError(f"store {self.url}: schema version {version}, this kquota reads {SCHEMA_VERSION}")

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ConfigStoreError(f"store {self.url} is closed")
        return self._conn

    # ------------------------------------------------------------------ reads

    def describe(
        self,
        entities: Optional[Iterable[ClientQuotaEntity]] = None,
        on_error: Optional[ErrorCallback] = None,
    ) -> QuotaState:
        """Every configured entity, or only ``entities``; unreadable rows go to ``on_error``."""
        with self._lock:
            return _read_state(self._db(), self.url, entities, on_error or log_error)

    def sequence(self) -> int:
        """The current change sequence number (bumped by every alter)."""
        with self._lock:
            try:
                return int(self._db().execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])
            except sqlite3.Error as e:
                raise self._error("cannot read", e) from None

    # ------------------------------------------------------------------ writes

    def alter(self, entries: Iterable[Any]) -> None:
        """Validates, then applies every entry in one ``BEGIN IMMEDIATE`` transaction."""
        validated = validate_alter(entries, shadow_marks=True)
        if self.read_only:
            raise ConfigStoreError(f"store {self.url} was opened read-only")
        with self._lock:
            conn = self._db()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise self._error("cannot start a write transaction", e) from None
            try:
                paths = []
                for entity, ops in validated:
                    path = entity_path(entity)
                    paths.append(path)
                    removed = [(path, k) for k, v in ops.items() if v is None]
                    kept = [(path, k, v) for k, v in ops.items() if v is not None]
                    if removed:
                        conn.executemany("DELETE FROM quota WHERE entity = ? AND key = ?", removed)
                    if kept:
                        conn.executemany("INSERT OR REPLACE INTO quota (entity, key, value) VALUES (?, ?, ?)", kept)
                seq = conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'seq' RETURNING value").fetchone()[0]
                logged = [_ALL] if len(paths) > FULL_RESYNC_ENTITIES else paths
                conn.executemany("INSERT INTO changes (seq, entity) VALUES (?, ?)", [(seq, p) for p in logged])
                if seq > KEEP_CHANGES and seq % 64 == 0:
                    horizon = seq - KEEP_CHANGES
                    conn.execute("DELETE FROM changes WHERE seq <= ?", (horizon,))
                    conn.execute("UPDATE meta SET value = ? WHERE key = 'pruned_through'", (horizon,))
                conn.execute("COMMIT")
            except BaseException as e:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if isinstance(e, sqlite3.Error):
                    raise self._error("alter failed, nothing changed", e) from None
                raise

    # ------------------------------------------------------------------ watch

    def watch(self, on_change: ChangeCallback, on_error: Optional[ErrorCallback] = None) -> StoreWatch:
        """Follows the sequence number on a connection of its own, woken by file events."""
        return _SQLiteWatch(self, on_change, on_error or log_error)

    def close(self) -> None:
        """Closes the connection; safe to call more than once."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _read_state(
    conn: sqlite3.Connection,
    url: str,
    entities: Optional[Iterable[ClientQuotaEntity]],
    on_error: ErrorCallback,
) -> QuotaState:
    try:
        if entities is None:
            rows = conn.execute("SELECT entity, key, value FROM quota ORDER BY entity, key").fetchall()
        else:
            wanted = sorted({entity_path(ClientQuotaEntity(e)) for e in entities})
            rows = []
            for i in range(0, len(wanted), 500):
                chunk = wanted[i : i + 500]
                rows += conn.execute(
                    f"SELECT entity, key, value FROM quota WHERE entity IN ({','.join('?' * len(chunk))}) "
                    "ORDER BY entity, key",
                    chunk,
                ).fetchall()
    except sqlite3.Error as e:
        raise ConfigStoreError(f"store {url}: cannot read: {e}") from None
    out: QuotaState = {}
    bad: set[str] = set()
    for path, key, value in rows:
        if path in bad:
            continue
        try:
            entity = parse_entity_path(path)
        except ValueError as e:
            bad.add(path)
            on_error(f"store {url}: skipping row {path!r}: {e}", None)
            continue
        out.setdefault(entity, {})[key] = float(value)
    return out


class _SQLiteWatch(StoreWatch):
    """Follows ``seq`` on a connection of its own. ``PRAGMA data_version`` (a read of the
    wal-index header, about 3 us, changed by any other connection's commit) gates the ``seq``
    read; file events (:mod:`kquota.stores.file_events`) wake the thread, so an idle watch sleeps
    instead of waking every ``poll_interval`` (20 wake-ups a second cost 0.37% of a core)."""

    def __init__(self, store: SQLiteConfigStore, on_change: ChangeCallback, on_error: ErrorCallback) -> None:
        self._store = store
        self._on_change = on_change
        self._on_error = on_error
        self._stop = threading.Event()
        self._conn = store._connect()
        # Events first, then the baseline: a commit after the baseline raises an event.
        self._events = directory_events(os.path.dirname(os.path.abspath(store.path)))
        self._version = self._data_version()
        self._seq = self._read_seq()
        self._thread = threading.Thread(target=self._run, name=f"kquota-sqlite-watch:{store.path}", daemon=True)
        self._thread.start()

    def _data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _read_seq(self) -> int:
        return int(self._conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])

    def _check(self) -> None:
        version = self._data_version()
        if version != self._version:
            self._version = version
            self._poll()

    def _poll(self) -> None:
        seq = self._read_seq()
        if seq == self._seq:
            return
        # One read transaction: the change rows and the horizon come from the same snapshot.
        self._conn.execute("BEGIN")
        try:
            seq = self._read_seq()
            pruned = self._conn.execute("SELECT value FROM meta WHERE key = 'pruned_through'").fetchone()[0]
            paths = {r[0] for r in self._conn.execute("SELECT DISTINCT entity FROM changes WHERE seq > ?", (self._seq,))}
        finally:
            self._conn.execute("COMMIT")
        behind = pruned > self._seq  # rows this watch has not seen were pruned
        self._seq = seq
        if behind or _ALL in paths:
            self._on_change(None)
            return
        entities = set()
        for path in paths:
            try:
                entities.add(parse_entity_path(path))
            except ValueError as e:
                self._on_error(f"store {self._store.url}: skipping change of {path!r}: {e}", None)
        if entities:
            self._on_change(frozenset(entities))

    def _sleep(self, last_event: float, checks: int) -> tuple[float, int]:
        """Waits for the next check; returns the time of the last file event and how many checks
        followed it."""
        interval = self._store.poll_interval
        if self._events is None:
            self._stop.wait(interval)
            return last_event, checks
        # A commit write()s its frames (the event) before it publishes them in the wal-index, one
        # fsync later: after an event, check at 1, 2, 4, 8 ms then every 10 ms for FAST_S (an
        # fsync's usual time), every poll_interval until SETTLE_S, then sleep until the next
        # event (IDLE_CHECK_S at most: a safety net for a commit slower than SETTLE_S).
        since = time.monotonic() - last_event
        if since < FAST_S:
            timeout = min(interval, FAST_CHECK_S, 0.001 * (1 << min(checks, 16)))
        elif since < SETTLE_S:
            timeout = interval
        else:
            timeout = max(IDLE_CHECK_S, interval)
        if self._events.wait(timeout):
            return time.monotonic(), 0
        return last_event, checks + 1

    def _run(self) -> None:
        last_event, checks = time.monotonic(), 0
        try:
            while True:
                last_event, checks = self._sleep(last_event, checks)
                if self._stop.is_set():
                    return
                try:
                    self._check()
                except sqlite3.Error as e:
                    self._on_error(f"store {self._store.url}: watch cannot read: {e}", None)
                except Exception as e:  # noqa: BLE001 - a watch thread must survive its callback's errors
                    self._on_error(f"store {self._store.url}: watch callback failed: {e!r}", None)
        finally:
            self._conn.close()
            if self._events is not None:
                self._events.close()

    def stop(self) -> None:
        self._stop.set()
        if self._events is not None:
            self._events.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join()
