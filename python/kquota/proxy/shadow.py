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

Status page (:class:`ShadowStatus`, the ``shadow`` source of :class:`kquota.status.StatusPage`):
per entity its quota now and the shadow's, its rate as the shadow measures it, the shadow's
totals, and whether the shadow would throttle it now.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from kquota.metrics import Metric
from kquota.quota_type import ClientQuotaType

if TYPE_CHECKING:
    from kquota.manager import QuotaManager
    from kquota.status import ShadowReport

#: Kafka-style metric names (group: the quota type's, e.g. ``Produce``).
SHADOW_THROTTLE_TIME = "shadow-throttle-time-total"
SHADOW_DELAYED_BYTES = "shadow-delayed-bytes-total"
#: The tags of the row summing the entities beyond the bound.
REST_TAGS = {"entity": "other"}

__all__ = ["REST_TAGS", "SHADOW_DELAYED_BYTES", "SHADOW_THROTTLE_TIME", "ShadowPrediction", "ShadowStatus",
           "predictions", "shadow_metrics"]


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


class ShadowStatus:
    """The status page's shadow section of a proxy with a shadow configuration: called with the
    row bound, returns a :class:`kquota.status.ShadowReport` labelled ``label`` (the shadow
    store's URL).

    Rows, by the shadow's metric tags (the entities its sensors stand for, as the rest of the page
    names them): every entity with a prediction (``predictions()``, e.g.
    :meth:`kquota.proxy.server.ProxyServer.shadow_predictions`, whose raw users and client ids
    are summed under their tags) and the shadow kernel's limited entities by utilization
    (:meth:`kquota.QuotaManager.utilization` of ``shadow_qm``) that no prediction covers. Each
    with its quota in force (``qm``, for the first raw entity seen under those tags), the
    shadow's quota and the rate the shadow measures (the traffic its would-be mute lets through,
    so near the shadow quota for an entity it throttles). *Would throttle now*: its
    rate is over the shadow quota now, or its would-be throttle time grew within the shadow's
    quota window (``window_num x window_size_seconds``) — the rate alone flickers around the
    quota of an entity the shadow throttles. Sorted as the page shows them (would throttle
    first, then by throttle time), the bound's first rows returned, the rest counted."""

    def __init__(self, label: str, qm: "QuotaManager", shadow_qm: "QuotaManager",
                 predictions: Callable[[], list[ShadowPrediction]], clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.qm, self.shadow_qm, self.predictions = qm, shadow_qm, predictions
        self.clock = clock
        self.window_s = float(shadow_qm.window_num * shadow_qm.window_size_seconds)
        # Per prediction key: its last throttle total and when it was seen to grow; bounded by
        # the predictions' own bound (the kernel's MAX_SHADOW_ENTITIES).
        self._grew: dict[tuple, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def __call__(self, max_rows: int) -> "ShadowReport":
        from kquota.status import ShadowReport, ShadowRow

        now = self.clock()
        preds = [p for p in self.predictions() if p.user is not None]
        qm, shadow = self.qm, self.shadow_qm
        with self._lock:
            grew: dict[tuple, tuple[int, float]] = {}
            for p in preds:
                key = (p.quota_type, p.user, p.client_id)
                last, at = self._grew.get(key, (0, now))
                grew[key] = (p.throttle_time_ms, now if p.throttle_time_ms > last else at)
            self._grew = grew
        # The predictions by the shadow's metric tags (what its sensors share, as the rest of
        # the page shows entities): totals summed, the first raw entity kept for the lookups.
        entities: dict[tuple, list] = {}
        for p in preds:
            user, client = p.user or "", p.client_id or ""
            tags = shadow.quota_metric_tags(p.quota_type, user, client)
            key = (p.quota_type, tags.get("user", ""), tags.get("client-id", ""))
            recent = p.throttle_time_ms > 0 and now - grew[(p.quota_type, p.user, p.client_id)][1] <= self.window_s
            e = entities.setdefault(key, [user, client, 0, 0, False])
            e[2] += p.throttle_time_ms
            e[3] += p.delayed_bytes
            e[4] = e[4] or recent
        rows: list[ShadowRow] = []
        for (t, tag_user, tag_client), (user, client, throttle_ms, delayed, recent) in entities.items():
            shadow_quota = shadow.quota_limit(t, user, client)
            rate = shadow.measured_rate(t, user, client)
            over = shadow_quota is not None and rate > shadow_quota
            rows.append(ShadowRow(t.metric_group, tag_user, tag_client, rate, qm.quota_limit(t, user, client),
                                  shadow_quota, over or recent, throttle_ms, delayed))
        u = shadow.utilization(max_rows)
        for r in u.rows:
            if (r.quota_type, r.user, r.client_id) in entities or r.quota is None:
                continue
            rows.append(ShadowRow(r.quota_type.metric_group, r.user, r.client_id, r.rate,
                                  qm.quota_limit(r.quota_type, r.user, r.client_id), r.quota, bool(r.throttled)))
        rows.sort(key=lambda s: (not s.would_throttle, -s.throttle_time_ms,
                                 -(s.rate / s.shadow_quota if s.shadow_quota else 0.0)))
        rest = max(0, len(rows) - max_rows) + sum(r.entities for r in u.rest)
        return ShadowReport(self.label, rows[:max_rows], rest)
