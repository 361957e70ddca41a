"""Where ``--quotas`` comes from: a configuration file (``docs/pipeline.md``) or, when
the config stores are installed, a store URL."""

from __future__ import annotations

from typing import Any

from kquota.config_file import QuotaEntries, load_quota_config, quota_config_document
from kquota.shadow_marks import enforced_state


def load_quotas(source: str) -> QuotaEntries:
    """Validated quota entries from a file path, or from a config store URL (``scheme://...``)
    when ``kquota.stores`` is available."""
    if "://" in source:
        try:
            from kquota import stores  # type: ignore[attr-defined]
        except ImportError:
            stores = None
        if stores is not None:
            store = stores.open_store(source)
            try:
                described = store.describe_client_quotas() if hasattr(store, "describe_client_quotas") \
                    else store.describe()
            finally:
                close = getattr(store, "close", None)
                if close is not None:
                    close()
            # The enforced configuration: quotas marked shadow are not the store's quotas in force.
            return [(e, dict(kv)) for e, kv in enforced_state(dict(described)).items()]
    return load_quota_config(source)


def quotas_document(entries: QuotaEntries) -> dict[str, Any]:
    """The JSON document of ``entries``: what travels to Spark's Python workers."""
    return quota_config_document(entries)
