"""Kafka's config change notifications: ``/config/changes/config_change_NNNNNNNNNN`` nodes."""

from __future__ import annotations

import json
import time
from typing import Any, Optional

from kquota.entity import ClientQuotaEntity
from kquota.stores.layout import entity_path
from kquota.stores.zookeeper.codec import json_object

CHANGE_PREFIX = "config_change_"
#: Kafka's ``config.change.expiration.ms`` default for notifications: 15 minutes.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
#: At most this many notifications are looked at per purge (the oldest first).
PURGE_BATCH = 1000


def sequence_number(name: str) -> int:
    """The sequence number of a notification node's name; -1 for any other name."""
    try:
        return int(name[len(CHANGE_PREFIX) :]) if name.startswith(CHANGE_PREFIX) else -1
    except ValueError:
        return -1


def notification_data(entity: ClientQuotaEntity) -> bytes:
    """A version 2 notification naming ``entity``'s path, as Kafka's ``AdminZkClient`` writes it."""
    return json.dumps({"version": 2, "entity_path": entity_path(entity)}, separators=(",", ":")).encode()


def notification_entity_path(data: bytes) -> Optional[str]:
    """The ``entity_path`` a change notification names (version 2, or version 1 for clients).

    Raises ``ValueError`` for an unreadable notification.
    """
    doc = json_object(data, ValueError)
    version = doc.get("version")
    if version == 2:
        path = doc.get("entity_path")
        if not isinstance(path, str):
            raise ValueError("version 2 notification without a string 'entity_path'")
        return path
    if version == 1:
        kind, name = doc.get("entity_type"), doc.get("entity_name")
        if not isinstance(kind, str) or not isinstance(name, str):
            raise ValueError("version 1 notification without 'entity_type' and 'entity_name'")
        return f"{kind}/{name}"
    raise ValueError(f"unsupported notification version {version!r} (supported: 1 and 2)")


def purge_notifications(zk: Any, changes_path: str) -> None:
    """Deletes change notifications older than Kafka's 15 minutes (best effort)."""
    try:
        names = sorted(n for n in zk.get_children(changes_path) if n.startswith(CHANGE_PREFIX))
        horizon = time.time() * 1000 - CHANGE_EXPIRATION_MS
        for name in names[:PURGE_BATCH]:
            stat = zk.exists(f"{changes_path}/{name}")
            if stat is None:
                continue
            if stat.ctime >= horizon:
                break
            zk.delete(f"{changes_path}/{name}")
    except Exception:  # noqa: BLE001 - purging is housekeeping; another writer may race us
        pass
