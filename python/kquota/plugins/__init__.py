"""Shipped KIP-257 quota callbacks.

- :class:`QuotaGroupsCallback` — named groups of users and/or client-ids sharing one quota.
- :class:`PartitionProportionalCallback` — a user's total quota split across brokers by the
  partitions of its topics each broker leads.
- :class:`StorageAwareCallback` — produce held to a floor while a watched disk is low on space
  (:class:`PushingStorageAwareCallback`: the same, pushing changes instead of being polled).

Install one with ``QuotaManager(callback=..., callback_configs=...)`` (an instance or a dotted
path such as ``"kquota.plugins.QuotaGroupsCallback"``) or ``qm.set_callback(...)``.
"""

from kquota.plugins.partition_proportional import PartitionProportionalCallback
from kquota.plugins.quota_groups import QuotaGroupsCallback
from kquota.plugins.storage_aware import PushingStorageAwareCallback, StorageAwareCallback

__all__ = [
    "PartitionProportionalCallback",
    "PushingStorageAwareCallback",
    "QuotaGroupsCallback",
    "StorageAwareCallback",
]
