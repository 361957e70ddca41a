"""Validation of plugin ``callback_configs``: every error names the plugin and the bad key."""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

from kquota.quota_type import ClientQuotaType
from kquota.exceptions import QuotaConfigError

#: Config key (``producer_byte_rate``, ...) -> quota type.
KEY_TYPES = {t.config_key: t for t in ClientQuotaType.members()}


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise QuotaConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise QuotaConfigError(f"{where}: keys must be str, got {key!r}")
    return value


def known_keys(value: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise QuotaConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (expected {', '.join(allowed)})")


def number(value: Any, where: str, *, minimum: float = 0.0, allow_zero: bool = True, maximum: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise QuotaConfigError(f"{where}: must be a number, got {type(value).__name__} {value!r}")
    result = float(value)
    if math.isnan(result) or math.isinf(result):
        raise QuotaConfigError(f"{where}: must be a finite number, got {value!r}")
    if result < minimum or (not allow_zero and result == 0) or result > maximum:
        bound = f">= {minimum:g}" if allow_zero else f"> {minimum:g}"
        if maximum != math.inf:
            bound += f" and <= {maximum:g}"
        raise QuotaConfigError(f"{where}: must be {bound}, got {value!r}")
    return result


def names(value: Any, where: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise QuotaConfigError(f"{where}: expected a list of names, got {type(value).__name__}")
    out = []
    for item in value:
        if not isinstance(item, str) or not item:
            raise QuotaConfigError(f"{where}: every name must be a non-empty str, got {item!r}")
        out.append(item)
    return out


def quotas(value: Any, where: str) -> dict[ClientQuotaType, float]:
    """``{"producer_byte_rate": 1e6, ...}`` -> ``{PRODUCE: 1e6, ...}``; 0 blocks."""
    value = mapping(value, where)
    known_keys(value, tuple(KEY_TYPES), where)
    return {KEY_TYPES[key]: number(v, f"{where}, key {key}") for key, v in value.items()}
