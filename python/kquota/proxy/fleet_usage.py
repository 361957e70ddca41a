"""The usage topic of a fleet (``<store topic>.usage``): each proxy's measured rates, one record
(or a few: see parts) per proxy and report interval, read by every proxy of the fleet.

A record's key is the member id (the proxy's random id); its value is binary, small and signed::

    u8 version (2) | u8 flags (1: full snapshot) | u16 interval ms | u64 time ms (writer's clock)
    | u32 sequence | u16 part | u16 parts | u16 count
    count x (u64 entity key | u16 rate)
    32 bytes HMAC-SHA256(signing key, u16 member id length | member id | every byte above)

Every proxy of a fleet holds the same secret (``kquota.fleet.usage.key.file``, at least
:data:`KEY_MIN_BYTES` bytes); two keys are derived from it (:class:`UsageKey`): one signs records,
so a record from anyone without the secret (a forged member, rate or time) is refused, and the
member id is under the signature, so a member's records cannot be replayed as another's; the other
names entities: the entity key is HMAC-SHA256 of ``quota type, user tag, client-id tag`` (of a
topic quota: ``topic, quota type, topic name``, a first field no client entity has) cut to 64 bits,
so nobody without the secret can pick a client id or a topic whose key is a victim's. A member only
needs the others' rates for the entities it has itself, so names never travel.

The rate is bytes/s; a negative rate means the member is saturated (throttled at its share: it
wants more), 0.0 that the entity left it. Between full snapshots (every :data:`FULL_EVERY`
reports) a record carries only the entities whose state changed (saturation flipped, or the rate
moved more than :data:`CHANGE`), so a steady fleet costs little: see docs/guides/proxy.md. A
report of more than :data:`MAX_ENTRIES` entities is split into parts of one sequence (part
``0 .. parts-1``); a reader applies a full snapshot once it holds all its parts.

Version 1 records (unsigned, CRC-32 entity keys) are refused as ``unsigned``.

The topic is created with ``cleanup.policy=delete`` and a short retention: records are only
useful for a few intervals; a member joining reads from the start of what is retained.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from dataclasses import dataclass, field

#: Topic configuration of a usage topic.
USAGE_TOPIC_CONFIG = {"retention.ms": "60000"}
#: A usage topic's name next to a store topic.
USAGE_SUFFIX = ".usage"
#: Every this many reports a member sends all its entities (a joiner's view is whole within it).
FULL_EVERY = 30
#: Relative rate change that is reported between full snapshots.
CHANGE = 0.25
#: The shortest fleet secret: 256 bits, the size of HMAC-SHA256's output.
KEY_MIN_BYTES = 32
#: Entities in one record at most (about 80 KB: far under a broker's ``message.max.bytes``).
MAX_ENTRIES = 8192
#: Parts of one report at most: a member's entities, two quota types of a kernel at its default
#: cap of 1,000,000 client sensors and 100,000 topic sensors (plus each overflow sensor) each,
#: fit in 269 parts.
MAX_PARTS = 272
#: The longest member id (ours are 12 hex digits).
MAX_MEMBER_BYTES = 64

_HEADER = struct.Struct("<BBHQIHHH")
_ENTRY = struct.Struct("<QH")
_MAC_BYTES = hashlib.sha256().digest_size
_SATURATED_BIT = 0x8000
_STEPS = 1000  # per doubling of the rate
_VERSION = 2
_UNSIGNED_VERSION = 1  # the format before records were signed
_FULL = 1
_KEY_FILE_MAX_BYTES = 65536


class CorruptUsage(ValueError):
    """A usage record that is refused; ``reason`` is its metric label (``unsigned``,
    ``version``, ``malformed`` or ``signature``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class UsageKey:
    """The fleet's secret, as the two keys derived from it (one signs records, one names
    entities): deriving them keeps a signature from ever being an entity key or back.

    Raises:
        ValueError: a secret shorter than :data:`KEY_MIN_BYTES`.
    """

    def __init__(self, secret: bytes) -> None:
        if len(secret) < KEY_MIN_BYTES:
            raise ValueError(f"the fleet key holds {len(secret)} bytes; it must hold at least {KEY_MIN_BYTES}")
        self._sign = hmac.digest(secret, b"kquota fleet usage record", "sha256")
        self._entity = hmac.digest(secret, b"kquota fleet entity key", "sha256")

    def entity(self, quota_type: str, user: str, client_id: str) -> int:
        """The 64-bit key naming an entity's sensor in usage records."""
        mac = hmac.digest(self._entity, f"{quota_type}\0{user}\0{client_id}".encode(), "sha256")
        return int.from_bytes(mac[:8], "little")

    def topic(self, quota_type: str, topic: str) -> int:
        """The 64-bit key naming a topic quota's sensor in usage records (a client sensor's
        first field is its quota type, never ``topic``, so the two never meet)."""
        mac = hmac.digest(self._entity, f"topic\0{quota_type}\0{topic}".encode(), "sha256")
        return int.from_bytes(mac[:8], "little")

    def sign(self, member: bytes, body: bytes) -> bytes:
        """The signature of a record's ``body`` written by ``member``."""
        return hmac.digest(self._sign, len(member).to_bytes(2, "little") + member + body, "sha256")


def read_key_file(path: str) -> UsageKey:
    """The fleet's key from a file: its bytes without surrounding whitespace (so a line of
    ``openssl rand -hex 32`` will do).

    Raises:
        ValueError: the file cannot be read, is larger than 64 KiB or its key is too short (one
            line naming the file).
    """
    try:
        with open(path, "rb") as f:
            secret = f.read(_KEY_FILE_MAX_BYTES + 1)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    if len(secret) > _KEY_FILE_MAX_BYTES:
        raise ValueError(f"{path} is larger than {_KEY_FILE_MAX_BYTES} bytes: not a key file")
    secret = secret.strip()
    if len(secret) < KEY_MIN_BYTES:
        raise ValueError(f"{path} holds a key of {len(secret)} bytes; it must hold at least {KEY_MIN_BYTES} "
                         "(e.g. openssl rand -hex 32)")
    return UsageKey(secret)


@dataclass
class Usage:
    """One usage report (decoded: one part of it)."""

    full: bool
    interval_ms: int
    time_ms: int
    sequence: int
    rates: dict[int, float] = field(default_factory=dict)
    part: int = 0
    parts: int = 1


def encode(usage: Usage, member: bytes, key: UsageKey) -> list[bytes]:
    """A report's record values, signed: one per :data:`MAX_ENTRIES` entities (one at least).

    Raises:
        ValueError: more entities than :data:`MAX_PARTS` parts hold.
    """
    items = list(usage.rates.items())
    parts = max(1, math.ceil(len(items) / MAX_ENTRIES))
    if parts > MAX_PARTS:
        raise ValueError(f"a usage report holds at most {MAX_PARTS * MAX_ENTRIES} entities, got {len(items)}")
    values = []
    for part in range(parts):
        chunk = items[part * MAX_ENTRIES:(part + 1) * MAX_ENTRIES]
        body = bytearray(_HEADER.pack(_VERSION, _FULL if usage.full else 0, min(usage.interval_ms, 65535),
                                      usage.time_ms, usage.sequence & 0xFFFFFFFF, part, parts, len(chunk)))
        for h, rate in chunk:
            body += _ENTRY.pack(h, _pack_rate(rate))
        values.append(bytes(body + key.sign(member, bytes(body))))
    return values


def _pack_rate(rate: float) -> int:
    level = min(round(math.log2(1.0 + abs(rate)) * _STEPS), _SATURATED_BIT - 1)
    return level | (_SATURATED_BIT if rate < 0 else 0)


def _unpack_rate(packed: int) -> float:
    rate = 2.0 ** ((packed & ~_SATURATED_BIT) / _STEPS) - 1.0
    return -rate if packed & _SATURATED_BIT else rate


def decode(value: bytes, member: bytes, key: UsageKey) -> Usage:
    """Reads one record's value written by ``member`` once its signature holds; raises
    :class:`CorruptUsage`."""
    if value[:1] == bytes([_UNSIGNED_VERSION]):
        raise CorruptUsage("unsigned", "usage record of version 1 is unsigned")
    if len(value) < _HEADER.size + _MAC_BYTES:
        raise CorruptUsage("malformed", f"usage record of {len(value)} bytes is shorter than its header and signature")
    if value[0] != _VERSION:
        raise CorruptUsage("version", f"usage record version {value[0]} is not {_VERSION}")
    body, mac = value[:-_MAC_BYTES], value[-_MAC_BYTES:]
    if not hmac.compare_digest(mac, key.sign(member, body)):
        raise CorruptUsage("signature", "usage record signature does not match the fleet key")
    _, flags, interval, time_ms, seq, part, parts, count = _HEADER.unpack_from(body)
    if len(body) != _HEADER.size + count * _ENTRY.size or count > MAX_ENTRIES:
        raise CorruptUsage("malformed", f"usage record of {len(value)} bytes does not hold {count} entries")
    if not part < parts <= MAX_PARTS:
        raise CorruptUsage("malformed", f"usage record part {part} of {parts} (at most {MAX_PARTS})")
    rates = {h: _unpack_rate(r) for h, r in _ENTRY.iter_unpack(body[_HEADER.size:])}
    return Usage(bool(flags & _FULL), interval, time_ms, seq, rates, part, parts)


def changed(before: float, now: float) -> bool:
    """Whether a rate moved enough to be reported between full snapshots."""
    if (before < 0) != (now < 0) or (before == 0) != (now == 0):
        return True
    if now < 0:
        return False  # saturated stays saturated: the level does not matter
    return abs(now - before) > CHANGE * max(abs(before), 1.0)
