"""Terminal tables of the pipeline's results: columns a person can read (units, thousands
separators, :mod:`kquota.pipeline.units`), sorted by a column that is shown and named, and no
column that is empty in every row."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kquota.pipeline import units

#: (header, cell text, right-aligned) for each column of the simulation summary.
_SUMMARY: Sequence[tuple[str, Callable[[Any], str], bool]] = (
    ("quota type", lambda r: str(r.quota_type), False),
    ("user tag", lambda r: str(r.tag_user or ""), False),
    ("client tag", lambda r: str(r.tag_client_id or ""), False),
    ("quota", lambda r: units.rate(r.quota, units.unit_of(r.quota_type)) if r.quota == r.quota else "-", True),
    ("requests", lambda r: units.count(r.requests), True),
    ("throttled", lambda r: units.share(r.throttled_share), True),
    ("total delay", lambda r: units.ms(r.total_delay_ms), True),
    ("p99 delay", lambda r: units.ms(r.p99_delay_ms), True),
    ("max delay", lambda r: units.ms(r.max_delay_ms), True),
    ("time over quota", lambda r: units.ms(r.time_over_quota_ms), True),
)
#: Which column the summary is sorted by (largest first), and that it is.
SUMMARY_SORT = "total delay"


def format_rows(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Aligned lines: a header, then the rows; columns empty in every row are left out."""
    keep = [i for i in range(len(headers)) if any(r[i].strip() for r in rows)] if rows else list(range(len(headers)))
    widths = {i: max([len(headers[i])] + [len(r[i]) for r in rows]) for i in keep}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cells[i].rjust(widths[i]) if right[i] else cells[i].ljust(widths[i]) for i in keep).rstrip()

    return [line(headers)] + [line(r) for r in rows]


def summary_lines(summary: Any, top: int) -> list[str]:
    """The simulation summary's ``top`` rows with the most delay, as table lines (title line
    first, naming the sort column)."""
    s = summary.sort_values(["total_delay_ms", "requests"], ascending=False)
    rows = [[text(r) for _, text, _ in _SUMMARY] for r in s.head(top).itertuples()]
    shown = f"top {len(rows)} of {len(s):,} sensors" if len(s) > len(rows) else f"all {len(s):,} sensors"
    return [f"{shown}, sorted by {SUMMARY_SORT} (largest first):"] + format_rows(
        [h for h, _, _ in _SUMMARY], rows, [r for _, _, r in _SUMMARY])


def recommendation_lines(rec: Any, top: int = 20) -> list[str]:
    """The recommendation (``recommend``'s result) as lines: a title, then ``top`` entries with
    the observed percentile and the quota in their units."""
    from kquota.pipeline.usage import entity_label

    title = (f"Recommended quotas (level {rec.level}, p{rec.percentile:g} x {rec.headroom:g}), in entity order"
             + (f"; {rec.skipped} entities with an empty name skipped" if rec.skipped else ""))
    rows = [[entity_label(r.user, r.client_id), str(r.config_key),
             units.rate(r.observed, units.unit_of(r.quota_type)), units.rate(r.quota, units.unit_of(r.quota_type))]
            for r in rec.table.head(top).itertuples()]
    lines = [title] + ["  " + x for x in format_rows(["entity", "config key", "observed", "quota"], rows,
                                                     [False, False, True, True])]
    if len(rec.table) > top:
        lines.append(f"  ... {len(rec.table) - top:,} more")
    return lines


def usage_lines(entities: Any, top: int) -> list[str]:
    """Per level, the ``top`` entities by total, with their per-broker-second rate percentiles."""
    from kquota.pipeline.usage import LEVELS, entity_label

    lines: list[str] = []
    for level in LEVELS:
        e = entities[entities["level"] == level].sort_values("total", ascending=False).head(top)
        rows = [[entity_label(r.user, r.client_id), str(r.quota_type), units.count(r.requests)]
                + [units.rate(getattr(r, f), r.unit or "B/s") for f in ("p50", "p95", "p99", "max")]
                for r in e.itertuples()]
        lines += ["", f"Top {len(e)} at level {level} by total (per broker-second rates)"]
        lines += format_rows(["entity", "type", "requests", "p50", "p95", "p99", "max"], rows,
                             [False, False, True, True, True, True, True])
    return lines
