"""Store URLs: the one parser behind every ``--store``, ``$KQUOTA_STORE`` and :func:`open_store`.

Every command reads a store URL here (``kquota configs --alter``/``--describe``, ``kquota proxy
--store``, ``kquota pipeline --quotas`` (its ``scheme://`` values; a plain path there is a quota
file), :class:`kquota.watcher.QuotaConfigWatcher` through the
store it is given, and the Python API :func:`open_store`), so each form means the same file
everywhere. The SQLite forms follow SQLAlchemy's convention:

==================================  =============================================================
``sqlite:///quotas.db``             ``quotas.db`` relative to the working directory
``sqlite:///data/quotas.db``        ``data/quotas.db`` relative to the working directory
``sqlite:////var/lib/kquota/q.db``  the absolute path ``/var/lib/kquota/q.db`` (four slashes)
``sqlite:///~/q.db``                ``q.db`` in the user's home directory (``~user`` too)
``sqlite:///my%20quotas.db``        percent-decoded: the file ``my quotas.db``
``/var/lib/kquota/q.db``            a plain path: a SQLite file, absolute ...
``quotas.db``, ``~/q.db``           ... relative to the working directory, or under ``~``
``zookeeper://h1:2181,h2:2181/kq``  a ZooKeeper ensemble, optional chroot (``zk://`` too)
``kafka://h1:9092,h2:9092/topic``   a compacted topic on a Kafka cluster (docs/kafka-store.md);
                                    ``kafka:///topic`` only where a cluster is known (kquota proxy)
==================================  =============================================================

Percent-decoding: in a ``sqlite:`` URL the path is percent-decoded as UTF-8 (RFC 3986): ``%25`` is
``%``, ``%23`` is ``#``, ``%3F`` is ``?``, ``%20`` a space (a literal space is also accepted). A
``?`` or ``#`` left unencoded would start a URL query or fragment, and kquota takes no URL
parameters, so it is refused with a message naming ``%3F`` / ``%23``; so is a ``%`` not followed
by two hex digits, and ``%00``. A plain path is taken literally: spaces, ``#``, ``?`` and ``%`` are
part of the file name and nothing is decoded.

``~`` or ``~user`` opening the path (plain or in a URL) is the home directory, as in a shell; write
``./~`` for a directory named ``~``. A string is a URL when it begins with a scheme and ``://``
(``[A-Za-z][A-Za-z0-9+.-]*://``); anything else is a plain path (write ``./`` in front of a file
name that looks like a URL).

Refused, with a one-line :class:`ConfigStoreError`: ``sqlite://`` and ``sqlite:///`` (no file:
SQLAlchemy's in-memory database would not outlive the process), ``sqlite:///:memory:``,
``sqlite://host/path`` (SQLite has no host; SQLAlchemy refuses it too), ``sqlite:path`` without
``//``, unknown schemes, and ``sqlite:///X`` whose relative ``X`` does not exist while ``/X`` does
(most likely written for kquota's earlier convention, where ``sqlite:///X`` was absolute: the
error names both paths; ``sqlite:///./X`` says "relative, I know").

A store reports its canonical URL (``store.url``): ``sqlite:///`` followed by the percent-encoded
absolute path (:func:`sqlite_url`), which opens the same file from any working directory.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Optional

from kquota.stores.base import ConfigStore, ConfigStoreError
from kquota.stores.sqlite import SQLiteConfigStore, absolute_path as _absolute, sqlite_url

#: Environment variable naming the default store.
STORE_ENV = "KQUOTA_STORE"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_FORMS = ("sqlite:///relative.db, sqlite:////absolute/path.db, a plain path, zookeeper://host:port[/chroot] "
          "or kafka://host:port/topic")


@dataclass(frozen=True)
class StoreLocation:
    """Where a store URL points: ``kind`` ``"sqlite"`` with an absolute ``path``,
    ``"zookeeper"`` with ``hosts`` and ``chroot``, or ``"kafka"`` with ``hosts`` (``None`` for
    ``kafka:///topic``). ``url`` is the text as given."""

    url: str
    kind: str
    path: Optional[str] = None
    hosts: Optional[str] = None
    chroot: Optional[str] = None


def default_store_url() -> str:
    """``$KQUOTA_STORE``, else the URL of ``kquota/quotas.db`` in the user's data directory
    (``$XDG_DATA_HOME``, else ``~/.local/share``)."""
    url = os.environ.get(STORE_ENV, "").strip()
    if url:
        return url
    return sqlite_url(_default_path())


def _default_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "kquota", "quotas.db")


def _home(url: str, path: str) -> str:
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        raise ConfigStoreError(f"invalid store URL {url!r}: cannot expand {path.split('/', 1)[0]!r} (no such user)")
    return expanded


def _file_name(url: str, path: str) -> str:
    """``path`` if SQLite can open a file by it: no NUL, and UTF-8 (SQLite's file names are)."""
    if "\x00" in path:
        raise ConfigStoreError(f"invalid store path {url!r}: a NUL character cannot be in a file name")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigStoreError(f"invalid store path {url!r}: not encodable as UTF-8 (a lone surrogate)") from None
    return path


