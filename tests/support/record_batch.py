"""Kafka's v2 record batch (magic 2, no compression, no producer id), built by hand for tests
that write Produce requests on the wire: the checksum, the zigzag varints and the batch."""

from __future__ import annotations

import struct
import time


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the record batch's checksum."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def varint(n: int) -> bytes:
    """A zigzag varint, as records encode their fields."""
    n = (n << 1) ^ (n >> 63)
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def record_batch(values: list[bytes]) -> bytes:
    """A v2 record batch of ``values`` (one record each, no key, no headers), as any producer
    sends it."""
    records = b""
    for i, v in enumerate(values):
        body = b"\0" + varint(0) + varint(i) + varint(-1) + varint(len(v)) + v + varint(0)
        records += varint(len(body)) + body
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, now, now, -1, -1, -1, len(values)) + records
    tail = struct.pack(">ib", -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(tail)) + tail
