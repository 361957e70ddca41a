"""One number format for everything the pipeline shows a person (report, charts, terminal
tables): thousands separators, decimal units for rates (1 KB/s = 1,000 B/s), milliseconds with
separators, percentages with one decimal, and "nice" axis ticks (1, 2, 2.5, 5 x 10^k)."""

from __future__ import annotations

import math
from typing import Optional

#: Decimal prefixes for byte rates.
_BYTE_UNITS = ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "KB/s"), (1.0, "B/s"))


#: The unit each quota type's rates and quotas are measured in.
QUOTA_UNITS = {"PRODUCE": "B/s", "FETCH": "B/s", "REQUEST": "%", "CONTROLLER_MUTATION": "mutations/s"}


def unit_of(quota_type: str) -> str:
    """``PRODUCE`` -> ``B/s``, ``REQUEST`` -> ``%`` (of one thread), ..."""
    return QUOTA_UNITS.get(str(quota_type), "")


def count(n: float) -> str:
    """``1234567`` -> ``1,234,567``."""
    return f"{int(round(n)):,}"


def ms(v: float) -> str:
    """Milliseconds: ``11597`` -> ``11,597 ms``; fractions below 10 keep one decimal."""
    if v != v:
        return ""
    return f"{v:,.1f} ms" if 0 < abs(v) < 10 and not float(v).is_integer() else f"{v:,.0f} ms"


def seconds(v_ms: float) -> str:
    """A long duration given in ms, in seconds: ``328799`` -> ``328.8 s`` (headline numbers)."""
    return f"{v_ms / 1000:,.1f} s"


def share(v: float) -> str:
    """``0.0117`` -> ``1.2 %``."""
    return "" if v != v else f"{v * 100:.1f} %"


def _trim(x: float, decimals: int) -> str:
    text = f"{x:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def byte_unit(magnitude: float) -> tuple[float, str]:
    """The (divisor, unit) a byte rate of this size reads best in."""
    for div, unit in _BYTE_UNITS:
        if abs(magnitude) >= div:
            return div, unit
    return 1.0, "B/s"


def rate(v: float, unit: str = "B/s", scale: Optional[tuple[float, str]] = None) -> str:
    """A rate with its unit: ``84585`` -> ``84.6 KB/s``; ``unit="%"`` (request time, percent of
    one thread) -> ``0.07 %``. ``scale`` forces a (divisor, unit), e.g. one per axis."""
    if v is None or v != v:
        return ""
    if unit == "%":
        return f"{_trim(v, 3 if abs(v) < 1 else 1)} %"
    if unit != "B/s":
        return f"{_trim(v, 2 if abs(v) < 10 else 1)} {unit}"
    div, label = scale or byte_unit(v)
    x = v / div
    return f"{_trim(x, 0 if abs(x) >= 100 else 1 if abs(x) >= 10 else 2)} {label}"


def nice_step(span: float, target: int = 5) -> float:
    """A step of 1, 2, 2.5 or 5 x 10^k that cuts ``span`` into about ``target`` intervals."""
    if span <= 0 or span != span:
        return 1.0
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def nice_ticks(top: float, target: int = 5) -> list[float]:
    """Ticks from 0 up to the first multiple of a nice step at or above ``top``."""
    top = max(top, 0.0)
    step = nice_step(top or 1.0, target)
    n = max(1, math.ceil(top / step - 1e-9))
    return [i * step for i in range(n + 1)]


def tick_label(v: float, unit: str, scale: Optional[tuple[float, str]] = None) -> str:
    """An axis tick: byte rates in the axis' one unit, ``ms`` and ``s`` with separators, counts
    plain."""
    if unit in ("B/s", "%"):
        return rate(v, unit, scale)
    if unit in ("ms", "s"):
        return f"{_trim(v, 1)} {unit}"
    return _trim(v, 1)
