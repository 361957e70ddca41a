"""Durable quota configuration stores (``ConfigStore``): SQLite (default) and ZooKeeper.

>>> from kquota.stores import open_store
>>> store = open_store("sqlite:////tmp/quotas.db")           # doctest: +SKIP
>>> store.alter([({"user": "alice"}, {"producer_byte_rate": 1024})])   # doctest: +SKIP
>>> store.describe()                                         # doctest: +SKIP
{ClientQuotaEntity({'user': 'alice'}): {'producer_byte_rate': 1024.0}}
"""

from kquota.stores.base import ConfigStore, ConfigStoreError, StoreWatch
from kquota.stores.layout import entity_path, parse_entity_path
from kquota.sanitizer import desanitize, sanitize
from kquota.stores.url import STORE_ENV, StoreLocation, default_store_url, open_store, parse_store_url, sqlite_url
from kquota.validation import validate_alter

__all__ = [
    "STORE_ENV",
    "ConfigStore",
    "ConfigStoreError",
    "StoreLocation",
    "StoreWatch",
    "default_store_url",
    "desanitize",
    "entity_path",
    "open_store",
    "parse_entity_path",
    "parse_store_url",
    "sanitize",
    "sqlite_url",
    "validate_alter",
]
