"""``kquota pipeline report``: one self-contained HTML file (inline CSS and SVG, no script, no
external resource) from the outputs of ``usage``, ``simulate`` and ``recommend``, with each long
table also written in full as a CSV file next to it (``<report>-simulation.csv``, ...):

* headline numbers (requests, throttled, delays);
* rate vs quota over time for the top entities (the busiest broker each second, since a quota
  holds on each broker), y-axes clipped at a high percentile so one burst does not flatten the
  rest (the caption says so);
* throttle distributions per quota type, from the simulation;
* the simulation summary, the recommendation and the top usage (top rows; legend of every
  column; the full table as CSV);
* when the log is a ``kquota proxy`` one with its observed columns (``usage``'s ``observed/``,
  :mod:`kquota.pipeline.observed`): per entity, the throttle the proxy enforced against the
  shadow configuration's would-be throttle and delayed bytes.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from html import escape
from typing import Any, Callable, NamedTuple, Optional, Sequence

from kquota.pipeline import units
from kquota.pipeline.svg import bar_chart, line_chart

BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000)
#: Rows of each table shown in the page; the CSV next to it has them all.
TOP_ROWS = 25
#: The rate charts' y-axes end a little above this percentile of the rates drawn (and above
#: the quota), so a burst of a few seconds does not flatten the rest; the caption says so.
CLIP_PERCENTILE = 97.5


class Column(NamedTuple):
    """One table column: its header, what it means (the legend), its cell text for a row, and
    the raw value written to the CSV."""

    header: str
    meaning: str
    text: Callable[[Any], str]
    raw: Callable[[Any], Any]
    #: The unit of the raw CSV value, added to the CSV header (``total delay (ms)``).
    csv_unit: str = ""


def csv_path(report_path: str, name: str) -> str:
    """``/x/report.html``, ``simulation`` -> ``/x/report-simulation.csv``."""
    base, _ = os.path.splitext(report_path)
    return f"{base}-{name}.csv"


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v) or v == ""


def _table_section(report_path: str, name: str, columns: Sequence[Column], rows: Sequence[Any],
                   order_note: str) -> str:
    """Top :data:`TOP_ROWS` rows as HTML with a legend; all rows as CSV next to the report.
    Columns empty in every row are left out of both."""
    import csv

    cols = [c for c in columns if any(not _blank(c.raw(r)) for r in rows)]
    path = csv_path(report_path, name)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([f"{c.header} ({c.csv_unit})" if c.csv_unit else c.header for c in cols])
        for r in rows:
            w.writerow(["" if _blank(v := c.raw(r)) else v for c in cols])
    shown = rows[:TOP_ROWS]
    # Text columns align left, numbers right (so digits line up).
    left = [not any(isinstance(c.raw(r), (int, float)) for r in rows) for c in cols]
    head = "".join(f"<th{' class=t' if t else ''}>{escape(c.header)}</th>" for c, t in zip(cols, left))
    body = "".join("<tr>" + "".join(f"<td{' class=t' if t else ''}>{escape(c.text(r))}</td>"
                                    for c, t in zip(cols, left)) + "</tr>" for r in shown)
    count_note = (f"Top {len(shown):,} of {len(rows):,} rows" if len(rows) > len(shown)
                  else f"All {len(rows):,} rows")
    link = os.path.basename(path)
    legend = "".join(f"<dt>{escape(c.header)}</dt><dd>{escape(c.meaning)}</dd>" for c in cols)
    return (f'<p class=tablenote>{count_note}, {escape(order_note)}. Full table: '
            f'<a href="{escape(link)}">{escape(link)}</a>.</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<dl class=legend>{legend}</dl>")


def throttle_histogram(requests: Any) -> Any:
    """Counts of throttled requests per quota type and throttle bucket (pandas)."""
    from pyspark.sql import functions as F

    bucket = F.lit(f">{BUCKETS[-1]}")
    for b in reversed(BUCKETS):
        bucket = F.when(F.col("throttle_ms") <= b, F.lit(f"≤{b}")).otherwise(bucket)
    return (requests.where(F.col("throttle_ms") > 0)
            .groupBy("quota_type", bucket.alias("bucket")).count().toPandas())


def rate_series(per_sec: Any, level: str, entities: Sequence[tuple[Any, Any, str]]) -> Any:
    """Per entity and second, the busiest broker's rate (pandas), for ``entities`` (user,
    client_id, quota_type) at ``level``."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not entities:
        return None
    conds = []
    for u, c, t in entities:
        cond = F.col("quota_type") == t
        cond = cond & (F.col("user") == u if u is not None else F.col("user").isNull())
        cond = cond & (F.col("client_id") == c if c is not None else F.col("client_id").isNull())
        conds.append(cond)
    return (per_sec.where((F.col("level") == level) & reduce(lambda a, b: a | b, conds))
            .groupBy("user", "client_id", "quota_type", "second").agg(F.max("rate").alias("rate"))
            .toPandas())


