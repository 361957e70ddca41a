"""The status page's data: one bounded snapshot of a :class:`~kquota.QuotaManager` and the sources
beside it (the config watcher's store, a fleet, shadow predictions), served by the metrics port
as ``/status.json`` and rendered as ``/`` (:mod:`kquota.status_html`).

Every part is bounded whatever the load: at most ``max_rows`` rows per table (the smaller of
:data:`PAGE_MAX_ENTITIES` and ``kquota.metrics.max.entities``), the rest counted; every name (a
client id, a user, a member id, an error message: hostile input) is cut to :data:`NAME_MAX_CHARS`
characters with its control and formatting characters (bidi overrides among them) written as
visible escapes. NaN (unlimited) is ``null`` in the JSON.

The sources are callables taking the row bound, so anything can feed a section:

* ``store``: :meth:`kquota.watcher.QuotaConfigWatcher.status`;
* ``fleet``: :meth:`kquota.proxy.fleet.FleetCoordinator.status`;
* ``shadow``: returns a :class:`ShadowReport`, or ``None`` when there is no shadow configuration.

A source that raises shows its error in its section instead of failing the page.

>>> import kquota
>>> from kquota.status import StatusPage
>>> qm = kquota.QuotaManager(expiry_interval_seconds=None)
>>> qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
>>> qm.record_no_throttle("produce", "alice", "app", 50_000, now_ms=1000)
>>> snap = StatusPage(qm).snapshot(now_ms=1000)
>>> [(r["client_id"], r["throttled"]) for r in snap["throttled"]["rows"]]
[('app', True)]
>>> qm.close()
"""

from __future__ import annotations

import json
import logging
import math
import time
import unicodedata
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Sequence

from kquota.callback import ENCODED_TAGS_PREFIX, decode_tags
from kquota.exceptions import QuotaValueError
from kquota.utilization import DEFAULT_MAX_ENTITIES, UtilizationRow, check_max_entities

if TYPE_CHECKING:
    from kquota.manager import QuotaManager

log = logging.getLogger("kquota.status")

#: Rows per table at most (fewer when ``kquota.metrics.max.entities`` is smaller).
PAGE_MAX_ENTITIES = 50
#: Characters of a name shown at most; a longer one is cut and says how much was left out.
NAME_MAX_CHARS = 120
#: Seconds between two refreshes of the page.
REFRESH_SECONDS = 5
#: Recent store errors shown at most.
MAX_ERRORS = 5
#: Unicode categories written as escapes: controls, formatting (bidi overrides, zero-width
#: joiners), line and paragraph separators, surrogates.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


class ShadowRow(NamedTuple):
    """One entity as a shadow configuration would treat it: its quota type (Kafka's metric group:
    ``Produce``, ``Fetch``, ...), ``user`` and ``client_id``, measured ``rate``, the ``quota`` in
    force (``None``: unlimited), the ``shadow_quota`` the shadow configuration would give it
    (``None``: unlimited there), whether that bound would throttle it now, and the shadow's
    totals so far: the would-be throttle time (``throttle_time_ms``) and would-be delayed bytes
    (``delayed_bytes``; :mod:`kquota.proxy.shadow`)."""

    quota_type: str
    user: str
    client_id: str
    rate: float
    quota: Optional[float]
    shadow_quota: Optional[float]
    would_throttle: bool
    throttle_time_ms: int = 0
    delayed_bytes: int = 0


class ShadowReport(NamedTuple):
    """What a shadow source returns: what the predictions come from (``label``, e.g. the shadow
    store's URL), the ``rows`` (at most the bound it was called with; more are cut) and how many
    entities were left out (``rest``)."""

    label: str
    rows: Sequence[ShadowRow]
    rest: int = 0


#: A section's source: called with the row bound, returns the section's data (``None``: the
#: section is not configured).
Source = Callable[[int], Any]


def shown_name(value: object, limit: int = NAME_MAX_CHARS) -> str:
    """``value`` as text safe to show: hidden characters as ``\\xNN`` / ``\\uNNNN`` escapes and at
    most ``limit`` characters, a longer one cut with ``…(+N chars)``. Only the first ``limit``
    characters are ever looked at, so a 1 MB name costs what a short one does."""
    text = value if isinstance(value, str) else str(value)
    head = text[:limit + 1]
    out = []
    for c in head:
        if unicodedata.category(c) in _HIDDEN:
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(c)
    shown = "".join(out)
    if len(text) > limit or len(shown) > limit:
        return f"{shown[:limit]}…(+{len(text) - min(len(text), limit)} chars)"
    return shown


def _number(value: Optional[float]) -> Optional[float]:
    return None if value is None or not math.isfinite(value) else float(value)


def _entity(user: str, client_id: str) -> tuple[str, str]:
    """The (user, client-id) to show; a callback's tag map as ``k=v, ...`` in the user column."""
    if user.startswith(ENCODED_TAGS_PREFIX):
        try:
            tags = decode_tags(user, client_id)
            return ", ".join(f"{k}={v}" for k, v in tags.items()), ""
        except (ValueError, TypeError):
            pass
    return user, client_id


def _order(row: UtilizationRow) -> tuple:
    # Highest utilization first, unlimited (NaN) last; then the highest rate.
    u = row.utilization
    return (0 if math.isfinite(u) else 1, -u if math.isfinite(u) else 0.0, -row.rate, row.user, row.client_id)


