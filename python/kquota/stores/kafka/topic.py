"""The store topic on the cluster: created if missing (compacted, one partition, the cluster's
default replication), refused with a clear error if it exists in another shape."""

from __future__ import annotations

from typing import Any, Optional

from kquota.stores.base import ConfigStoreError

#: The only cleanup policy a store topic may have: ``delete`` (or ``compact,delete``) would drop
#: quotas once they are older than ``retention.ms``.
CLEANUP_POLICY = "compact"


def ensure_topic(admin: Any, url: str, topic: str, timeout: float, create: bool,
                 cleanup_policy: str = CLEANUP_POLICY, config: Optional[dict[str, str]] = None) -> None:
    """Checks a one-partition topic with ``cleanup_policy`` (the store topic: ``compact``; a
    fleet's usage topic: ``delete``), creating it first with ``config`` if missing and ``create``;
    raises ``ConfigStoreError`` naming ``url`` if the cluster cannot be reached or the topic is unfit."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

    try:
        metadata = admin.list_topics(timeout=timeout)  # naming the topic would auto-create it on some brokers
    except KafkaException as e:
        raise ConfigStoreError(f"cannot reach the Kafka store {url}: {error_reason(e)} (within {timeout:g} s)") from None
    found = metadata.topics.get(topic)
    exists = found is not None and found.error is None
    if not exists:
        if not create:
            raise ConfigStoreError(f"store {url}: the topic {topic!r} does not exist (nothing was created)")
        new = NewTopic(topic, num_partitions=1, replication_factor=-1,
                       config={"cleanup.policy": cleanup_policy, **(config or {})})
        try:
            for future in admin.create_topics([new], request_timeout=timeout).values():
                future.result(timeout)
        except KafkaException as e:
            if _code_name(e) != "TOPIC_ALREADY_EXISTS":  # another process created it just now
                raise ConfigStoreError(f"store {url}: cannot create the topic {topic!r}: {error_reason(e)}") from None
        except Exception as e:  # noqa: BLE001 - a future's timeout
            raise ConfigStoreError(f"store {url}: cannot create the topic {topic!r}: {e or type(e).__name__}") from None
        else:
            return
        try:
            metadata = admin.list_topics(timeout=timeout)  # naming the topic would auto-create it on some brokers
        except KafkaException as e:
            raise ConfigStoreError(f"cannot reach the Kafka store {url}: {error_reason(e)}") from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise ConfigStoreError(f"store {url}: the topic {topic!r} was created but its metadata cannot be read")
    partitions = len(found.partitions)
    if partitions != 1:
        raise ConfigStoreError(
            f"store {url}: the topic {topic!r} has {partitions} partitions; a quota store topic has exactly one "
            "(its order is the order of alters). Use another topic name, kquota creates it."
        )
    try:
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=timeout)
        configs = next(iter(futures.values())).result(timeout)
    except KafkaException as e:
        raise ConfigStoreError(f"store {url}: cannot read the configs of topic {topic!r}: {error_reason(e)}") from None
    except Exception as e:  # noqa: BLE001 - a future's timeout
        raise ConfigStoreError(f"store {url}: cannot read the configs of topic {topic!r}: {e or type(e).__name__}") from None
    entry = configs.get("cleanup.policy")
    # Kafka always reports the policy; a broker that leaves a default out means its default,
    # which is "delete" in Kafka.
    policy = entry.value if entry is not None and entry.value is not None else "delete (the default)"
    if ",".join(sorted(p.strip() for p in policy.split(","))) != cleanup_policy:
        raise ConfigStoreError(
            f"store {url}: the topic {topic!r} has cleanup.policy={policy}; a quota store topic must have "
            f"cleanup.policy={cleanup_policy} only (with delete, quotas older than retention.ms would be lost). "
            f"Use another topic name (kquota creates it) or: kafka-configs --alter --entity-type topics "
            f"--entity-name {topic} --add-config cleanup.policy={cleanup_policy}"
        )


def _code_name(e: Exception) -> str:
    err: Any = e.args[0] if e.args else None
    return str(err.name()) if hasattr(err, "name") else ""


def error_reason(e: Exception) -> str:
    """A one-line reason from a ``KafkaException`` (``NAME: text``) or any other exception."""
    err: Any = e.args[0] if e.args else None
    if hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(e) or type(e).__name__
