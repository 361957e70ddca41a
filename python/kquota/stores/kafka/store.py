"""``KafkaConfigStore``: the topic check, the alter as one record batch, reads through the follower."""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any, Iterable, Mapping, Optional

from kquota.entity import ClientQuotaEntity, topic_name_error
from kquota.exceptions import KQuotaError
from kquota.stores.base import ChangeCallback, ConfigStore, ConfigStoreError, ErrorCallback, QuotaState, StoreWatch, log_error
from kquota.stores.kafka.codec import alter_headers, batch_bytes, encode_alter, new_alter_id
from kquota.stores.kafka.follower import Follower
from kquota.stores.kafka.security import librdkafka_security
from kquota.stores.kafka.client_errors import ClientErrors
from kquota.stores.kafka.topic import error_reason, ensure_topic
from kquota.validation import validate_alter

#: The largest alter written (bytes of its record batch): below the producer's and the topic's
#: default ``message.max.bytes`` (1,000,000 and 1,048,588), so an alter is always one batch.
MAX_ALTER_BYTES = 900_000
#: How long a describe waits for the follower to read the topic up to its end (seconds).
CATCH_UP_TIMEOUT_S = 30.0
_LINGER_MS = 60_000

#: librdkafka's own log lines go here; kquota reports the problems that matter itself (a lost
#: cluster once, with the store's URL), so they are kept out of the logs unless asked for.
_client_log = logging.getLogger("kquota.stores.kafka.client")
_client_log.addHandler(logging.NullHandler())
_client_log.propagate = False


def parse_url(url: str) -> tuple[Optional[str], str]:
    """``kafka://HOST:PORT[,HOST:PORT...]/TOPIC`` -> (hosts or ``None`` for ``kafka:///TOPIC``, topic)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "kafka":
        raise ConfigStoreError(f"invalid store URL {url!r}: expected kafka://[HOST:PORT]/TOPIC")
    hosts, slash, topic = rest.partition("/")
    if not slash or not topic:
        raise ConfigStoreError(f"invalid store URL {url!r}: no topic (kafka://[HOST:PORT]/TOPIC)")
    problem = topic_name_error(topic)
    if problem:
        raise ConfigStoreError(f"invalid store URL {url[:300]!r}: not a valid Kafka topic name: "
                               f"{problem.removeprefix('Topic name is invalid: ')}")
    for host in filter(None, hosts.split(",")):
        name, colon, port = host.rpartition(":")
        if not colon or not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigStoreError(f"invalid store URL {url!r}: {host!r} is not HOST:PORT")
    return hosts or None, topic


def fill_cluster(url: Optional[str], bootstrap: str) -> Optional[str]:
    """A ``kafka:///TOPIC`` URL with ``bootstrap`` as its cluster (what ``kquota proxy --store
    kafka:///TOPIC`` means); any other URL, or ``None``, as it is."""
    if url is None or not url.lower().startswith("kafka:///"):
        return url
    return f"kafka://{bootstrap}/{url[len('kafka:///'):]}"


