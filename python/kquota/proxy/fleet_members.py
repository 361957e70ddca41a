"""The members of a fleet as one proxy reads them from the usage topic
(:mod:`kquota.proxy.fleet_usage`): what each member last reported, admitted only from records
signed with the fleet's key, timed by this proxy's clock, pruned after silence and bounded in
number.

Each refused record is counted by reason (:data:`REASONS`), none raises:

* ``unsigned``, ``version``, ``malformed``, ``signature``: the record is not one of the fleet's
  (see :class:`~kquota.proxy.fleet_usage.CorruptUsage`);
* ``future``: written more than :data:`SKEW_INTERVALS` report intervals ahead of this proxy's
  clock. An accepted record's time is never later than the reader's clock, so no record makes the
  others look silent;
* ``replayed``: a sequence older than the member's newest record's (a record written again
  later; by sequence, not time, so a writer's clock stepping back refuses nothing);
* ``members-over-limit``: a new member while :data:`MAX_MEMBERS` members are known and none of
  them is silent enough to be pruned (a live member is never evicted);
* ``entities-over-limit``: a member's entities would pass :data:`MAX_MEMBER_ENTITIES`.
"""

from __future__ import annotations

from typing import Optional

from kquota.proxy.fleet_usage import MAX_MEMBER_BYTES, CorruptUsage, UsageKey, decode

#: Members known at once at most (each costs its entities' rates).
MAX_MEMBERS = 256
#: A member's entities at most: two quota types of a kernel at its default sensor caps (client
#: sensors, and the topic sensors a coordinator shares: ``fleet.MAX_TOPICS`` per type).
MAX_MEMBER_ENTITIES = 2_000_000 + 2 * 100_001
#: A record written this many report intervals ahead of the reader's clock is refused.
SKEW_INTERVALS = 1
#: A member silent this many report intervals (against the newest record of anyone) is forgotten.
PRUNE_INTERVALS = 6
#: The labels of ``fleet-usage-records-rejected-total``.
REASONS = ("unsigned", "version", "malformed", "signature", "future", "replayed", "members-over-limit",
           "entities-over-limit")


class FleetMembers:
    """The fleet's members as read by one proxy.

    Args:
        key: the fleet's key.
        interval_s: the report interval (the unit of the skew and the silence bounds).
        max_members: :data:`MAX_MEMBERS` unless given.
        max_entities: :data:`MAX_MEMBER_ENTITIES` unless given.
    """

    def __init__(self, key: UsageKey, interval_s: float, max_members: int = MAX_MEMBERS,
                 max_entities: int = MAX_MEMBER_ENTITIES) -> None:
        self.key, self.interval_s, self.max_members = key, float(interval_s), max_members
        self.max_entities = max_entities
        #: member id -> (its newest record's time in s, on this proxy's clock; {entity key: rate})
        self.members: dict[str, tuple[float, dict[int, float]]] = {}
        self._written: dict[str, int] = {}  # member id -> its newest record's sequence
        # member id -> (sequence, parts, {part: rates}) of a full snapshot still arriving
        self._pending: dict[str, tuple[int, int, dict[int, dict[int, float]]]] = {}
        self.rejected = dict.fromkeys(REASONS, 0)
        self.pruned = 0

    def newest(self) -> Optional[float]:
        """The time of the newest record of any member (None: none known)."""
        return max((seen for seen, _ in self.members.values()), default=None)

    def receive(self, member_key: Optional[bytes], value: Optional[bytes], now: float) -> Optional[str]:
        """Applies one record of the usage topic read at ``now`` (this proxy's clock, s): None if
        accepted, else the reason it was refused (counted)."""
        reason = self._apply(member_key or b"", value or b"", now)
        if reason is not None:
            self.rejected[reason] += 1
        return reason

    def _apply(self, member_key: bytes, value: bytes, now: float) -> Optional[str]:
        if not 0 < len(member_key) <= MAX_MEMBER_BYTES or not all(0x21 <= b < 0x7F for b in member_key):
            return "malformed"
        try:
            usage = decode(value, member_key, self.key)
        except CorruptUsage as e:
            return e.reason
        member = member_key.decode("ascii")
        if usage.time_ms / 1000.0 > now + SKEW_INTERVALS * self.interval_s:
            return "future"
        if usage.sequence < self._written.get(member, -1):
            return "replayed"
        if member not in self.members and len(self.members) >= self.max_members:
            self.prune()
            if len(self.members) >= self.max_members:
                return "members-over-limit"
        _, rates = self.members.get(member, (0.0, {}))
        if usage.full:
            seq, parts, got = self._pending.get(member, (-1, 0, {}))
            if (seq, parts) != (usage.sequence, usage.parts):
                got = {}
            got[usage.part] = usage.rates
            if sum(len(r) for r in got.values()) > self.max_entities:
                self._pending.pop(member, None)
                return "entities-over-limit"
            if len(got) < usage.parts:
                self._pending[member] = (usage.sequence, usage.parts, got)
            else:
                self._pending.pop(member, None)
                rates = {h: r for part in got.values() for h, r in part.items() if r != 0.0}
        else:
            merged = {**rates, **usage.rates}
            if len(merged) > self.max_entities:
                return "entities-over-limit"
            rates = {h: r for h, r in merged.items() if r != 0.0}
        self._written[member] = usage.sequence
        self.members[member] = (min(usage.time_ms / 1000.0, now), rates)
        return None

    def live(self, silent_s: float) -> dict[str, dict[int, float]]:
        """Each member whose newest record is at most ``silent_s`` older than the newest of
        anyone, with its rates."""
        newest = self.newest()
        if newest is None:
            return {}
        return {m: rates for m, (seen, rates) in self.members.items() if seen >= newest - silent_s}

    def prune(self) -> int:
        """Forgets the members silent for :data:`PRUNE_INTERVALS` intervals (against the newest
        record of anyone: a cut usage path forgets no one); returns how many."""
        newest = self.newest()
        if newest is None:
            return 0
        horizon = newest - PRUNE_INTERVALS * self.interval_s
        gone = [m for m, (seen, _) in self.members.items() if seen < horizon]
        for m in gone:
            del self.members[m]
            self._written.pop(m, None)
            self._pending.pop(m, None)
        self.pruned += len(gone)
        return len(gone)
