"""What librdkafka tells only an ``error_cb``: a broker's refusal of the client's credentials
(or certificate). Its calls themselves then fail with a bare "Broker transport failure", which
would send a person looking for a network problem; the store reports the refusal instead."""

from __future__ import annotations

import threading
from typing import Any, Optional

from kquota.stores.base import ConfigStoreError


class ClientErrors:
    """The latest authentication failure reported to the clients' ``error_cb`` (librdkafka's
    ``_AUTHENTICATION``, and ``_SSL`` for a refused certificate)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._refusal: Optional[str] = None

    def error_cb(self, err: Any) -> None:
        """librdkafka's ``error_cb`` (called from whichever thread polls the client)."""
        name = str(err.name()) if hasattr(err, "name") else ""
        if name in ("_AUTHENTICATION", "_SSL"):
            with self._lock:
                self._refusal = f"{name.lstrip('_')}: {' '.join(str(err.str()).split())}"

    def refusal(self, client: Any = None) -> Optional[str]:
        """The authentication failure reported so far, if any (``client``'s queued callbacks are
        served first: a blocking call's failure can precede them)."""
        if client is not None and hasattr(client, "poll"):
            client.poll(0)
        with self._lock:
            return self._refusal

    def check(self, url: str, client: Any = None) -> None:
        """Raises the one-line error of a refused authentication, if there was one."""
        refusal = self.refusal(client)
        if refusal is not None:
            raise ConfigStoreError(
                f"store {url}: the cluster refused the store's credentials ({self.source}): {refusal}")
