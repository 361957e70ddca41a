"""The ``ConfigStore`` interface: durable client quota configuration shared by processes.

A store holds ``entity -> {config key: value}`` (the shape of
``QuotaManager.describe_client_quotas``). ``alter`` takes the entries of
``QuotaManager.alter_client_quotas`` (a value of ``None`` removes a key), validates them exactly
as the kernel does and applies them in one transaction. ``watch`` reports which entities changed
so a :class:`kquota.watcher.QuotaConfigWatcher` can keep a ``QuotaManager`` in sync.
"""

from __future__ import annotations

import abc
import logging
import math
from typing import Any, Callable, Iterable, Optional

from kquota.entity import ClientQuotaEntity
from kquota.exceptions import KQuotaError

#: ``entity -> {config key: value}``
QuotaState = dict[ClientQuotaEntity, dict[str, float]]
#: Validated alter entries: ``(entity, {config key: value or None to remove})``.
AlterEntries = list[tuple[ClientQuotaEntity, dict[str, Optional[float]]]]
#: Called with the entities that changed, or ``None`` when anything may have changed (an empty set:
#: nothing changed, the store confirmed it is current).
ChangeCallback = Callable[[Optional[frozenset[ClientQuotaEntity]]], None]
#: Called with a one-line description of a problem the store skipped (e.g. a corrupt node) and
#: the entity it concerns (``None`` if no entity could be named).
ErrorCallback = Callable[[str, Optional[ClientQuotaEntity]], None]

log = logging.getLogger("kquota.stores")


class ConfigStoreError(KQuotaError):
    """A store cannot be opened, reached or written; the message names the store's URL."""


def log_error(message: str, entity: Optional[ClientQuotaEntity] = None) -> None:
    """The default ``ErrorCallback``: a logged warning."""
    log.warning("%s", message)


def diff_ops(current: dict[str, float], wanted: dict[str, float]) -> dict[str, Optional[float]]:
    """The ops that turn ``current`` into ``wanted`` (``None`` removes a key)."""
    ops: dict[str, Optional[float]] = {k: v for k, v in wanted.items() if current.get(k) != v}
    ops.update({k: None for k in current if k not in wanted})
    return ops


def format_value(value: float) -> str:
    """A config value as Kafka's tools store it: ``"1024"`` for whole numbers."""
    if math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(float(value))


class StoreWatch(abc.ABC):
    """A running watch; ``stop()`` ends it (idempotent)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stops reporting changes."""


class ConfigStore(abc.ABC):
    """Durable quota configuration: read all, atomic alter, watch for changes."""

    #: The store's canonical URL (``sqlite:////abs/path`` or ``zookeeper://host:port[/chroot]``).
    url: str

    @abc.abstractmethod
    def describe(
        self,
        entities: Optional[Iterable[ClientQuotaEntity]] = None,
        on_error: Optional[ErrorCallback] = None,
    ) -> QuotaState:
        """Every configured entity, or only ``entities`` (absent ones are left out).

        Entries the store cannot read (corrupt data) are reported to ``on_error`` with their
        entity (default: a logged warning) and left out.
        """

    @abc.abstractmethod
    def alter(self, entries: Iterable[Any]) -> None:
        """Validates then applies ``(entity, ops)`` entries in one transaction (all or nothing)."""

    @abc.abstractmethod
    def watch(self, on_change: ChangeCallback, on_error: Optional[ErrorCallback] = None) -> StoreWatch:
        """Calls ``on_change`` (from a background thread) after every change made after this call.

        ``on_change`` receives the changed entities, or ``None`` when the store cannot tell
        (everything must be re-read). It must return quickly.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Releases connections; safe to call more than once."""

    def __enter__(self) -> "ConfigStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