def parse_store_url(url: str) -> StoreLocation:
    """Parses a store URL or plain path (the forms of this module's docstring); raises
    ``ConfigStoreError`` with a one-line message for anything else."""
    if not isinstance(url, str):
        raise ConfigStoreError(f"a store URL must be a str, got {type(url).__name__}")
    if not url.strip():
        raise ConfigStoreError(f"invalid store URL {url!r}: empty (expected {_FORMS})")
    m = _SCHEME.match(url)
    if m is None:
        head = url.split(":", 1)[0].lower()
        if ":" in url and head in ("sqlite", "zookeeper", "zk"):
            raise ConfigStoreError(f"invalid store URL {url!r}: expected {head}:// (e.g. {_FORMS})")
        return StoreLocation(url, "sqlite", path=_absolute(_home(url, _file_name(url, url))))
    scheme, rest = m.group(1).lower(), url[m.end():]
    if scheme == "sqlite":
        return StoreLocation(url, "sqlite", path=_sqlite_path(url, rest))
    if scheme in ("zookeeper", "zk"):
        hosts, slash, chroot = rest.partition("/")
        if not hosts:
            raise ConfigStoreError(f"invalid store URL {url!r}: no host (zookeeper://host:port[/chroot])")
        return StoreLocation(url, "zookeeper", hosts=hosts, chroot=("/" + chroot) if slash and chroot else None)
    if scheme == "kafka":
        # Checked and taken apart by the Kafka store itself (kquota.stores.kafka.parse_url).
        return StoreLocation(url, "kafka", hosts=rest.partition("/")[0] or None)
    raise ConfigStoreError(f"invalid store URL {url!r}: unknown scheme {scheme!r} (expected {_FORMS})")


def _sqlite_path(url: str, rest: str) -> str:
    host, slash, encoded = rest.partition("/")
    if host:
        raise ConfigStoreError(
            f"invalid store URL {url!r}: a sqlite URL has no host ({host!r}); write sqlite:///{rest} for "
            f"{rest} relative to the working directory or sqlite:////{rest} for /{rest}")
    if not encoded:
        raise ConfigStoreError(f"invalid store URL {url!r}: no file path (sqlite:///relative.db or "
                               "sqlite:////absolute/path.db)")
    for char, code, part in (("?", "%3F", "query"), ("#", "%23", "fragment")):
        if char in encoded:
            raise ConfigStoreError(f"invalid store URL {url!r}: {char!r} would start a URL {part} (kquota takes "
                                   f"no URL parameters); write {code} for a {char!r} in the file name")
    if _BAD_PERCENT.search(encoded):
        raise ConfigStoreError(f"invalid store URL {url!r}: '%' must start a %XX escape; write %25 for a '%' "
                               "in the file name")
    try:
        path = urllib.parse.unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        raise ConfigStoreError(f"invalid store URL {url!r}: its %XX escapes are not UTF-8") from None
    if "\x00" in path:
        raise ConfigStoreError(f"invalid store URL {url!r}: %00 (a NUL byte) cannot be in a file name")
    if path == ":memory:":
        raise ConfigStoreError(f"invalid store URL {url!r}: an in-memory database cannot be a store (it ends "
                               "with the process)")
    path = _home(url, path)
    absolute = _absolute(path)
    if not os.path.isabs(path) and not path.startswith("./") and not os.path.lexists(absolute):
        rooted = _absolute("/" + path)
        if os.path.exists(rooted):
            raise ConfigStoreError(
                f"store {url}: sqlite:/// is followed by a path relative to the working directory "
                f"(SQLAlchemy's convention): {absolute} does not exist but {rooted} does; write "
                f"{sqlite_url(rooted)} for that file, or sqlite:///./{encoded} for a new one here")
    return absolute


def _check_folder(url: str, path: str) -> None:
    """A new SQLite file needs its folder: SQLite's own error ("unable to open database file")
    names neither, and ``sqlite:///data/x.db`` is relative (as in SQLAlchemy), which is easy to
    mistake for ``/data/x.db``."""
    folder = os.path.dirname(path)
    if os.path.isdir(folder):
        return
    error = f"store {url}: cannot create {path}: no folder {folder}"
    if url[:10].lower() == "sqlite:///" and url[10:11] not in ("/", "~"):
        error += (f" (sqlite:///{url[10:]} is relative to the working directory {os.getcwd()}; an absolute "
                  f"path takes four slashes: sqlite:////{url[10:]})")
    raise ConfigStoreError(error)


def open_store(url: Optional[str] = None, **options: Any) -> ConfigStore:
    """Opens the store a URL or plain path names (the forms of :mod:`kquota.stores.url`;
    ``None``: :func:`default_store_url`, whose directory is created on first use).

    Raises ``ConfigStoreError`` naming the URL when it is malformed or the store is unreachable.
    ``options`` go to the store's constructor (``poll_interval`` and ``read_only`` for SQLite,
    ``timeout`` and ``read_only`` for ZooKeeper).
    """
    if url is None:
        url = default_store_url()
        if STORE_ENV not in os.environ:
            os.makedirs(os.path.dirname(_default_path()), exist_ok=True)
    where = parse_store_url(url)
    if where.kind == "sqlite":
        assert where.path is not None
        if not options.get("read_only"):
            _check_folder(url, where.path)
        return SQLiteConfigStore(where.path, **options)
    if where.kind == "kafka":
        from kquota.stores.kafka import KafkaConfigStore

        return KafkaConfigStore.from_url(url, **options)
    from kquota.stores.zookeeper import ZooKeeperConfigStore

    assert where.hosts is not None
    return ZooKeeperConfigStore(where.hosts, chroot=where.chroot, **options)
