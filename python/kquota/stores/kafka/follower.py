"""Following the store topic: a consumer thread that rebuilds the quota state from the records
and publishes it one whole alter at a time.

The records of one alter are one record batch (see :mod:`kquota.stores.kafka`), so they are
contiguous in the log and a fetch never ends inside them. The follower collects records with the
same ``kquota-alter`` id until it has ``kquota-records`` of them, then applies them together. A
run that ends early (a record of another alter comes first, or the end of the log) lost records
to compaction: each lost record was superseded by a later one, so the state is right again only
once the follower has read to the end. From such a gap, and from the start, the follower applies
into a shadow copy that it publishes at the end of the log (``_PARTITION_EOF``); in between, the
published state stays what it was. The published state is therefore always one that the log had
right after some alter.

A stream of alters can keep the end of the log out of reach, so the first read also publishes at
the first alter boundary past the log end that a reader asked for, if it met no shortened alter
on the way (always so for a log not compacted yet: compaction leaves the active segment alone).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable, Optional

from kquota.entity import ClientQuotaEntity
from kquota.stores.base import ChangeCallback, ConfigStoreError, ErrorCallback, QuotaState
from kquota.stores.kafka.codec import ALTER_HEADER, COUNT_HEADER, CorruptRecord, decode_key, decode_value, header

log = logging.getLogger("kquota.stores.kafka")

#: How often the follower asks the cluster for the log end, to confirm it is current (a
#: heartbeat for config-sync-age-seconds) and to notice a lost cluster.
HEARTBEAT_S = 1.0
#: Unreadable records by record key: (message, entity if known).
Corrupt = dict[bytes, tuple[str, Optional[ClientQuotaEntity]]]


class _View:
    """A quota state and its unreadable records; ``apply`` takes one alter's records."""

    def __init__(self, state: Optional[QuotaState] = None, corrupt: Optional[Corrupt] = None) -> None:
        self.state: QuotaState = {e: dict(c) for e, c in (state or {}).items()}
        self.corrupt: Corrupt = dict(corrupt or {})

    def copy(self) -> "_View":
        return _View(self.state, self.corrupt)

    def apply(self, records: list[Any], url: str) -> set[ClientQuotaEntity]:
        changed: set[ClientQuotaEntity] = set()
        for msg in records:
            key = msg.key() or b""
            entity: Optional[ClientQuotaEntity] = None
            try:
                entity, config_key = decode_key(msg.key())
                value = decode_value(entity, config_key, msg.value())
            except CorruptRecord as e:
                self.corrupt[key] = (f"{url}: skipping the record at offset {msg.offset()}: {e}", entity)
                if entity is not None:
                    changed.add(entity)
                continue
            self.corrupt.pop(key, None)
            changed.add(entity)
            config = self.state.setdefault(entity, {})
            if value is None:
                config.pop(config_key, None)
                if not config:
                    del self.state[entity]
            else:
                config[config_key] = value
        return changed


