"""``kquota pipeline report``: one self-contained HTML file (inline CSS and SVG, no script, no
external reference) from the outputs of ``usage``, ``simulate`` and ``recommend``:

* rate vs quota over time for the top entities (the busiest broker each second, since a quota
  holds on each broker);
* throttle distributions per quota type, from the simulation;
* the simulation summary and the recommendation table.
"""

from __future__ import annotations

import datetime as _dt
import os
from html import escape
from typing import Any, Optional, Sequence

from kquota.pipeline.svg import bar_chart, fmt_num, line_chart

BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000)


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and v != v):
            return ""
        if isinstance(v, float):
            return fmt_num(v)
        if isinstance(v, int) or hasattr(v, "dtype"):
            return f"{int(v):,}" if float(v).is_integer() else fmt_num(float(v))
        return escape(str(v))

    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


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
) -> str:
    """Writes the HTML report and returns its path. ``entities``: usage entities table;
    ``series``: :func:`rate_series`; ``histogram``: :func:`throttle_histogram`; ``summary``: the
    simulation summary; ``recommendation``: the recommendation table (all pandas);
    ``quotas_for``: {(user, client_id, quota_type): quota} drawn as reference lines."""
    from kquota.pipeline.usage import entity_label

    quotas_for = quotas_for or {}
    parts = [f"<h1>{escape(title)}</h1>",
             f"<p class=meta>Generated {escape(_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))}"
             f" by kquota.</p>"]
    parts += [f"<p>{escape(n)}</p>" for n in notes]

    parts.append('<h2 id="rates">Rate vs quota over time</h2>')
    parts.append("<p>Per second, the busiest broker's rate (quotas hold per broker) against the quota.</p>")
    if series is not None and len(series):
        for u, c, t in top:
            mask = (series["quota_type"] == t)
            mask &= series["user"].isna() if u is None else series["user"] == u
            mask &= series["client_id"].isna() if c is None else series["client_id"] == c
            s = series[mask].sort_values("second")
            if not len(s):
                continue
            x0 = s["second"].min()
            unit = "%" if t == "REQUEST" else "B/s"
            hl = [("quota", quotas_for[(u, c, t)])] if (u, c, t) in quotas_for else []
            parts.append(line_chart(f"{entity_label(u, c)} {t}", [(f"rate ({unit})", list(s["second"] - x0),
                                                                   list(s["rate"]))], hl,
                                    x_label="seconds from start", y_label=unit))
    else:
        parts.append("<p>No usage.</p>")

    parts.append('<h2 id="throttles">Throttle distributions</h2>')
    if histogram is not None and len(histogram):
        order = {f"≤{b}": i for i, b in enumerate(BUCKETS)}
        order[f">{BUCKETS[-1]}"] = len(BUCKETS)
        for t in sorted(histogram["quota_type"].unique()):
            h = histogram[histogram["quota_type"] == t].copy()
            h["k"] = h["bucket"].map(order)
            h = h.sort_values("k")
            parts.append(bar_chart(f"{t}: throttled requests by throttle (ms)", list(h["bucket"]),
                                   list(h["count"]), x_label="throttle_ms"))
    else:
        parts.append("<p>No request was throttled.</p>")

    parts.append('<h2 id="simulation">Simulation summary</h2>')
    if summary is not None and len(summary):
        s = summary.sort_values(["total_delay_ms", "requests"], ascending=False).head(25)
        cols = ["quota_type", "tag_user", "tag_client_id", "quota", "requests", "throttled_share",
                "p99_delay_ms", "max_delay_ms", "time_over_quota_ms"]
        rows = [[r.quota_type, r.tag_user, r.tag_client_id, r.quota, r.requests, f"{r.throttled_share:.1%}",
                 r.p99_delay_ms, r.max_delay_ms, r.time_over_quota_ms] for r in s.itertuples()]
        parts.append(_table(cols, rows))
    parts.append('<h2 id="recommendation">Recommended quotas</h2>')
    if recommendation is not None and len(recommendation):
        cols = ["entity", "quota_type", "config key", "observed", "quota"]
        rows = [[entity_label(r.user if "user" in r._fields else None, r.client_id), r.quota_type, r.config_key,
                 r.observed, r.quota] for r in recommendation.itertuples()]
        parts.append(_table(cols, rows))
    parts.append('<h2 id="usage">Top usage</h2>')
    if entities is not None and len(entities):
        e = entities[entities["level"] == level].sort_values("total", ascending=False).head(20)
        cols = ["entity", "quota_type", "unit", "requests", "mean", "p50", "p95", "p99", "max"]
        rows = [[entity_label(r.user, r.client_id), r.quota_type, r.unit, r.requests, r.mean_rate,
                 r.p50, r.p95, r.p99, r.max] for r in e.itertuples()]
        parts.append(_table(cols, rows))

    style = ("body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:12px;text-align:right}"
             "th{background:#f3f3f3}.meta{color:#777;font-size:12px}svg{display:block;margin:8px 0}")
    doc = (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
           f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(doc)
    return out_path
