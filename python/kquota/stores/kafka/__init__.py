"""Quota configuration in a compacted topic of the Kafka cluster the proxy fronts.

    kafka://HOST:PORT[,HOST:PORT...]/TOPIC     a cluster and a topic
    kafka:///TOPIC                             kquota proxy: the cluster of its --bootstrap-server

**Records.** One record per (entity, config key), mirroring KRaft's ``ClientQuotaRecord``: the key
is ``{"entity":[{"entityType":"user","entityName":"alice"}],"key":"producer_byte_rate"}``, the
value ``{"value":1024.0}``, a removal is a tombstone (see :mod:`.codec`). Keyed by entity and config
key, compaction keeps each entity's latest value of each key and, after ``delete.retention.ms``,
nothing of removed ones; two alters that set different keys of one entity both keep theirs,
as Kafka's own incremental alter does.

**Atomicity.** Kafka appends a record batch to a partition whole or not at all, and KRaft makes
a multi-entity alter atomic the same way (one batch in the metadata log). A kquota alter is one
record batch on the topic's single partition: the writer queues all its records with
``linger.ms`` far away and flushes them at once (``flush`` ignores linger), with batch limits
above :data:`MAX_ALTER_BYTES`, and refuses a larger alter before writing anything (as the
ZooKeeper store refuses one beyond ``jute.maxbuffer``). The idempotent producer keeps a retried
batch from being written twice. So an alter's records are contiguous in the log, never mixed
with another writer's (two processes altering at once: each key ends with one alter's value,
the later one's), and a follower never reads half of one: fetches and the high watermark stop
at batch boundaries, so a follower starting in the middle of a write sees all of it or none.
Every record carries the alter's id and record count in headers; a follower applies an alter's
records together once it has them all. Compaction can remove some of an old alter's records
(each superseded by a later one): a follower that meets such a shortened alter applies it to a
shadow state that it publishes only at the end of the log, where the state is the latest again
(see :mod:`.follower`). Transactions are not needed for any of this (tansu, the test broker,
and many Kafka-compatible brokers lack them), and a record per entity that carried the whole
alter would not help: compaction removes records by key, one at a time, whatever they carry.

**Reading.** Each store handle has one follower (a consumer assigned to the partition from its
start, no consumer group) that keeps the state in memory. ``describe`` asks the cluster for the
log end, then waits until the follower has read that far: a process reads its own writes and
everyone's before them. ``watch`` reports the entities of each applied alter; each second the
follower also asks for the log end, and while it is current it reports ``frozenset()`` (nothing
changed), which the :class:`~kquota.watcher.QuotaConfigWatcher` counts as a sync, so its
``config-sync-age-seconds`` stays near 1 s. A follower that loses the cluster keeps its state (a
proxy its quotas), reports the loss once, and its sync age grows; when the cluster answers again
it catches up from where it was and reports ``None`` (a full re-read).

**The topic** is created if missing: ``cleanup.policy=compact``, one partition (one order for all
alters), the cluster's default replication. An existing topic with more partitions or another
cleanup policy (``delete`` would drop quotas after ``retention.ms``) is refused, untouched.

A fleet's usage topic (``<store topic>.usage``, :mod:`kquota.proxy.fleet_usage`: one quota
across a fleet of proxies, ``kquota proxy --quota-scope fleet``) sits next to the store topic;
nothing here assumes the store topic is the only one.
"""

from kquota.stores.kafka.codec import ALTER_HEADER, COUNT_HEADER, CorruptRecord, decode_key, encode_key
from kquota.stores.kafka.store import MAX_ALTER_BYTES, KafkaConfigStore, fill_cluster, parse_url
from kquota.stores.kafka.topic import CLEANUP_POLICY, ensure_topic

__all__ = [
    "ALTER_HEADER",
    "CLEANUP_POLICY",
    "COUNT_HEADER",
    "MAX_ALTER_BYTES",
    "CorruptRecord",
    "KafkaConfigStore",
    "decode_key",
    "encode_key",
    "ensure_topic",
    "fill_cluster",
    "parse_url",
]