class Follower:
    """A consumer thread that keeps the topic's state (see the module docstring)."""

    def __init__(self, consumer: Any, topic: str, url: str, log_end: Callable[[float], int]) -> None:
        """Follows partition 0 of ``topic`` with ``consumer`` (which it closes when stopped);
        ``log_end(timeout)`` asks the cluster for the log end (``ConfigStoreError`` if it cannot)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self._consumer = consumer
        self._log_end = log_end
        self.url = url
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._published = _View()
        self._position = -1  # offset after the last published record; -1 before the first end of log
        self._shadow: Optional[_View] = _View()  # the initial read
        self._gap = False  # whether the shadow took an alter that compaction shortened
        self._wanted = -1  # the highest log end a reader waits for (-1: none yet)
        self._pending: list[Any] = []
        self._pending_id: Optional[bytes] = None
        self._next_offset = 0
        self._listeners: list[tuple[ChangeCallback, ErrorCallback]] = []
        self._stop = threading.Event()
        self._lost: Optional[str] = None
        self._next_heartbeat = 0.0
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._thread = threading.Thread(target=self._run, name=f"kquota-kafka-follower:{topic}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ readers

    def read(
        self, entities: Optional[Iterable[ClientQuotaEntity]], on_error: ErrorCallback, offset: int, timeout: float
    ) -> QuotaState:
        """The published state once it covers the log up to ``offset`` (waits up to ``timeout``)."""
        with self._cond:
            self._wanted = max(self._wanted, offset)
            if not self._cond.wait_for(lambda: self._position >= max(offset, 0), timeout):
                raise ConfigStoreError(
                    f"store {self.url}: did not read the topic up to offset {offset} within {timeout:g} s "
                    f"(read up to {max(self._position, 0)})"
                )
            view = self._published
            if entities is None:
                state = {e: dict(c) for e, c in view.state.items()}
                corrupt = list(view.corrupt.values())
            else:
                wanted = {ClientQuotaEntity(e) for e in entities}
                state = {e: dict(view.state[e]) for e in wanted if e in view.state}
                # Records naming no entity are reported by full reads only, not at every change.
                corrupt = [(m, e) for m, e in view.corrupt.values() if e in wanted]
        for message, entity in corrupt:
            on_error(message, entity)
            if entity is not None:
                state.pop(entity, None)  # an unreadable record: the entity's state is unknown
        return state

    def add_listener(self, on_change: ChangeCallback, on_error: ErrorCallback) -> None:
        """Calls ``on_change`` (from the follower's thread) after each publication and heartbeat."""
        with self._lock:
            self._listeners.append((on_change, on_error))

    def remove_listener(self, on_change: ChangeCallback) -> None:
        """Stops calling ``on_change``."""
        with self._lock:
            self._listeners = [x for x in self._listeners if x[0] is not on_change]

    def stop(self) -> None:
        """Stops the thread and closes the consumer."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # ------------------------------------------------------------------ the thread

    def _notify(self, changed: Optional[frozenset[ClientQuotaEntity]]) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for on_change, on_error in listeners:
            try:
                on_change(changed)
            except Exception as e:  # noqa: BLE001 - a listener's failure must not stop the follower
                on_error(f"{self.url}: change callback failed: {e!r}", None)

    def _report(self, message: str) -> None:
        with self._lock:
            listeners = list(self._listeners)
        if not listeners:
            log.warning("%s", message)
        for _, on_error in listeners:
            on_error(message, None)

    def lost(self, reason: str) -> None:
        """Marks the cluster unreachable (reported once until it answers again)."""
        if self._lost is None:
            self._report(f"{self.url}: lost the Kafka cluster ({reason}); keeping the last quotas until it returns")
        self._lost = reason

    def _run(self) -> None:
        from confluent_kafka import KafkaError

        try:
            while not self._stop.is_set():
                msg = self._consumer.poll(0.1)
                if msg is not None:
                    err = msg.error()
                    if err is None:
                        self._record(msg)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        self._at_end(msg.offset())
                    elif err.code() != KafkaError._TRANSPORT:
                        self._report(f"{self.url}: {err.str()}")
                if time.monotonic() >= self._next_heartbeat:
                    self._heartbeat()
        except Exception as e:  # noqa: BLE001 - reported; describe() then times out with the reason
            self._report(f"{self.url}: the follower stopped: {e!r}")
            log.exception("kafka store follower failed")
        finally:
            self._consumer.close()

    def _heartbeat(self) -> None:
        self._next_heartbeat = time.monotonic() + HEARTBEAT_S
        try:
            end = self._log_end(2.0)
        except ConfigStoreError as e:
            self.lost(str(e))
            return
        if self._lost is not None:
            self._lost = None
            log.info("store %s: the Kafka cluster answers again; catching up", self.url)
            self._notify(None)  # anything may have changed meanwhile: a full re-read, as ZooKeeper's
        if self._position >= end and self._shadow is None and not self._pending:
            self._notify(frozenset())  # confirmed current: nothing changed

    def _record(self, msg: Any) -> None:
        offset = msg.offset()
        if offset < self._next_offset:
            # The log went back (the topic was deleted and created again): read it anew.
            self._report(f"{self.url}: the topic restarted at offset {offset}; reading it again")
            self._shadow, self._gap, self._pending, self._pending_id = _View(), False, [], None
        self._next_offset = offset + 1
        alter_id = header(msg.headers(), ALTER_HEADER)
        try:
            count = int(header(msg.headers(), COUNT_HEADER) or b"1")
        except ValueError:
            count = 1
        if self._pending and (alter_id is None or alter_id != self._pending_id):
            self._apply_pending(complete=False)
        self._pending.append(msg)
        self._pending_id = alter_id
        if alter_id is None or len(self._pending) >= count:
            self._apply_pending(complete=True)

    def _apply_pending(self, complete: bool) -> None:
        records, self._pending, self._pending_id = self._pending, [], None
        if not complete and self._shadow is None:
            # Records of this alter were compacted away: correct again only at the end of the log.
            with self._lock:
                self._shadow = self._published.copy()
        if self._shadow is not None:
            self._shadow.apply(records, self.url)
            self._gap = self._gap or not complete
            if not self._gap and 0 <= self._wanted <= self._next_offset:
                # Past what a reader waits for, on a log with no shortened alter so far: a state
                # the log had (the end itself may keep moving under a stream of alters).
                self._publish_shadow(self._next_offset)
            return
        with self._cond:
            changed = self._published.apply(records, self.url)
            self._position = self._next_offset
            self._cond.notify_all()
        if changed:
            self._notify(frozenset(changed))

    def _at_end(self, offset: int) -> None:
        if self._pending:
            self._apply_pending(complete=False)
        self._publish_shadow(offset)

    def _publish_shadow(self, offset: int) -> None:
        shadow, self._shadow, self._gap = self._shadow, None, False
        with self._cond:
            first = self._position < 0  # the initial read: nobody has seen a state to change yet
            if shadow is not None:
                self._published = shadow
            self._position = max(self._position, offset, self._next_offset)
            self._cond.notify_all()
        if shadow is not None and not first:
            self._notify(None)

