"""The throttle a produce or fetch response carries when byte-rate and request quotas both apply.

Kafka's broker (``KafkaApis.handleProduceRequest`` / ``handleFetchRequest``) records both the
bytes and the request's thread time, sends the larger of the two throttles in the response, and
mutes the channel under the quota that produced it: the byte-rate quota only when its throttle is
strictly larger, otherwise the request quota. A produce request with ``acks=0`` gets no response,
so Kafka does not record its request time at all.

This is the pure rule. The whole step, which also records the enforced throttle into the
entity's ``throttle-time`` (``ClientQuotaManager.throttle``), is ``ClientHandle.throttle_response``
(and ``produce_response`` / ``fetch_response`` / ``request_response`` with the records); the proxy
and :class:`kquota.aio.ThrottledConnection` use those.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from kquota._kquota import combine_throttles
from kquota.exceptions import QuotaValueError
from kquota.quota_type import ClientQuotaType


class ResponseThrottle(NamedTuple):
    """What to put in the response and which quota's throttle to enforce."""

    #: The ``throttle_time_ms`` field of the response: the larger of the two throttles.
    throttle_time_ms: int
    #: The quota whose throttle the channel is muted for; ``None`` when there is no throttle.
    enforce: Optional[ClientQuotaType]


def response_throttle(
    byte_quota_type: ClientQuotaType, byte_throttle_ms: int, request_throttle_ms: int
) -> ResponseThrottle:
    """Combines a byte-rate throttle (PRODUCE or FETCH), or the controller-mutation throttle of a
    KIP-599 request (CONTROLLER_MUTATION), with a request-time throttle like Kafka.

    >>> from kquota import ClientQuotaType as Q
    >>> r = response_throttle(Q.PRODUCE, 300, 120)
    >>> r.throttle_time_ms, r.enforce.name
    (300, 'PRODUCE')
    >>> r = response_throttle(Q.FETCH, 50, 50)   # a tie is enforced as a request-quota throttle
    >>> r.throttle_time_ms, r.enforce.name
    (50, 'REQUEST')
    >>> response_throttle(Q.CONTROLLER_MUTATION, 20, 10).enforce.name
    'CONTROLLER_MUTATION'
    >>> response_throttle(Q.FETCH, 0, 0)
    ResponseThrottle(throttle_time_ms=0, enforce=None)
    """
    for name, v in (("byte_throttle_ms", byte_throttle_ms), ("request_throttle_ms", request_throttle_ms)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if not isinstance(byte_quota_type, ClientQuotaType):
        raise QuotaValueError(f"byte_quota_type must be PRODUCE, FETCH or CONTROLLER_MUTATION, got {byte_quota_type!r}")
    # The rule is the kernel's (quota_core::combine_throttles), as the proxy and kquota.aio use it.
    return ResponseThrottle(*combine_throttles(byte_quota_type, byte_throttle_ms, request_throttle_ms))
