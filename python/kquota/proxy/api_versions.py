"""ApiVersions: clamp what the broker offers to what the proxy parses (a newer client never sends
the proxy a version it cannot read), and add the APIs the proxy answers itself."""

from __future__ import annotations

from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import decode_body, encode_body
from kquota.kafka.protocol.frames import response_frame, with_prefix


def clamp_api_versions(frame: bytes, version: int, throttle_ms: int = 0) -> bytes:
    """The ApiVersions response frame (no size prefix) rewritten, with throttle = max(broker's,
    ``throttle_ms``); returns a prefixed frame."""
    corr = int.from_bytes(frame[:4], "big", signed=True)
    if len(frame) >= 6 and int.from_bytes(frame[4:6], "big", signed=True) != 0:
        # An error (UNSUPPORTED_VERSION: the client retries with a version from this list):
        # relayed untouched, since brokers disagree on its encoding (Kafka uses v0, librdkafka's
        # mock cluster its own); the retry's answer is clamped.
        return with_prefix(frame)
    body = decode_body("ApiVersionsResponse", version, frame, 4)
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


def unsupported_api_versions(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions request of a version it does not support
    (``ApiVersionsRequest.getErrorResponse``): ``UNSUPPORTED_VERSION`` and, since KIP-511, the
    ApiVersions versions it does support, in a v0 body (the only one every client reads); a
    prefixed frame."""
    lo, hi = apis.PARSED_VERSIONS[apis.API_VERSIONS]
    body = {"ErrorCode": apis.UNSUPPORTED_VERSION,
            "ApiKeys": [{"ApiKey": apis.API_VERSIONS, "MinVersion": lo, "MaxVersion": hi}]}
    return response_frame(correlation_id, apis.API_VERSIONS, 0, encode_body("ApiVersionsResponse", 0, body))
