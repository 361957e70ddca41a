"""Kafka message schemas the proxy parses: data transcribed from Apache Kafka's
``clients/src/main/resources/common/message/*.json`` into ``schemas.json`` beside this file by
``scripts/gen_proxy_schemas.py`` (do not edit the data by hand).

Field tuples: (name, type, array element type, versions, nullable versions, tag,
tagged versions, default, sub-fields); versions are inclusive (low, high) pairs.
"""

from __future__ import annotations

import json
import os
from typing import Any


def _frozen(value: Any) -> Any:
    # JSON has no tuples: the codec indexes and hashes field specs as tuples.
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


with open(os.path.join(os.path.dirname(__file__), "schemas.json"), encoding="utf-8") as _f:
    _DOC = json.load(_f)

#: message name -> {"api_key", "valid", "flexible", "fields"}.
SCHEMAS: dict[str, dict[str, Any]] = _frozen(_DOC["SCHEMAS"])
#: api key -> first version whose response begins with ThrottleTimeMs.
THROTTLE_FIRST: dict[int, int] = {int(k): v for k, v in _DOC["THROTTLE_FIRST"].items()}
#: api key -> first flexible version (tagged fields in headers and bodies).
FLEXIBLE_FIRST: dict[int, int] = {int(k): v for k, v in _DOC["FLEXIBLE_FIRST"].items()}
del _DOC, _f
