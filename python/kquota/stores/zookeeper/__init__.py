"""Quota configuration in ZooKeeper, in Apache Kafka's own layout (via kazoo).

Nodes (names sanitized with Kafka's ``Sanitizer``; ``<default>`` for defaults)::

    /config/users/<user>                   {"version":1,"config":{"producer_byte_rate":"1024"}}
    /config/users/<user>/clients/<client>  same shape
    /config/clients/<client>               same shape
    /config/ips/<ip>                       {"version":1,"config":{"connection_creation_rate":"20"}}
    /config/topic-quotas/<topic>           {"version":1,"config":{"producer_byte_rate":"12000000"}}
    /config/changes/config_change_NNNNNNNNNN   {"version":2,"entity_path":"users/user1"}

Topic quotas (a kquota extension) live under ``/config/topic-quotas``, never in Kafka's own
``/config/topics/<topic>`` (topic configs a Kafka broker reads and validates); their notifications
name ``topic-quotas/<topic>``, which a Kafka broker ignores.

Values are strings, as Kafka's tools write them. Keys kquota does not know (e.g. SCRAM
credentials in a user node) are kept as they are. A removal deletes the key; a node left with an
empty config and no children is deleted as Kafka's ``AdminZkClient`` does (then an emptied
``clients`` container, then an empty user node).

An alter is one ZooKeeper ``multi`` transaction (node writes and change notifications together),
with optimistic version checks and a retry on conflict, so readers and a killed writer never see
half an alter. ZooKeeper refuses requests above ``jute.maxbuffer`` (1 MiB by default); an alter
whose transaction would exceed ``max_transaction_bytes`` is refused before anything is written
(split it, or raise ``jute.maxbuffer`` on the servers and this limit together).
"""

from kquota.stores.zookeeper.codec import CorruptNode, decode_config, encode_config, quota_values
from kquota.stores.zookeeper.notifications import CHANGE_EXPIRATION_MS, CHANGE_PREFIX, notification_entity_path
from kquota.stores.zookeeper.plan import NodeState, Op, plan
from kquota.stores.zookeeper.store import MAX_TRANSACTION_BYTES, ZooKeeperConfigStore

__all__ = [
    "CHANGE_EXPIRATION_MS",
    "CHANGE_PREFIX",
    "MAX_TRANSACTION_BYTES",
    "CorruptNode",
    "NodeState",
    "Op",
    "ZooKeeperConfigStore",
    "decode_config",
    "encode_config",
    "notification_entity_path",
    "plan",
    "quota_values",
]
