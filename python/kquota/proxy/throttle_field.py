"""The ``ThrottleTimeMs`` field of a response: the proxy's throttle written into it, as
max(broker's, proxy's). Only the field: the throttle itself is the kernel's response step
(``ClientHandle.request_response``), Produce's and Fetch's the native data plane's.

The responses patched here begin with ``ThrottleTimeMs`` (:data:`THROTTLE_FIRST`), patched in
place; ApiVersions' is written by its clamp (:mod:`kquota.proxy.api_versions`), Produce's (after
its partition responses) natively.
"""

from __future__ import annotations

import struct

from kquota.kafka.protocol.codec import read_fixed
from kquota.kafka.protocol.frames import with_prefix
from kquota.kafka.protocol.schemas import THROTTLE_FIRST

_I32 = struct.Struct(">i")


def patch_throttle(frame: bytes, api_key: int, version: int, body_offset: int, throttle_ms: int) -> bytes:
    """The response (prefixed) with ``ThrottleTimeMs`` = max(broker's, ``throttle_ms``); a
    response version without the field at its start is returned unchanged (the mute still
    applies)."""
    out = with_prefix(frame)
    first = THROTTLE_FIRST.get(api_key)
    if throttle_ms <= 0 or first is None or version < first:
        return out
    patched = bytearray(out)
    at = 4 + body_offset
    if read_fixed(_I32, patched, at, "ThrottleTimeMs") < throttle_ms:
        _I32.pack_into(patched, at, throttle_ms)
    return bytes(patched)
