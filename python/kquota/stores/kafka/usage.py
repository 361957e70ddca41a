"""The usage topic of a fleet (``<store topic>.usage``): each proxy's measured rates, one record
per proxy and report interval, read by every proxy of the fleet.

A record's key is the member id (the proxy's random id); its value is binary and small::

    u8 version (1) | u8 flags (1: full snapshot) | u16 interval ms | u32 sequence | u16 count
    count x (u32 entity hash | u16 rate)

The entity hash is CRC-32 of ``quota type, user tag, client-id tag``: a member only needs the
others' rates for the entities it has itself, so names never travel. The rate is bytes/s; a
negative rate means the member is saturated (throttled at its share: it wants more), 0.0 that
the entity left it. Between full snapshots (every :data:`FULL_EVERY` reports) a record carries
only the entities whose state changed (saturation flipped, or the rate moved more than
:data:`CHANGE`), so a steady fleet costs little: see docs/guides/proxy.md.

The topic is created with ``cleanup.policy=delete`` and a short retention: records are only
useful for a few intervals; a member joining reads from the start of what is retained.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass, field

#: Topic configuration of a usage topic.
USAGE_TOPIC_CONFIG = {"retention.ms": "60000"}
#: A usage topic's name next to a store topic.
USAGE_SUFFIX = ".usage"
#: Every this many reports a member sends all its entities (a joiner's view is whole within it).
FULL_EVERY = 30
#: Relative rate change that is reported between full snapshots.
CHANGE = 0.25

_HEADER = struct.Struct("<BBHIH")
_ENTRY = struct.Struct("<IH")
_SATURATED_BIT = 0x8000
_STEPS = 1000  # per doubling of the rate
_VERSION = 1
_FULL = 1


class CorruptUsage(ValueError):
    """A usage record that cannot be read."""


def entity_hash(quota_type: str, user: str, client_id: str) -> int:
    """The 32-bit hash naming an entity's sensor in usage records."""
    return zlib.crc32(f"{quota_type}\0{user}\0{client_id}".encode())


@dataclass
class Usage:
    """One decoded usage record."""

    full: bool
    interval_ms: int
    sequence: int
    rates: dict[int, float] = field(default_factory=dict)


def encode(usage: Usage) -> bytes:
    """A usage record's value."""
    out = bytearray(_HEADER.pack(_VERSION, _FULL if usage.full else 0, min(usage.interval_ms, 65535),
                                 usage.sequence & 0xFFFFFFFF, len(usage.rates)))
    for h, rate in usage.rates.items():
        out += _ENTRY.pack(h, _pack_rate(rate))
    return bytes(out)


def _pack_rate(rate: float) -> int:
    level = min(round(math.log2(1.0 + abs(rate)) * _STEPS), _SATURATED_BIT - 1)
    return level | (_SATURATED_BIT if rate < 0 else 0)


def _unpack_rate(packed: int) -> float:
    rate = 2.0 ** ((packed & ~_SATURATED_BIT) / _STEPS) - 1.0
    return -rate if packed & _SATURATED_BIT else rate


def decode(value: bytes) -> Usage:
    """Reads a usage record's value; raises :class:`CorruptUsage`."""
    if len(value) < _HEADER.size:
        raise CorruptUsage(f"usage record of {len(value)} bytes is shorter than its header")
    version, flags, interval, seq, count = _HEADER.unpack_from(value)
    if version != _VERSION:
        raise CorruptUsage(f"usage record version {version} is not {_VERSION}")
    if len(value) != _HEADER.size + count * _ENTRY.size:
        raise CorruptUsage(f"usage record of {len(value)} bytes does not hold {count} entries")
    rates = {h: _unpack_rate(r) for h, r in _ENTRY.iter_unpack(value[_HEADER.size:])}
    return Usage(bool(flags & _FULL), interval, seq, rates)


def changed(before: float, now: float) -> bool:
    """Whether a rate moved enough to be reported between full snapshots."""
    if (before < 0) != (now < 0) or (before == 0) != (now == 0):
        return True
    if now < 0:
        return False  # saturated stays saturated: the level does not matter
    return abs(now - before) > CHANGE * max(abs(before), 1.0)