def _row(r: UtilizationRow) -> dict[str, Any]:
    user, client_id = _entity(r.user, r.client_id)
    return {"quota_type": r.quota_type.metric_group, "user": shown_name(user), "client_id": shown_name(client_id),
            "rate": _number(r.rate), "quota": _number(r.quota), "level": r.level,
            "utilization": _number(r.utilization), "throttled": bool(r.throttled)}


def _total(value: object) -> int:
    """A total (ms, bytes) as an int >= 0: anything else (negative, NaN, not a number) is 0."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0
    return int(min(v, 2.0 ** 63 - 1)) if math.isfinite(v) and v > 0 else 0


def _shadow(report: Optional[ShadowReport], k: int) -> Optional[dict[str, Any]]:
    if report is None:
        return None
    rows = []
    for s in list(report.rows)[:k]:
        util = s.rate / s.shadow_quota * 100 if s.shadow_quota is not None and s.shadow_quota > 0 else None
        rows.append({"quota_type": shown_name(s.quota_type), "user": shown_name(s.user),
                     "client_id": shown_name(s.client_id), "rate": _number(s.rate), "quota": _number(s.quota),
                     "shadow_quota": _number(s.shadow_quota), "shadow_utilization": _number(util),
                     "would_throttle": bool(s.would_throttle), "throttle_time_ms": _total(s.throttle_time_ms),
                     "delayed_bytes": _total(s.delayed_bytes)})
    # Those it would throttle now first, then by would-be throttle time, then by shadow utilization.
    rows.sort(key=lambda r: (not r["would_throttle"], -r["throttle_time_ms"], r["shadow_utilization"] is None,
                             -(r["shadow_utilization"] or 0.0)))
    return {"label": shown_name(report.label), "rows": rows,
            "more": max(0, int(report.rest)) + max(0, len(report.rows) - k)}


class StatusPage:
    """The status page of one manager and its sources (see the module docstring).

    Args:
        qm: the quota manager.
        max_entities: ``kquota.metrics.max.entities``; the tables show the smaller of it and
            ``page_entities`` rows.
        page_entities: :data:`PAGE_MAX_ENTITIES` unless given.
        store, fleet, shadow: the sections' sources (``None``: not configured).
        refresh_seconds: seconds between two refreshes of the page.
    """

    def __init__(self, qm: "QuotaManager", *, max_entities: int = DEFAULT_MAX_ENTITIES,
                 page_entities: int = PAGE_MAX_ENTITIES, store: Optional[Source] = None,
                 fleet: Optional[Source] = None, shadow: Optional[Source] = None,
                 refresh_seconds: int = REFRESH_SECONDS) -> None:
        self.qm = qm
        self.max_rows = min(check_max_entities(max_entities), check_max_entities(page_entities))
        self.store, self.fleet, self.shadow = store, fleet, shadow
        if isinstance(refresh_seconds, bool) or not isinstance(refresh_seconds, int) or not 1 <= refresh_seconds <= 3600:
            raise QuotaValueError(f"refresh_seconds must be an int in [1, 3600], got {refresh_seconds!r}")
        self.refresh_seconds = refresh_seconds

    def _source(self, name: str, source: Optional[Source], convert: Callable[[Any], Any]) -> Any:
        if source is None:
            return None
        try:
            return convert(source(self.max_rows))
        except Exception as e:  # noqa: BLE001 - one broken source must not take the page down
            log.debug("status source %s failed", name, exc_info=True)
            return {"error": shown_name(f"{type(e).__name__}: {e}")}

    def snapshot(self, now_ms: Optional[int] = None) -> dict[str, Any]:
        """The page's data as JSON-ready values, every part bounded (see the module docstring).
        ``now_ms`` is the time rates are measured at, as :meth:`kquota.QuotaManager.utilization`."""
        k = self.max_rows
        u = self.qm.utilization(k, now_ms)
        ordered = sorted(u.rows, key=_order)
        throttled = [r for r in ordered if r.throttled]
        rest = sum(r.entities for r in u.rest)
        return {
            "generated_at": time.time(),
            "now_ms": u.now_ms,
            "refresh_seconds": self.refresh_seconds,
            "max_rows": k,
            "entities": {"rows": [_row(r) for r in ordered[:k]], "total": len(ordered) + rest,
                         "more": max(0, len(ordered) - k) + rest},
            "throttled": {"rows": [_row(r) for r in throttled[:k]], "total": len(throttled),
                          "more": max(0, len(throttled) - k)},
            "shadow": self._source("shadow", self.shadow, lambda report: _shadow(report, k)),
            "fleet": self._source("fleet", self.fleet, lambda view: view),
            "store": self._source("store", self.store, lambda view: view),
        }

    def json(self, now_ms: Optional[int] = None) -> bytes:
        """:meth:`snapshot` as UTF-8 JSON (``/status.json``)."""
        return json.dumps(self.snapshot(now_ms), ensure_ascii=False, allow_nan=False).encode()

    def html(self, now_ms: Optional[int] = None) -> bytes:
        """The page (``/``): :func:`kquota.status_html.render` of :meth:`snapshot`."""
        from kquota.status_html import render

        return render(self.snapshot(now_ms)).encode()
