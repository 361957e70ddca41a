"""The throttle a produce or fetch response carries when byte-rate and request quotas both apply.

Kafka's broker (``KafkaApis.handleProduceRequest`` / ``handleFetchRequest``) records both the
bytes and the request's thread time, sends the larger of the two throttles in the response, and
mutes the channel under the quota that produced it: the byte-rate quota only when its throttle is
strictly larger, otherwise the request quota. A produce request with ``acks=0`` gets no response,
so Kafka does not record its request time at all.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from kquota._kquota import QuotaValueError
from kquota.quota_type import ClientQuotaType

#: Kafka's ``throttle_time_ms`` response field is an int32.
_MAX_THROTTLE_MS = 2**31 - 1


class ResponseThrottle(NamedTuple):
    """What to put in the response and which quota's throttle to enforce."""

    #: The ``throttle_time_ms`` field of the response: the larger of the two throttles.
    throttle_time_ms: int
    #: The quota whose throttle the channel is muted for; ``None`` when there is no throttle.
    enforce: Optional[ClientQuotaType]


def response_throttle(
    byte_quota_type: ClientQuotaType, byte_throttle_ms: int, request_throttle_ms: int
) -> ResponseThrottle:
    """Combines a byte-rate throttle (PRODUCE or FETCH) with a request-time throttle like Kafka.

    >>> from kquota import ClientQuotaType as Q
    >>> r = response_throttle(Q.PRODUCE, 300, 120)
    >>> r.throttle_time_ms, r.enforce.name
    (300, 'PRODUCE')
    >>> r = response_throttle(Q.FETCH, 50, 50)   # a tie is enforced as a request-quota throttle
    >>> r.throttle_time_ms, r.enforce.name
    (50, 'REQUEST')
    >>> response_throttle(Q.FETCH, 0, 0)
    ResponseThrottle(throttle_time_ms=0, enforce=None)
    """
    if not isinstance(byte_quota_type, ClientQuotaType) or byte_quota_type not in (
        ClientQuotaType.PRODUCE,
        ClientQuotaType.FETCH,
    ):
        raise QuotaValueError(f"byte_quota_type must be PRODUCE or FETCH, got {byte_quota_type!r}")
    for name, v in (("byte_throttle_ms", byte_throttle_ms), ("request_throttle_ms", request_throttle_ms)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if not 0 <= v <= _MAX_THROTTLE_MS:
            # The record calls return at most 2^31 - 1 (Kafka's int32 field).
            raise QuotaValueError(f"{name} must be from 0 to 2^31 - 1 ms, got {v}")
    throttle = max(byte_throttle_ms, request_throttle_ms)
    if throttle == 0:
        return ResponseThrottle(0, None)
    if byte_throttle_ms > request_throttle_ms:
        return ResponseThrottle(throttle, byte_quota_type)
    return ResponseThrottle(throttle, ClientQuotaType.REQUEST)
