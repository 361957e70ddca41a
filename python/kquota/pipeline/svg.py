"""Small hand-written SVG charts, so the report is one file with no dependency and no external
reference. Charts scale to their container (``viewBox``); ticks are nice numbers in one unit per
axis (:mod:`kquota.pipeline.units`)."""

from __future__ import annotations

from html import escape
from typing import Optional, Sequence

from kquota.pipeline import units

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
QUOTA_COLOR = "#d62728"
#: Chart size in SVG units (the page scales it to its column).
WIDTH, HEIGHT = 600, 300


def _open(width: int, height: int, label: str) -> list[str]:
    return [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="{escape(label)}" '
            f'font-family="sans-serif" font-size="12">']


def line_chart(
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    hlines: Sequence[tuple[str, float]] = (),
    unit: str = "B/s",
    x_unit: str = "s",
    y_cap: Optional[float] = None,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """Lines ``(label, xs, ys)`` and dashed horizontal reference lines ``(label, y)`` as inline
    SVG. ``y_cap``: the y-axis ends at (the first tick at or above) this value; points above it
    are drawn on the top edge and marked with a triangle, so one outlier does not squash the
    rest. Y ticks carry ``unit`` (byte rates in one of B/s, KB/s, MB/s for the whole axis)."""
    left, right, top, bottom = 78, 16, 40, 26
    pw, ph = width - left - right, height - top - bottom
    xs_all = [x for _, xs, _ in series for x in xs] or [0.0, 1.0]
    x0, x1 = min(xs_all), max(xs_all)
    if x1 == x0:
        x1 = x0 + 1
    data_max = max([y for _, _, ys in series for y in ys] + [h for _, h in hlines] + [0.0])
    top_value = min(data_max, y_cap) if y_cap is not None else data_max
    y_ticks = units.nice_ticks(top_value * 1.02 if top_value > 0 else 1.0)
    y_max = y_ticks[-1]
    # One unit for the whole axis, chosen by the step so tick labels need no decimals.
    scale = units.byte_unit(y_ticks[1] if len(y_ticks) > 1 else y_max) if unit == "B/s" else None
    x_ticks = [t + x0 for t in units.nice_ticks(x1 - x0, 6) if t + x0 <= x1 + 1e-9]

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - min(max(y, 0.0), y_max) / y_max * ph

    out = _open(width, height, title)
    out.append(f'<text x="{left}" y="16" font-size="14" font-weight="bold">{escape(title)}</text>')
    for y in y_ticks:
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#e6e6e6"/>'
                   f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end" fill="#444">'
                   f'{escape(units.tick_label(y, unit, scale))}</text>')
    for x in x_ticks:
        out.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top + ph}" y2="{top + ph + 4}" stroke="#999"/>'
                   f'<text x="{px(x):.1f}" y="{top + ph + 17}" text-anchor="middle" fill="#444">'
                   f'{escape(units.tick_label(x - x0, x_unit))}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    legend_x = left
    for i, (label, xs, ys) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.3" points="{pts}"/>')
        over = [(x, y) for x, y in zip(xs, ys) if y > y_max]
        for x, y in over:
            out.append(f'<path d="M{px(x) - 4:.1f},{top + 7} L{px(x) + 4:.1f},{top + 7} L{px(x):.1f},{top} Z" '
                       f'fill="{color}"><title>{escape(units.rate(y, unit))} at {escape(units.tick_label(x - x0, x_unit))}'
                       f'</title></path>')
        out.append(f'<line x1="{legend_x}" x2="{legend_x + 18}" y1="{top - 10}" y2="{top - 10}" stroke="{color}" '
                   f'stroke-width="2"/><text x="{legend_x + 22}" y="{top - 6}" fill="#333">{escape(label)}</text>')
        legend_x += 30 + 7 * len(label)
    for j, (label, y) in enumerate(hlines):
        color = QUOTA_COLOR if j == 0 else PALETTE[(len(series) + j) % len(PALETTE)]
        text = f"{label} {units.rate(y, unit)}"
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="{color}" '
                   f'stroke-width="1.5" stroke-dasharray="6,4"/>')
        out.append(f'<line x1="{legend_x}" x2="{legend_x + 18}" y1="{top - 10}" y2="{top - 10}" stroke="{color}" '
                   f'stroke-width="2" stroke-dasharray="6,4"/><text x="{legend_x + 22}" y="{top - 6}" '
                   f'fill="#333">{escape(text)}</text>')
        legend_x += 30 + 7 * len(text)
    out.append("</svg>")
    return "".join(out)


def bar_chart(title: str, labels: Sequence[str], counts: Sequence[float], x_label: str = "",
              width: int = WIDTH, height: int = HEIGHT) -> str:
    """Vertical bars, one per label, each with its count on top, as inline SVG."""
    left, right, top, bottom = 64, 16, 30, 50
    pw, ph = width - left - right, height - top - bottom
    y_ticks = units.nice_ticks(max(list(counts) + [0.0]) * 1.1 or 1.0)
    y_max = y_ticks[-1]
    n = max(1, len(labels))
    bw = pw / n
    out = _open(width, height, title)
    out.append(f'<text x="{left}" y="16" font-size="14" font-weight="bold">{escape(title)}</text>')
    for y in y_ticks:
        yy = top + ph - y / y_max * ph
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e6e6e6"/>'
                   f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#444">{units.count(y)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for i, (label, c) in enumerate(zip(labels, counts)):
        h = c / y_max * ph
        x = left + i * bw
        out.append(f'<rect x="{x + 3:.1f}" y="{top + ph - h:.1f}" width="{max(1.0, bw - 6):.1f}" height="{h:.1f}" '
                   f'fill="{PALETTE[0]}"><title>{escape(label)}: {units.count(c)}</title></rect>')
        out.append(f'<text x="{x + bw / 2:.1f}" y="{top + ph - h - 4:.1f}" font-size="10" text-anchor="middle" '
                   f'fill="#333">{units.count(c)}</text>')
        # Many narrow bars: labels alternate between two rows so they never overlap.
        row = 12 if n > 7 and i % 2 else 0
        out.append(f'<text x="{x + bw / 2:.1f}" y="{top + ph + 15 + row}" font-size="10" text-anchor="middle" '
                   f'fill="#444">{escape(label)}</text>')
    if x_label:
        out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle" fill="#444">'
                   f'{escape(x_label)}</text>')
    out.append("</svg>")
    return "".join(out)
