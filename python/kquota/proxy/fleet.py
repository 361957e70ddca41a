"""``kquota proxy --quota-scope fleet``: one quota across every proxy that follows the same
``kafka://`` store topic.

A coordinator thread per proxy, once per report interval (1 s):

1. reads this proxy's measured rate of every limited Produce and Fetch sensor from the kernel's
   metrics snapshot (no network, no lock on the data plane): client sensors and topic quotas'
   sensors (a topic's sensor is an entity of its own, keyed by the topic);
2. publishes them to the usage topic ``<store topic>.usage`` (see
   :mod:`kquota.proxy.fleet_usage`: a few bytes per changed entity, signed with the fleet's key);
3. reads every member's records (:mod:`kquota.proxy.fleet_members`: only signed ones, timed by
   this proxy's clock, members bounded in number and forgotten after silence), leaves out members
   silent for :data:`SILENT_INTERVALS` intervals, and computes each entity's split
   (:mod:`kquota.proxy.fleet_shares`) the same way every member does;
4. sets its own fractions in the kernel (``QuotaKernel._set_shares``, ``TopicQuotas.set_shares``): each
   sensor re-reads its limit once, on its next record, so the per-request path is the same as in
   ``proxy`` scope.

A topic quota is split by the same rule as a client quota: each proxy's share of the topic's
budget follows its own producers' (or consumers') demand for the topic, whatever their client ids.

When no usage record at all (this proxy's own included) arrives for :data:`SILENT_INTERVALS`
intervals, the usage path is cut: the proxy falls back to the static share
``1 / last known fleet size`` of every quota, and leaves the fallback when records flow again.
Request and controller-mutation quotas stay per proxy (they meter a proxy's own threads and its
own admin requests).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Optional

from kquota.metrics import Metric, iter_rows
from kquota.proxy.fleet_members import FleetMembers
from kquota.proxy.fleet_shares import SATURATED, split
from kquota.stores.kafka.topic import ensure_topic, error_reason
from kquota.proxy.fleet_usage import FULL_EVERY, USAGE_SUFFIX, USAGE_TOPIC_CONFIG, Usage, UsageKey, changed, encode

log = logging.getLogger("kquota.proxy.fleet")

#: Seconds between two usage reports of a proxy.
INTERVAL_S = 1.0
#: A member silent this many intervals has left; no usage at all this long is a cut path.
SILENT_INTERVALS = 3
#: Quota types whose limits hold for the fleet (the byte rates).
FLEET_TYPES = {"Produce": "producer_byte_rate", "Fetch": "consumer_byte_rate"}
#: A member stays saturated this many intervals after it last was (a throttled client is muted
#: for the throttle time and measures low meanwhile, though it wants more).
HOLD_INTERVALS = 5
#: Topic quotas' sensors shared per type at most: the kernel's cap of topics quoted by
#: ``<default>`` and its overflow sensor. Named topics keep sensors past the cap; those past this
#: bound are left out of the usage and held to the default share (``1 / fleet size``), so a
#: member's report stays within what a reader keeps (``fleet_members.MAX_MEMBER_ENTITIES``).
MAX_TOPICS = 100_001
#: Metric group of the coordinator's rows.
FLEET_GROUP = "Fleet"
#: Shares closer than this to the ones set are not set again (each set re-reads limits).
_EPSILON = 0.005
#: A refused usage record is logged at most once a minute per reason (each is counted).
_LOG_EVERY_S = 60.0

#: (metric group, user tag, client-id tag) of a client sensor; (metric group, None, topic) of a
#: topic quota's sensor.
Key = tuple[str, Optional[str], str]


class FleetCoordinator:
    """Shares this proxy's quotas with the rest of its fleet (see the module docstring).

    Args:
        qm: the proxy's quota manager (its kernel).
        hosts: the cluster of the store topic.
        store_topic: the store topic; the usage topic is ``store_topic + ".usage"``.
        interval_s: seconds between reports.
        security: librdkafka's settings for a secured cluster (the store's
            ``KafkaConfigStore.client_security``).
        key: the fleet's secret (``kquota.fleet.usage.key.file``: the same on every member), or
            the :class:`~kquota.proxy.fleet_usage.UsageKey` derived from it.
    """

    def __init__(self, qm: Any, hosts: str, store_topic: str, interval_s: float = INTERVAL_S,
                 security: Optional[dict[str, str]] = None, *, key: "bytes | UsageKey") -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient

        self.qm, self.hosts = qm, hosts
        self.topic = store_topic + USAGE_SUFFIX
        self.url = f"kafka://{hosts}/{self.topic}"
        self.interval_s = float(interval_s)
        self.member = uuid.uuid4().hex[:12]
        self.key = key if isinstance(key, UsageKey) else UsageKey(key)
        common = {"bootstrap.servers": hosts, "reconnect.backoff.max.ms": 1000,
                  "logger": logging.getLogger("kquota.proxy.fleet.client"), **(security or {})}
        self._admin = AdminClient({**common, "client.id": "kquota-fleet-admin"})
        ensure_topic(self._admin, self.url, self.topic, 5.0, create=True, cleanup_policy="delete",
                     config=USAGE_TOPIC_CONFIG)
        self._producer = Producer({**common, "client.id": "kquota-fleet-usage", "linger.ms": 0,
                                   "message.timeout.ms": int(self.interval_s * 1000 * SILENT_INTERVALS),
                                   "queue.buffering.max.messages": 100})
        self._consumer = Consumer({**common, "client.id": "kquota-fleet-usage", "group.id": f"kquota-fleet-{self.member}",
                                   "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                   "topic.metadata.refresh.interval.ms": 2000})
        self._assign()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._seq = 0
        self._sent: dict[int, float] = {}  # what the others believe of this member
        self.members = FleetMembers(self.key, self.interval_s)
        self._entity_keys: dict[Key, int] = {}  # each limited sensor's entity key (derived once)
        self._logged: dict[str, float] = {}  # reason -> when a refused record was last logged
        self._last_usage = time.monotonic()  # the newest usage record received (any member)
        # group -> {(user, client-id) or (None, topic): this proxy's fraction}
        self._shares: dict[str, dict[tuple[Optional[str], str], float]] = {g: {} for g in FLEET_TYPES}
        self._default: float = 1.0
        self.fleet_size = 1
        self.fallback = False
        self.bytes_sent = 0
        self._throttle_avg: dict[Key, float] = {}  # each sensor's throttle-time Avg at the last step
        self._saturated_at: dict[Key, float] = {}  # the step until which a sensor counts as saturated

    def _assign(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "FleetCoordinator":
        """Starts the coordinator thread and registers its metrics."""
        self._thread = threading.Thread(target=self._run, name="kquota-fleet", daemon=True)
        self._thread.start()
        self.qm.add_metrics_source(self.metrics)
        return self

    def stop(self) -> None:
        """Stops the thread, gives every limit back whole and closes the clients."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.qm.remove_metrics_source(self.metrics)
        try:
            for group in FLEET_TYPES:
                self.qm._set_shares(group, 1.0, {})
                self.qm._topics().set_shares(group, 1.0, {})
        except Exception:  # noqa: BLE001 - the kernel is closed already
            pass
        self._consumer.close()
        self._producer.flush(1)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # noqa: BLE001 - the coordinator must outlive one bad step
                log.exception("fleet coordinator step failed")
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    # ------------------------------------------------------------------ one interval

    def step(self) -> None:
        """One report interval: measure, publish, read, split, set."""
        local, limits = self._measure()
        keys = self._entity_keys = {k: self._entity_keys.get(k) or self._entity_key(k) for k in local}
        self._publish(local)
        self._read()
        # Silence is measured against the newest record of anyone (this proxy's own included):
        # when the path itself is cut nobody is dropped, so the fallback knows the fleet's size.
        self.members.prune()
        live = self.members.live(SILENT_INTERVALS * self.interval_s)
        live[self.member] = {keys[k]: r for k, r in local.items()}
        cut = time.monotonic() - self._last_usage > SILENT_INTERVALS * self.interval_s
        if cut:
            if not self.fallback:
                log.warning("fleet usage path %s silent for %d intervals: static share 1/%d",
                            self.url, SILENT_INTERVALS, self.fleet_size)
            self.fallback = True
            self._set({g: {} for g in FLEET_TYPES}, 1.0 / max(self.fleet_size, 1))
            return
        if self.fallback:
            log.info("fleet usage path %s back: %d members", self.url, len(live))
            self.fallback = False
        self.fleet_size = len(live)
        shares: dict[str, dict[tuple[Optional[str], str], float]] = {g: {} for g in FLEET_TYPES}
        for key, quota in limits.items():
            h = keys[key]
            demands = {}
            for m, rates in live.items():
                r = rates.get(h, 0.0)
                demands[m] = None if r < 0 else r
            shares[key[0]][(key[1], key[2])] = split(quota, demands)[self.member]
        self._set(shares, 1.0 / self.fleet_size)

    def _entity_key(self, key: Key) -> int:
        group, user, name = key
        return self.key.topic(group, name) if user is None else self.key.entity(group, user, name)

    def _measure(self) -> tuple[dict[Key, float], dict[Key, float]]:
        """This proxy's rate per limited sensor (negative: saturated) and each whole limit."""
        rates: dict[Key, float] = {}
        bounds: dict[Key, float] = {}
        throttles: dict[Key, float] = {}
        by_name = {"byte-rate": rates, "quota-limit": bounds, "throttle-time": throttles}
        snapshot = self.qm._metrics_snapshot()
        for group, name, user, client_id, value in iter_rows(snapshot):
            if group in FLEET_TYPES and user is not None and name in by_name:
                by_name[name][(group, user, client_id)] = value
        # Topic quotas' sensors, keyed apart from client sensors by user None; at most
        # MAX_TOPICS per type.
        topics: dict[str, set[str]] = {g: set() for g in FLEET_TYPES}
        for group, name, topic, value in snapshot.topic_rows():
            if group in FLEET_TYPES and name in by_name:
                seen = topics[group]
                if topic not in seen:
                    if len(seen) >= MAX_TOPICS:
                        continue
                    seen.add(topic)
                by_name[name][(group, None, topic)] = value
        local: dict[Key, float] = {}
        whole: dict[Key, float] = {}
        for key, bound in bounds.items():
            share = self._shares[key[0]].get((key[1], key[2]), self._default)
            if not bound < float("inf") or share <= 0:
                continue
            whole[key] = bound / share
            rate = rates.get(key, 0.0)
            # Throttled since the last step (its throttle-time Avg moved) or at its bound: wants more.
            # It stays so while its client may still be muted (about the throttle time).
            avg = throttles.get(key, 0.0)
            throttled = avg > 0 and avg != self._throttle_avg.get(key)
            if throttled or (rate > 0 and rate >= SATURATED * bound):
                hold = HOLD_INTERVALS + (avg / 1000.0 / self.interval_s if throttled else 0.0)
                self._saturated_at[key] = self._seq + hold
            held = self._seq <= self._saturated_at.get(key, -1.0)
            local[key] = -max(rate, 1.0) if held else rate
        self._throttle_avg = throttles
        for key in [k for k in self._saturated_at if k not in bounds]:
            del self._saturated_at[key]
        return local, whole

    def _publish(self, local: dict[Key, float]) -> None:
        full = self._seq % FULL_EVERY == 0
        now = {self._entity_keys[k]: r for k, r in local.items()}
        if full:
            report = now
        else:
            report = {h: r for h, r in now.items() if h not in self._sent or changed(self._sent[h], r)}
            report.update({h: 0.0 for h in self._sent if h not in now})  # entities that left
        values = encode(Usage(full, int(self.interval_s * 1000), int(time.time() * 1000), self._seq, report),
                        self.member.encode(), self.key)
        self._seq += 1
        # What the others now believe: compared with the last reported rate, not the last
        # measured one, so a slow drift is reported once it adds up.
        self._sent = now if full else {h: r for h, r in {**self._sent, **report}.items() if r != 0.0}
        try:
            for value in values:
                self._producer.produce(self.topic, value, key=self.member.encode())
                self.bytes_sent += len(value) + len(self.member)
        except Exception as e:  # noqa: BLE001 - BufferError, KafkaException: the path is cut
            log.debug("usage record not sent: %s", error_reason(e))
        self._producer.poll(0)

    def _read(self) -> None:
        while True:
            msgs = self._consumer.consume(num_messages=500, timeout=0.05)
            if not msgs:
                return
            for msg in msgs:
                if msg.error() is not None:
                    log.debug("usage topic: %s", msg.error())
                    continue
                reason = self.members.receive(msg.key(), msg.value(), time.time())
                if reason is None:
                    self._last_usage = time.monotonic()  # a refused record is no sign of a live path
                elif time.monotonic() - self._logged.get(reason, -_LOG_EVERY_S) >= _LOG_EVERY_S:
                    self._logged[reason] = time.monotonic()
                    log.warning("usage topic %s: refused the record at offset %d (%s; counted in "
                                "fleet-usage-records-rejected-total, logged once a minute)", self.url, msg.offset(), reason)

    def _set(self, shares: dict[str, dict[tuple[Optional[str], str], float]], default: float) -> None:
        for group, by_key in shares.items():
            old = self._shares[group]
            if (abs(default - self._default) < _EPSILON and old.keys() == by_key.keys()
                    and all(abs(old[k] - v) < _EPSILON for k, v in by_key.items())):
                continue
            self.qm._set_shares(group, default, {(u, c): v for (u, c), v in by_key.items() if u is not None})
            self.qm._topics().set_shares(group, default, {t: v for (u, t), v in by_key.items() if u is None})
            self._shares[group] = by_key
        self._default = default

    # ------------------------------------------------------------------ status page

    def status(self, max_rows: int) -> dict[str, Any]:
        """The fleet section of the status page (:mod:`kquota.status`): this member, the fleet's
        size, whether the usage path is cut (``fallback``), the default share, the members known
        (id, age of its newest usage, entities it reported, whether live; this proxy first) and
        this proxy's share of each active quota, smallest first, each list cut to ``max_rows``
        with the rest counted."""
        from kquota.status import shown_name

        now = time.time()
        members = list(self.members.members.items())  # one copy: the coordinator thread changes it
        if not any(m == self.member for m, _ in members):
            members.append((self.member, (now, {})))
        members.sort(key=lambda item: (item[0] != self.member, -item[1][0], item[0]))
        silent = SILENT_INTERVALS * self.interval_s
        shares = sorted(((s, g, u, c) for g, by_key in list(self._shares.items()) for (u, c), s in list(by_key.items())),
                        key=lambda t: (t[0], t[1], t[2] is None, t[2] or "", t[3]))
        return {
            "member": self.member, "size": self.fleet_size, "fallback": self.fallback,
            "default_share": self._default, "usage_topic": shown_name(self.url),
            "members": [{"member": shown_name(m), "self": m == self.member, "age_seconds": max(0.0, now - seen),
                         "live": now - seen <= silent, "entities": len(rates)} for m, (seen, rates) in members[:max_rows]],
            "members_more": max(0, len(members) - max_rows),
            "shares": [{"quota_type": g, "user": shown_name(u), "client_id": shown_name(c), "share": s} if u is not None
                       else {"quota_type": g, "topic": shown_name(c), "share": s} for s, g, u, c in shares[:max_rows]],
            "shares_more": max(0, len(shares) - max_rows),
        }

    # ------------------------------------------------------------------ metrics

    def metrics(self) -> list[Metric]:
        """``fleet-size``, ``fleet-fallback``, ``fleet-share-default``, ``fleet-share-min`` and
        ``-max`` over the active quotas, ``fleet-usage-age-max-seconds`` (the oldest among the newest
        usage of each live member), ``fleet-usage-bytes-total`` (usage bytes sent),
        ``fleet-members`` (members known, live or not yet forgotten), ``fleet-members-pruned-total``;
        tagged: ``fleet-share`` per active quota (``quota-type``, ``user``, ``client-id``; ``quota-type``,
        ``topic`` for a topic quota),
        ``fleet-usage-age-seconds`` per member (``member``, its id; this proxy's own included) and
        ``fleet-usage-records-rejected-total`` per ``reason`` (see :mod:`kquota.proxy.fleet_members`)."""
        shares = [v for by_tags in self._shares.values() for v in by_tags.values()]
        now = time.time()
        members = list(self.members.members.items())  # one copy: the coordinator thread changes it
        ages = [now - seen for _, (seen, _) in members if now - seen <= SILENT_INTERVALS * self.interval_s]
        return [
            Metric(FLEET_GROUP, "fleet-size", {}, float(self.fleet_size)),
            Metric(FLEET_GROUP, "fleet-fallback", {}, 1.0 if self.fallback else 0.0),
            Metric(FLEET_GROUP, "fleet-share-default", {}, self._default),
            Metric(FLEET_GROUP, "fleet-share-min", {}, min(shares, default=self._default)),
            Metric(FLEET_GROUP, "fleet-share-max", {}, max(shares, default=self._default)),
            Metric(FLEET_GROUP, "fleet-usage-age-max-seconds", {}, max(ages, default=float("nan"))),
            Metric(FLEET_GROUP, "fleet-usage-bytes-total", {}, float(self.bytes_sent)),
            Metric(FLEET_GROUP, "fleet-members", {}, float(len(members))),
            Metric(FLEET_GROUP, "fleet-members-pruned-total", {}, float(self.members.pruned)),
            *(Metric(FLEET_GROUP, "fleet-usage-records-rejected-total", {"reason": reason}, float(n))
              for reason, n in list(self.members.rejected.items())),
            *(Metric(FLEET_GROUP, "fleet-share", {"quota-type": group, "user": u, "client-id": c} if u is not None
                     else {"quota-type": group, "topic": c}, share)
              for group, by_key in list(self._shares.items()) for (u, c), share in list(by_key.items())),
            *(Metric(FLEET_GROUP, "fleet-usage-age-seconds", {"member": m}, now - seen)
              for m, (seen, _) in members if now - seen <= 2 * SILENT_INTERVALS * self.interval_s),
        ]