def _percentile(values: Sequence[float], p: float) -> float:
    v = sorted(values)
    if not v:
        return 0.0
    k = (len(v) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def rate_figure(label: str, quota_type: str, seconds: Sequence[float], rates: Sequence[float],
                quota: Optional[float]) -> str:
    """One rate-vs-quota chart with its caption, the y-axis clipped at :data:`CLIP_PERCENTILE`
    (but always showing the quota) when a few seconds are far above the rest."""
    unit = units.unit_of(quota_type) or "B/s"
    x0 = min(seconds) if len(seconds) else 0
    xs = [s - x0 for s in seconds]
    peak = max(rates) if len(rates) else 0.0
    cap_at = max(_percentile(rates, CLIP_PERCENTILE) * 1.25, (quota or 0.0) * 1.5)
    clipped = peak > cap_at * 1.1
    hl = [("quota", quota)] if quota is not None else []
    svg = line_chart(f"{label} · {quota_type}", [("rate", xs, rates)], hl, unit=unit,
                     y_cap=cap_at if clipped else None)
    caption = f"Busiest broker's {quota_type.lower()} rate each second"
    caption += f" against the quota of {units.rate(quota, unit)} (dashed)." if quota is not None else "."
    if clipped:
        above = sum(1 for r in rates if r > cap_at)
        caption += (f" Y-axis clipped above the {CLIP_PERCENTILE:g}th percentile: {above:,} second"
                    f"{'s' if above != 1 else ''} above it (▲), peak {units.rate(peak, unit)}.")
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def _bound(ms_text: str) -> str:
    """``"500"`` -> ``500 ms``, ``"10000"`` -> ``10 s``."""
    v = int(ms_text)
    return f"{v:,} ms" if v < 1000 else f"{v / 1000:g} s"


def throttle_figure(quota_type: str, buckets: Sequence[str], counts: Sequence[int]) -> str:
    """One throttle-time histogram with its caption. ``buckets``: ``≤500``, ``>30000`` (ms)."""
    total = int(sum(counts))
    labels = [f"{b[0]} {_bound(b[1:])}" for b in buckets]
    svg = bar_chart(f"{quota_type}: throttled requests by throttle time", labels, counts,
                    x_label="throttle time (upper bound of each bucket)")
    running, median = 0, labels[-1] if labels else ""
    for lab, c in zip(labels, counts):
        running += c
        if running * 2 >= total:
            median = lab
            break
    bound = median.split(" ", 1)[-1]
    half = f"at most {bound}" if median.startswith("≤") else f"more than {bound}"
    caption = f"{total:,} {quota_type} requests were throttled; half of them by {half}."
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def _cards(summary: Any, recommendation: Any) -> str:
    cards = []
    if summary is not None and len(summary):
        req = int(summary["requests"].sum())
        thr = int(summary["throttled_requests"].sum())
        cards += [("requests replayed", units.count(req)),
                  ("throttled", f"{units.count(thr)} ({units.share(thr / req if req else 0.0)})"),
                  ("sensors throttled", f"{int((summary['throttled_requests'] > 0).sum()):,} of {len(summary):,}"),
                  ("total delay", units.seconds(float(summary["total_delay_ms"].sum()))),
                  ("longest throttle", units.ms(float(summary["max_delay_ms"].max())))]
    if recommendation is not None and len(recommendation):
        cards.append(("quotas recommended", units.count(len(recommendation))))
    return "<div class=cards>" + "".join(
        f"<div class=card><div class=v>{escape(v)}</div><div class=k>{escape(k)}</div></div>" for k, v in cards
    ) + "</div>"


def _summary_columns() -> list[Column]:
    def u(r: Any) -> str:
        return units.unit_of(r.quota_type)

    return [
        Column("quota type", "PRODUCE / FETCH (bytes), REQUEST (I/O thread time), CONTROLLER_MUTATION",
               lambda r: r.quota_type, lambda r: r.quota_type),
        Column("user tag", "the sensor's user metric tag (empty: the quota is not per user)",
               lambda r: r.tag_user, lambda r: r.tag_user),
        Column("client tag", "the sensor's client-id metric tag (empty: the quota is not per client-id)",
               lambda r: r.tag_client_id, lambda r: r.tag_client_id),
        Column("quota", "the quota that applied to the sensor, per broker", lambda r: units.rate(r.quota, u(r)),
               lambda r: r.quota, "B/s; % of a thread for REQUEST"),
        Column("requests", "requests recorded on the sensor (all brokers)", lambda r: units.count(r.requests),
               lambda r: int(r.requests)),
        Column("throttled", "share of those requests that got a throttle time > 0",
               lambda r: units.share(r.throttled_share), lambda r: round(float(r.throttled_share), 6), "fraction"),
        Column("total delay", "sum of the throttle times, the sort key", lambda r: units.ms(r.total_delay_ms),
               lambda r: int(r.total_delay_ms), "ms"),
        Column("p99 delay", "99th percentile throttle time over all its requests",
               lambda r: units.ms(r.p99_delay_ms), lambda r: round(float(r.p99_delay_ms), 1), "ms"),
        Column("max delay", "longest single throttle time", lambda r: units.ms(r.max_delay_ms),
               lambda r: int(r.max_delay_ms), "ms"),
        Column("time over quota", "time in which the measured rate was above the quota",
               lambda r: units.ms(r.time_over_quota_ms), lambda r: int(r.time_over_quota_ms), "ms"),
        Column("client back-off", "closed model only: time throttled clients waited before sending again",
               lambda r: units.ms(r.total_pushback_ms) if r.total_pushback_ms else "",
               lambda r: int(r.total_pushback_ms) or None, "ms"),
    ]


def _recommendation_columns() -> list[Column]:
    from kquota.pipeline.usage import entity_label

    return [
        Column("entity", "who the quota is for (users/<name>, clients/<id>, <default>)",
               lambda r: entity_label(getattr(r, "user", None), r.client_id),
               lambda r: entity_label(getattr(r, "user", None), r.client_id)),
        Column("quota type", "what is limited", lambda r: r.quota_type, lambda r: r.quota_type),
        Column("config key", "the kafka-configs key to set", lambda r: r.config_key, lambda r: r.config_key),
        Column("observed", "the chosen percentile of the entity's per-broker per-second rate",
               lambda r: units.rate(r.observed, units.unit_of(r.quota_type)), lambda r: float(r.observed), "B/s; % for REQUEST"),
        Column("quota", "observed x headroom, rounded: the recommended value",
               lambda r: units.rate(r.quota, units.unit_of(r.quota_type)), lambda r: float(r.quota), "B/s; % for REQUEST"),
    ]


def _observed_columns() -> list[Column]:
    from kquota.pipeline.usage import entity_label

    def total(field: str) -> Callable[[Any], Any]:
        return lambda r: None if _blank(getattr(r, field)) else int(getattr(r, field))

    def ms(field: str) -> Callable[[Any], str]:
        return lambda r: "" if _blank(getattr(r, field)) else units.ms(float(getattr(r, field)))

    def count(field: str) -> Callable[[Any], str]:
        return lambda r: "" if _blank(getattr(r, field)) else units.count(int(getattr(r, field)))

    return [
        Column("entity", "the request's raw user and client id", lambda r: entity_label(r.user, r.client_id),
               lambda r: entity_label(r.user, r.client_id)),
        Column("quota type", "what the throttle was for", lambda r: r.quota_type, lambda r: r.quota_type),
        Column("requests", "rows of the log", lambda r: units.count(int(r.requests)), lambda r: int(r.requests)),
        Column("enforced throttle", "sum of the throttle times the proxy's responses carried",
               ms("throttle_time_ms"), total("throttle_time_ms"), "ms"),
        Column("throttled", "responses with an enforced throttle > 0", count("throttled"), total("throttled")),
        Column("shadow throttle", "sum of the shadow configuration's would-be throttle times (--shadow-store)",
               ms("shadow_throttle_time_ms"), total("shadow_throttle_time_ms"), "ms"),
        Column("shadow throttled", "responses the shadow would have throttled", count("shadow_throttled"),
               total("shadow_throttled")),
        Column("shadow delayed", "bytes of the responses the shadow's would-be mute would have delayed",
               lambda r: "" if _blank(r.shadow_delayed_bytes) else units.rate(float(r.shadow_delayed_bytes), "B/s")
               .replace("/s", ""), total("shadow_delayed_bytes"), "bytes"),
    ]


def _observed_section(out_path: str, observed: Any) -> str:
    """The "Enforced vs shadow" section: the entities with any throttle, enforced or shadow,
    largest first; a note when the log carried no shadow values."""
    def zero(column: str) -> Any:
        return observed[column].fillna(0) if column in observed else 0

    size = zero("throttle_time_ms") + zero("shadow_throttle_time_ms") + zero("shadow_delayed_bytes")
    busy = observed[size > 0].assign(_key=[max(a, b) for a, b in zip(zero("throttle_time_ms")[size > 0],
                                                                      zero("shadow_throttle_time_ms")[size > 0])])
    busy = busy.sort_values(["_key", "shadow_delayed_bytes", "requests"], ascending=False)
    shadowed = int(observed["shadow_rows"].sum())
    note = ("<p class=tablenote>What the proxy observed while it ran: the throttle it enforced, and what the shadow "
            "configuration (<code>--shadow-store</code>) would have given the same traffic, never enforced.</p>")
    if not shadowed:
        note += ("<p class=tablenote>The log carries no shadow value: the proxy ran without "
                 "<code>--shadow-store</code>; only the enforced throttle is shown.</p>")
    if not len(busy):
        return note + "<p>No entity was throttled, enforced or shadow.</p>"
    left = len(observed) - len(busy)
    order = "entities with a throttle either way, sorted by the larger of the two throttle times"
    if left:
        order += f" ({left:,} entit{'y' if left == 1 else 'ies'} without any left out)"
    return note + _table_section(out_path, "shadow", _observed_columns(), list(busy.itertuples()), order)


def _usage_columns() -> list[Column]:
    from kquota.pipeline.usage import entity_label

    def rate_col(header: str, meaning: str, field: str) -> Column:
        return Column(header, meaning, lambda r: units.rate(getattr(r, field), r.unit or "B/s"),
                      lambda r: round(float(getattr(r, field)), 3), "B/s; % for REQUEST")

    return [
        Column("entity", "users/<name>, clients/<id> or both", lambda r: entity_label(r.user, r.client_id),
               lambda r: entity_label(r.user, r.client_id)),
        Column("quota type", "what was measured", lambda r: r.quota_type, lambda r: r.quota_type),
        Column("requests", "requests in the log", lambda r: units.count(r.requests), lambda r: int(r.requests)),
        Column("total", "bytes (or thread time) in the log, the sort key",
               lambda r: units.count(r.total) if r.unit != "B/s" else units.rate(r.total, "B/s").replace("/s", ""),
               lambda r: float(r.total), "bytes; %-seconds for REQUEST"),
        rate_col("mean", "mean rate over the seconds the entity was active, per broker", "mean_rate"),
        rate_col("p50", "median per-broker per-second rate", "p50"),
        rate_col("p95", "95th percentile per-broker per-second rate", "p95"),
        rate_col("p99", "99th percentile per-broker per-second rate", "p99"),
        rate_col("max", "highest per-broker per-second rate", "max"),
    ]


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;padding:20px 28px;max-width:1240px;
color:#222;line-height:1.4}
h1{margin:0 0 4px;font-size:26px}h2{margin:28px 0 6px;font-size:20px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#666;font-size:13px;margin:0 0 10px}
nav{font-size:13px;margin:8px 0}nav a{margin-right:14px;color:#1f5fa8}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:150px;background:#fafafa}
.card .v{font-size:20px;font-weight:600}.card .k{font-size:12px;color:#666}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:14px 26px}
figure{margin:0}figcaption{font-size:12.5px;color:#555;margin-top:2px}
table{border-collapse:collapse;margin:6px 0;font-size:12.5px}
td,th{border:1px solid #d4d4d4;padding:3px 9px;text-align:right;white-space:nowrap}
.t{text-align:left}th{background:#f1f3f5}tbody tr:nth-child(even){background:#fafbfc}
.tablenote{font-size:13px;color:#444;margin:4px 0}
.legend{display:grid;grid-template-columns:max-content 1fr;gap:1px 12px;font-size:12px;color:#555;margin:6px 0}
.legend dt{font-weight:600}.legend dd{margin:0}
"""


def build_report(
    out_path: str,
    entities: Any,
    series: Any,
    top: Sequence[tuple[Any, Any, str]],
    level: str,
    histogram: Any,
    summary: Any,
    recommendation: Any,
    quotas_for: Optional[dict] = None,
    title: str = "kquota traffic report",
    notes: Sequence[str] = (),
    observed: Any = None,
    extra_sections: Sequence[str] = (),
) -> str:
    """Writes the HTML report (and its CSV tables beside it) and returns its path.
    ``entities``: usage entities table; ``series``: :func:`rate_series`; ``histogram``:
    :func:`throttle_histogram`; ``summary``: the simulation summary; ``recommendation``: the
    recommendation table (all pandas); ``quotas_for``: {(user, client_id, quota_type): quota}
    drawn as reference lines; ``observed``: ``usage``'s ``observed/`` table (pandas,
    :mod:`kquota.pipeline.observed`), ``None`` for a log without the proxy's observed columns
    (no "Enforced vs shadow" section then); ``extra_sections``: HTML sections appended (the
    topic quotas')."""
    from kquota import __version__
    from kquota.pipeline.usage import entity_label

    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    quotas_for = quotas_for or {}
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"<h1>{escape(title)}</h1>", f"<p class=meta>Generated {escape(stamp)} by kquota {escape(__version__)}. "
             + " ".join(escape(n) for n in notes) + "</p>", _cards(summary, recommendation),
             '<nav><a href="#rates">Rate vs quota</a><a href="#throttles">Throttles</a>'
             '<a href="#simulation">Simulation summary</a><a href="#recommendation">Recommended quotas</a>'
             '<a href="#usage">Top usage</a>'
             + ('<a href="#shadow">Enforced vs shadow</a>' if observed is not None else "") + "</nav>"]

    parts.append('<h2 id="rates">Rate vs quota over time</h2>')
    parts.append("<p class=tablenote>The busiest entities. A quota holds on each broker, so each chart "
                 "shows, per second, the rate on the broker where the entity was busiest.</p>")
    figures = []
    if series is not None and len(series):
        for u, c, t in top:
            mask = (series["quota_type"] == t)
            mask &= series["user"].isna() if u is None else series["user"] == u
            mask &= series["client_id"].isna() if c is None else series["client_id"] == c
            s = series[mask].sort_values("second")
            if len(s):
                figures.append(rate_figure(entity_label(u, c), t, [float(x) for x in s["second"]],
                                           [float(x) for x in s["rate"]], quotas_for.get((u, c, t))))
    parts.append(f"<div class=grid>{''.join(figures)}</div>" if figures else "<p>No usage.</p>")

    parts.append('<h2 id="throttles">Throttle distributions</h2>')
    parts.append("<p class=tablenote>A throttle is how long the broker delays a response (and mutes the "
                 "client) because the quota was exceeded; from the replay of the quotas over the log.</p>")
    figures = []
    if histogram is not None and len(histogram):
        order = [f"≤{b}" for b in BUCKETS] + [f">{BUCKETS[-1]}"]
        for t in sorted(histogram["quota_type"].unique()):
            got = dict(zip(histogram[histogram["quota_type"] == t]["bucket"],
                           histogram[histogram["quota_type"] == t]["count"]))
            present = [i for i, b in enumerate(order) if got.get(b, 0)]
            if present:  # every bucket from the first to the last used one, empty ones too
                span = order[present[0]:present[-1] + 1]
                figures.append(throttle_figure(t, span, [int(got.get(b, 0)) for b in span]))
    parts.append(f"<div class=grid>{''.join(figures)}</div>" if figures else "<p>No request was throttled.</p>")

    parts.append('<h2 id="simulation">Simulation summary</h2>')
    if summary is not None and len(summary):
        s = summary.sort_values(["total_delay_ms", "requests"], ascending=False)
        parts.append(_table_section(out_path, "simulation", _summary_columns(), list(s.itertuples()),
                                    "one row per sensor, sorted by total delay (largest first)"))
    else:
        parts.append("<p>No simulation rows.</p>")
    parts.append('<h2 id="recommendation">Recommended quotas</h2>')
    if recommendation is not None and len(recommendation):
        parts.append(_table_section(out_path, "recommendation", _recommendation_columns(),
                                    list(recommendation.itertuples()), "in entity order"))
    else:
        parts.append("<p>No recommendation.</p>")
    parts.append('<h2 id="usage">Top usage</h2>')
    if entities is not None and len(entities):
        e = entities[entities["level"] == level].sort_values("total", ascending=False)
        parts.append(_table_section(out_path, "usage", _usage_columns(), list(e.itertuples()),
                                    f"entities at level {level}, sorted by total (largest first)"))
    else:
        parts.append("<p>No usage.</p>")
    if observed is not None:
        parts.append('<h2 id="shadow">Enforced vs shadow</h2>')
        parts.append(_observed_section(out_path, observed))
    parts.extend(extra_sections)

    doc = (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
           f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
           f"<style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>\n")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(doc)
    return out_path
