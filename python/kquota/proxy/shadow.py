"""Shadow quotas: a second quota configuration evaluated on the proxy's traffic and never enforced.

``kquota proxy --shadow-store URL`` follows a second store into a second ``QuotaManager``; the
native data plane steps its kernel right after the enforced one on every response, with the
same sizes and clock, and never writes its throttle into a response nor mutes on it. Per entity
(raw user and client id) and quota type it totals:

* the *would-be throttle time*: the sum of the throttles the shadow gives the responses of the
  would-be client, the one it would have throttled. A shadow throttle of ``t`` ms mutes that
  client for ``t`` ms (KIP-219), so the responses the proxy sees meanwhile are of requests it
  could not have sent then: they are held as that client's backlog (as a producer's buffer
  holds them) and recorded after its mute, request by request until one is throttled, and
* the *would-be delayed bytes* (Produce and Fetch): what that backlog grows by, the bytes the
  quota holds back.

So what the shadow predicts is what enforcing its configuration gives a client sending at the
rate it sends now: after ``kquota configs --promote-shadow``, over a window of the same length,
its throttle time and its throttled bytes (what it wanted to send beyond what its quota let
through). ``benches/bench_shadow.py`` measures how close (``benches/results/shadow.md``).

Metrics (:func:`shadow_metrics`, on the proxy's metrics port): per quota type
``kafka_server_<type>_shadow_throttle_time_total`` (ms) and
``kafka_server_<type>_shadow_delayed_bytes_total``, labelled ``user`` and ``client_id``; the
entities beyond the kernel's bound summed under ``entity="other"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from kquota.metrics import Metric
from kquota.quota_type import ClientQuotaType

#: Kafka-style metric names (group: the quota type's, e.g. ``Produce``).
SHADOW_THROTTLE_TIME = "shadow-throttle-time-total"
SHADOW_DELAYED_BYTES = "shadow-delayed-bytes-total"
#: The tags of the row summing the entities beyond the bound.
REST_TAGS = {"entity": "other"}

__all__ = ["REST_TAGS", "SHADOW_DELAYED_BYTES", "SHADOW_THROTTLE_TIME", "ShadowPrediction", "predictions",
           "shadow_metrics"]


@dataclass(frozen=True)
class ShadowPrediction:
    """One entity's shadow totals for one quota type since the proxy started: ``user`` and
    ``client_id`` raw (both ``None`` for the entities beyond the bound, summed)."""

    user: Optional[str]
    client_id: Optional[str]
    quota_type: ClientQuotaType
    #: The would-be throttle time, ms.
    throttle_time_ms: int
    #: The would-be delayed bytes (0 for ``REQUEST``).
    delayed_bytes: int


def predictions(rows: list[tuple[Optional[str], Optional[str], int, int, int]]) -> list[ShadowPrediction]:
    """The native plane's ``shadow_totals()`` rows as :class:`ShadowPrediction`."""
    return [ShadowPrediction(user, client, ClientQuotaType(t), int(ms), int(delayed))
            for user, client, t, ms, delayed in rows]


def shadow_metrics(preds: list[ShadowPrediction]) -> list[Metric]:
    """``preds`` as metric rows (:data:`SHADOW_THROTTLE_TIME`, :data:`SHADOW_DELAYED_BYTES`)."""
    out = []
    for p in preds:
        tags: dict[str, Any] = dict(REST_TAGS) if p.user is None else {"user": p.user, "client-id": p.client_id}
        group = p.quota_type.metric_group
        out.append(Metric(group, SHADOW_THROTTLE_TIME, tags, float(p.throttle_time_ms)))
        if p.quota_type is not ClientQuotaType.REQUEST:
            out.append(Metric(group, SHADOW_DELAYED_BYTES, tags, float(p.delayed_bytes)))
    return out