class KafkaConfigStore(ConfigStore):
    """Quota configuration in a compacted topic of a Kafka cluster (see :mod:`kquota.stores.kafka`).

    Args:
        hosts: the cluster's bootstrap servers, ``HOST:PORT[,HOST:PORT...]``.
        topic: the store topic (created compacted with one partition if missing).
        timeout: seconds to wait for the cluster on open, for a write and for a log end query.
        read_only: ``alter`` raises; nothing is created (``describe`` and ``watch`` only).
        max_alter_bytes: the largest alter (its record batch) written; a larger one is refused.
        security: Kafka client properties of the store's connections on a secured cluster
            (``security.protocol``, ``ssl.truststore.*``, ``ssl.keystore.*``,
            ``ssl.endpoint.identification.algorithm``, ``sasl.mechanism=PLAIN``,
            ``sasl.jaas.config``), read from ``security_source`` (named in errors).
    """

    def __init__(
        self, hosts: str, topic: str, timeout: float = 5.0, read_only: bool = False,
        max_alter_bytes: int = MAX_ALTER_BYTES, security: Optional[Mapping[str, str]] = None,
        security_source: str = "the store's client properties",
    ) -> None:
        self.hosts, self.topic = hosts, topic
        try:
            #: librdkafka's settings for the cluster's security (the fleet's clients use them too).
            self.client_security = librdkafka_security(security, security_source)
        except KQuotaError as e:
            raise ConfigStoreError(f"store kafka://{hosts}/{topic}: {e}") from None
        self.url = f"kafka://{hosts}/{topic}"
        self.timeout = float(timeout)
        self.read_only = bool(read_only)
        self.max_alter_bytes = int(max_alter_bytes)
        try:
            from confluent_kafka.admin import AdminClient
        except ImportError as e:
            raise ConfigStoreError(
                f"store {self.url}: the Kafka store needs confluent-kafka (pip install 'kquota[kafka]'): {e}"
            ) from None
        self._closed = False
        self._lock = threading.Lock()  # one alter at a time per handle: one batch each
        self._follower: Optional[Follower] = None
        self._producer: Any = None
        self._errors = ClientErrors(security_source)
        self._admin = AdminClient(self._client_config("admin"))
        try:
            ensure_topic(self._admin, self.url, topic, self.timeout, create=not self.read_only)
        except ConfigStoreError:
            self._errors.check(self.url, self._admin)
            raise

    @classmethod
    def from_url(cls, url: str, **options: Any) -> "KafkaConfigStore":
        """Opens ``kafka://HOST:PORT/TOPIC`` (``kafka:///TOPIC`` needs a cluster: see :func:`fill_cluster`)."""
        hosts, topic = parse_url(url)
        if hosts is None:
            raise ConfigStoreError(
                f"store URL {url!r} names no cluster: use kafka://HOST:PORT/{topic} "
                "(only kquota proxy fills in its --bootstrap-server for kafka:///TOPIC)"
            )
        return cls(hosts, topic, **options)

    def _client_config(self, role: str, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.hosts,
            "client.id": f"kquota-store-{role}",
            "logger": _client_log,
            # A cluster that comes back is found within a second, not librdkafka's default 10 s.
            "reconnect.backoff.max.ms": 1000,
            # A refused password is told only here: the calls fail with a transport failure.
            "error_cb": self._errors.error_cb,
            **self.client_security,
            **extra,
        }

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigStoreError(f"store {self.url} is closed")

    # ------------------------------------------------------------------ reads

    def _follow(self) -> Follower:
        with self._lock:
            self._check_open()
            if self._follower is None:
                from confluent_kafka import Consumer

                consumer = Consumer(self._client_config(
                    "follower",
                    **{
                        "group.id": f"kquota-store-{uuid.uuid4().hex}",  # assigned, never joined or committed
                        "enable.auto.commit": False,
                        "enable.partition.eof": True,
                        "auto.offset.reset": "earliest",
                        "fetch.wait.max.ms": 200,  # bounds how late a change is seen where fetches do not wake
                        # Bounded prefetch (librdkafka's default is 64 MiB per partition).
                        "queued.max.messages.kbytes": 8192,
                        "fetch.max.bytes": 4 * 1024 * 1024,
                        # The follower's heartbeat notices a lost cluster; librdkafka's own
                        # error events (an idle connection closed...) are only logged.
                        "error_cb": _client_error,
                    },
                ))
                self._follower = Follower(consumer, self.topic, self.url, self._log_end)
            return self._follower

    def describe(
        self,
        entities: Optional[Iterable[ClientQuotaEntity]] = None,
        on_error: Optional[ErrorCallback] = None,
    ) -> QuotaState:
        """Every configured entity (or only ``entities``) as of the topic's end now: asks the
        cluster for the log end, then waits until the follower has read that far."""
        follower = self._follow()
        end = self._log_end(self.timeout)
        return follower.read(entities, on_error or log_error, end, max(self.timeout, CATCH_UP_TIMEOUT_S))

    def _log_end(self, timeout: float) -> int:
        """The log end offset as the cluster reports it now (through the admin client: a consumer
        cannot be asked while another thread polls it)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        try:
            futures = self._admin.list_offsets({TopicPartition(self.topic, 0): OffsetSpec.latest()},
                                               request_timeout=timeout)
            return int(next(iter(futures.values())).result(timeout).offset)
        except Exception as e:  # noqa: BLE001 - KafkaException or a future's timeout
            self._errors.check(self.url, self._admin)
            raise ConfigStoreError(f"cannot reach the Kafka store {self.url}: {error_reason(e)}") from None

    # ------------------------------------------------------------------ writes

    def alter(self, entries: Iterable[Any]) -> None:
        """Validates, then writes every change of the alter as one record batch (all or nothing)."""
        self._check_open()
        validated = validate_alter(entries, shadow_marks=True)
        if self.read_only:
            raise ConfigStoreError(f"store {self.url} was opened read-only")
        records = encode_alter(validated)
        if not records:
            return
        alter_id = new_alter_id()
        size = batch_bytes(records, alter_id)
        if size > self.max_alter_bytes:
            raise ConfigStoreError(
                f"store {self.url}: alter of {len(validated)} entities needs a record batch of about {size} bytes, "
                f"above the {self.max_alter_bytes}-byte limit (one batch is what makes it atomic); nothing was "
                "written: split it into smaller alters"
            )
        headers = alter_headers(alter_id, len(records))
        with self._lock:
            self._check_open()
            producer = self._writer()
            results: list[tuple[Any, Optional[int]]] = []

            def delivered(err: Any, msg: Any) -> None:
                results.append((err, None if msg is None else msg.offset()))

            try:
                for record in records:
                    producer.produce(self.topic, key=record.key, value=record.value, partition=0,
                                     headers=headers, on_delivery=delivered)
                # flush() sends at once, whatever linger.ms says: everything queued above is one batch.
                left = producer.flush(self.timeout + 1)
            except Exception as e:  # noqa: BLE001 - BufferError, KafkaException
                self._drop_writer()
                raise ConfigStoreError(f"store {self.url}: alter failed, nothing changed: {e}") from None
            errors = [err for err, _ in results if err is not None]
            if left or errors:
                self._drop_writer()
                reason = errors[0].str() if errors else f"no answer within {self.timeout:g} s"
                raise ConfigStoreError(
                    f"store {self.url}: alter failed ({reason}); if the cluster got it, it got all of it, never part"
                )

    def _writer(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(self._client_config(
                "writer",
                **{
                    "enable.idempotence": True,  # a retried batch is not written twice
                    "acks": "all",
                    # Records wait in the queue until flush(): an alter is never cut into batches.
                    # (flush() bounds the wait by the timeout and purges what is left.)
                    "linger.ms": _LINGER_MS,
                    "message.timeout.ms": _LINGER_MS + 1000,
                    "batch.size": 1_000_000,
                    "batch.num.messages": 1_000_000,
                    "compression.type": "none",
                },
            ))
        return self._producer

    def _drop_writer(self) -> None:
        # A failed or timed-out alter: nothing of it may be sent later, behind the caller's back.
        if self._producer is not None:
            try:
                self._producer.purge()
                self._producer.flush(0)
            except Exception:  # noqa: BLE001
                pass
            self._producer = None

    # ------------------------------------------------------------------ watch

    def watch(self, on_change: ChangeCallback, on_error: Optional[ErrorCallback] = None) -> StoreWatch:
        """Reports the entities of every alter the follower applies; ``frozenset()`` each second
        while it is current (a heartbeat) and ``None`` after a catch-up from a gap or an outage."""
        follower = self._follow()
        # Caught up first: what changes after this call is then reported entity by entity.
        follower.read([], log_error, self._log_end(self.timeout), max(self.timeout, CATCH_UP_TIMEOUT_S))
        follower.add_listener(on_change, on_error or log_error)
        return _KafkaWatch(follower, on_change)

    def close(self) -> None:
        """Stops the follower and the clients; safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            follower, self._follower = self._follower, None
        if follower is not None:
            follower.stop()
        self._drop_writer()


class _KafkaWatch(StoreWatch):
    def __init__(self, follower: Follower, on_change: ChangeCallback) -> None:
        self._follower, self._on_change = follower, on_change

    def stop(self) -> None:
        self._follower.remove_listener(self._on_change)


def _client_error(err: Any) -> None:
    _client_log.debug("%s", err)
