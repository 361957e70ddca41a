"""Small hand-written SVG charts, so the report is one file with no dependency and no external
reference."""

from __future__ import annotations

from html import escape
from typing import Optional, Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    mag = 10 ** len(str(int(v))) / 10 if v >= 1 else 1.0
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * mag >= v:
            return m * mag
    return 10 * mag


def fmt_num(v: float) -> str:
    """1234567 -> '1.2M' (axis labels, tables)."""
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def line_chart(
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    hlines: Sequence[tuple[str, float]] = (),
    x_label: str = "",
    y_label: str = "",
    width: int = 640,
    height: int = 240,
) -> str:
    """Lines ``(label, xs, ys)`` with horizontal reference lines ``(label, y)``, as inline SVG."""
    left, right, top, bottom = 60, 150, 26, 34
    pw, ph = width - left - right, height - top - bottom
    xs_all = [x for _, xs, _ in series for x in xs] or [0.0, 1.0]
    x0, x1 = min(xs_all), max(xs_all)
    if x1 == x0:
        x1 = x0 + 1
    y_max = _nice_max(max([y for _, _, ys in series for y in ys] + [h for _, h in hlines] + [0.0]) * 1.05)

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - min(y, y_max) / y_max * ph

    out = [f'<svg width="{width}" height="{height}" role="img">',
           f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for i in range(5):
        y = y_max * i / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{py(y) + 4:.1f}" font-size="10" text-anchor="end">{fmt_num(y)}</text>')
    for i in range(5):
        x = x0 + (x1 - x0) * i / 4
        out.append(f'<text x="{px(x):.1f}" y="{top + ph + 14}" font-size="10" text-anchor="middle">{fmt_num(x)}</text>')
    if x_label:
        out.append(f'<text x="{left + pw / 2}" y="{height - 4}" font-size="10" text-anchor="middle">{escape(x_label)}</text>')
    if y_label:
        out.append(f'<text x="12" y="{top + ph / 2}" font-size="10" transform="rotate(-90 12 {top + ph / 2})" '
                   f'text-anchor="middle">{escape(y_label)}</text>')
    legend_y = top + 4
    for i, (label, xs, ys) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{pts}"/>')
        out.append(f'<text x="{left + pw + 8}" y="{legend_y + 10}" font-size="10" fill="{color}">{escape(label)}</text>')
        legend_y += 14
    for j, (label, y) in enumerate(hlines):
        color = PALETTE[(len(series) + j) % len(PALETTE)]
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="{color}" '
                   f'stroke-dasharray="5,3"/>')
        out.append(f'<text x="{left + pw + 8}" y="{legend_y + 10}" font-size="10" fill="{color}">'
                   f'- - {escape(label)} {fmt_num(y)}</text>')
        legend_y += 14
    out.append("</svg>")
    return "".join(out)


def bar_chart(title: str, labels: Sequence[str], counts: Sequence[float], width: int = 640,
              height: int = 220, x_label: Optional[str] = None) -> str:
    """Vertical bars, one per label, as inline SVG."""
    left, right, top, bottom = 60, 20, 26, 40
    pw, ph = width - left - right, height - top - bottom
    y_max = _nice_max(max(list(counts) + [0.0]))
    n = max(1, len(labels))
    bw = pw / n
    out = [f'<svg width="{width}" height="{height}" role="img">',
           f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for i in range(5):
        y = y_max * i / 4
        yy = top + ph - y / y_max * ph
        out.append(f'<text x="{left - 4}" y="{yy + 4:.1f}" font-size="10" text-anchor="end">{fmt_num(y)}</text>')
    for i, (label, c) in enumerate(zip(labels, counts)):
        h = c / y_max * ph
        x = left + i * bw
        out.append(f'<rect x="{x + 2:.1f}" y="{top + ph - h:.1f}" width="{max(1.0, bw - 4):.1f}" height="{h:.1f}" '
                   f'fill="{PALETTE[0]}"><title>{escape(label)}: {int(c)}</title></rect>')
        out.append(f'<text x="{x + bw / 2:.1f}" y="{top + ph + 14}" font-size="9" text-anchor="middle">{escape(label)}</text>')
    if x_label:
        out.append(f'<text x="{left + pw / 2}" y="{height - 6}" font-size="10" text-anchor="middle">{escape(x_label)}</text>')
    out.append("</svg>")
    return "".join(out)
