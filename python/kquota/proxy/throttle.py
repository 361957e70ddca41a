"""Writing the proxy's throttle into responses: ``throttle_time_ms`` = max(broker's, proxy's).

Most responses begin with ``ThrottleTimeMs`` (patched in place); Produce keeps it after the
partition responses, so its (small) responses are re-encoded.
"""

from __future__ import annotations

import struct
from typing import Optional

from kquota.proxy import apis
from kquota.proxy.codec import decode_body, encode_body, read_fixed
from kquota.proxy.frames import response_frame, with_prefix
from kquota.proxy.schemas import THROTTLE_FIRST

_I32 = struct.Struct(">i")


def has_throttle_field(api_key: int, version: int) -> bool:
    """Whether this response version carries ``throttle_time_ms`` (else only the mute applies)."""
    if api_key == apis.PRODUCE or api_key == apis.API_VERSIONS:
        return version >= 1
    first = THROTTLE_FIRST.get(api_key)
    return first is not None and version >= first


def broker_throttle_first(frame: bytes, api_key: int, version: int, body_offset: int) -> int:
    """The broker's throttle of a response that begins with ``ThrottleTimeMs`` (0 if none)."""
    first = THROTTLE_FIRST.get(api_key)
    if first is None or version < first or body_offset + 4 > len(frame):
        return 0
    return _I32.unpack_from(frame, body_offset)[0]


def patch_throttle(frame: bytes, api_key: int, version: int, body_offset: int, throttle_ms: int,
                   body: Optional[dict] = None) -> bytes:
    """The response (prefixed) with throttle = max(broker's, ``throttle_ms``)."""
    if throttle_ms <= 0 or not has_throttle_field(api_key, version):
        return with_prefix(frame)
    if api_key == apis.PRODUCE:
        if body is None:
            body = decode_body("ProduceResponse", version, frame, body_offset)
        body["ThrottleTimeMs"] = max(body.get("ThrottleTimeMs", 0), throttle_ms)
        corr = _I32.unpack_from(frame, 0)[0]
        return response_frame(corr, api_key, version, encode_body("ProduceResponse", version, body))
    if api_key == apis.API_VERSIONS:
        return with_prefix(frame)  # answered before any quota applies; clamped separately
    return patch_throttle_head(frame, len(frame), api_key, version, body_offset, throttle_ms)


def patch_throttle_head(head: bytes, size: int, api_key: int, version: int, body_offset: int,
                        throttle_ms: int) -> bytes:
    """The beginning ``head`` of a response of ``size`` bytes, prefixed with that size, with
    throttle = max(broker's, ``throttle_ms``): for a streamed response (its ``ThrottleTimeMs``
    comes first, so the head holds it; Produce and ApiVersions are never streamed)."""
    out = bytearray(_I32.pack(size))
    out += head
    if throttle_ms > 0 and has_throttle_field(api_key, version) and api_key in THROTTLE_FIRST:
        at = 4 + body_offset
        if read_fixed(_I32, out, at, "ThrottleTimeMs") < throttle_ms:
            _I32.pack_into(out, at, throttle_ms)
    return bytes(out)
