"""Store URLs: ``sqlite:///abs/path``, ``sqlite://rel/path``, ``zookeeper://host:port[,host:port][/chroot]``,
``kafka://host:port[,host:port]/topic``."""

from __future__ import annotations

import os
from typing import Any, Optional

from kquota.stores.base import ConfigStore, ConfigStoreError

#: Environment variable naming the default store.
STORE_ENV = "KQUOTA_STORE"


def default_store_url() -> str:
    """``$KQUOTA_STORE``, else ``sqlite:///`` a file in the user's data directory."""
    url = os.environ.get(STORE_ENV, "").strip()
    if url:
        return url
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return "sqlite://" + os.path.abspath(os.path.join(base, "kquota", "quotas.db"))


def open_store(url: Optional[str] = None, **options: Any) -> ConfigStore:
    """Opens the store a URL names (``None``: :func:`default_store_url`).

    Raises ``ConfigStoreError`` naming the URL when it is malformed or the store is unreachable.
    ``options`` go to the store's constructor (``poll_interval`` for SQLite, ``timeout`` for
    ZooKeeper).
    """
    if url is None:
        url = default_store_url()
        if url.startswith("sqlite://") and STORE_ENV not in os.environ:
            os.makedirs(os.path.dirname(url[len("sqlite://"):]), exist_ok=True)
    if not isinstance(url, str):
        raise ConfigStoreError(f"a store URL must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigStoreError(f"invalid store URL {url!r}: expected sqlite:///path or zookeeper://host:port[/chroot]")
    scheme = scheme.lower()
    if scheme == "sqlite":
        if not rest:
            raise ConfigStoreError(f"invalid store URL {url!r}: no file path (sqlite:///path/to/file.db)")
        from kquota.stores.sqlite import SQLiteConfigStore

        return SQLiteConfigStore(rest, **options)
    if scheme in ("zookeeper", "zk"):
        hosts, slash, chroot = rest.partition("/")
        if not hosts:
            raise ConfigStoreError(f"invalid store URL {url!r}: no host (zookeeper://host:port[/chroot])")
        from kquota.stores.zookeeper import ZooKeeperConfigStore

        return ZooKeeperConfigStore(hosts, chroot=("/" + chroot) if slash and chroot else None, **options)
    if scheme == "kafka":
        from kquota.stores.kafka import KafkaConfigStore

        return KafkaConfigStore.from_url(url, **options)
    raise ConfigStoreError(f"invalid store URL {url!r}: unknown scheme {scheme!r} (expected sqlite, zookeeper or kafka)")
