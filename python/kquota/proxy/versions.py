"""ApiVersions: clamp what the broker offers to what the proxy parses (a newer client never sends
the proxy a version it cannot read), and add the APIs the proxy answers itself."""

from __future__ import annotations

from kquota.proxy import apis
from kquota.proxy.codec import CodecError, decode_body, encode_body
from kquota.proxy.frames import response_frame


def clamp_api_versions(frame: bytes, version: int, throttle_ms: int = 0) -> bytes:
    """The ApiVersions response frame (no size prefix) rewritten, with throttle = max(broker's,
    ``throttle_ms``); returns a prefixed frame."""
    corr = int.from_bytes(frame[:4], "big", signed=True)
    try:
        body = decode_body("ApiVersionsResponse", version, frame, 4)
    except CodecError:
        body = None
    if body is None or body.get("ErrorCode") == apis.UNSUPPORTED_VERSION:
        # The broker answers an unsupported request version in v0 form (Kafka's rule).
        version = 0
        body = decode_body("ApiVersionsResponse", 0, frame, 4)
    keys = []
    seen = set()
    for entry in body["ApiKeys"]:
        key = entry["ApiKey"]
        seen.add(key)
        if key in apis.ANSWERED_BY_PROXY:
            lo, hi = apis.PARSED_VERSIONS[key]
            entry = dict(entry, MinVersion=lo, MaxVersion=hi)
        elif key in apis.PARSED_VERSIONS:
            lo, hi = apis.PARSED_VERSIONS[key]
            new_lo, new_hi = max(lo, entry["MinVersion"]), min(hi, entry["MaxVersion"])
            if new_lo > new_hi:
                continue  # no version both sides speak: not offered
            entry = dict(entry, MinVersion=new_lo, MaxVersion=new_hi)
        keys.append(entry)
    for key in apis.ANSWERED_BY_PROXY:
        if key not in seen:
            lo, hi = apis.PARSED_VERSIONS[key]
            keys.append({"ApiKey": key, "MinVersion": lo, "MaxVersion": hi})
    keys.sort(key=lambda e: e["ApiKey"])
    body["ApiKeys"] = keys
    if version >= 1:
        body["ThrottleTimeMs"] = max(body.get("ThrottleTimeMs", 0), throttle_ms)
    return response_frame(corr, apis.API_VERSIONS, version, encode_body("ApiVersionsResponse", version, body))
