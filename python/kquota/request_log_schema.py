"""The request log's schema: the one definition (``docs/pipeline.md``, "Request log").

=============  ===========================  =================================================
column         type (Arrow, as written)     meaning
=============  ===========================  =================================================
``ts_ms``      integer (int64)              request time, ms
``broker``     integer, optional (int32)    broker id (quotas are per broker); default 0
``user``       string                       raw principal name
``client_id``  string                       raw client id (may be empty)
``quota_type`` string                       ``PRODUCE``, ``FETCH``, ``REQUEST`` (any case)
``value``      number (float64)             bytes, or thread-time nanoseconds for ``REQUEST``
=============  ===========================  =================================================

The proxy also writes what it observed (:data:`OBSERVED_COLUMNS`, after those; readers of the
log as input ignore them):

===========================  =========================  ===========================================
column                       type (Arrow, as written)   meaning
===========================  =========================  ===========================================
``throttle_time_ms``         integer (int32)            the throttle the response carried (on one
                                                        row of each response, 0 on its others)
``shadow_throttle_time_ms``  integer, null (int32)      the shadow configuration's would-be
                                                        throttle of the response (its first row);
                                                        null without a shadow (``--shadow-store``)
``shadow_delayed_bytes``     integer, null (int64)      the bytes the response adds to the shadow's
                                                        would-be backlog past its peak (its first
                                                        row); null without a shadow
===========================  =========================  ===========================================

Within one broker, requests are applied in ``ts_ms`` order, ties in input order. The proxy's
writer (:class:`kquota.proxy.request_log_writer.RequestLogWriter`), the pipeline's reader
(:func:`kquota.pipeline.schema.read_requests`) and ``simulate``'s output
(:data:`SIMULATED_COLUMNS`) all take their columns from here. (The native proxy's row,
``kquota-proxy``'s ``LogRow``, is this row without ``broker``, which the writer adds.)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

#: Every column, in the order the writer writes them.
COLUMNS = ("ts_ms", "broker", "user", "client_id", "quota_type", "value")
#: What the proxy observed, written after :data:`COLUMNS` (``docs/pipeline.md``): a reader of the
#: log as input ignores them.
OBSERVED_COLUMNS = ("throttle_time_ms", "shadow_throttle_time_ms", "shadow_delayed_bytes")
#: Every column the proxy's writer writes, in order.
WRITTEN_COLUMNS = COLUMNS + OBSERVED_COLUMNS
#: Optional columns and the value a reader gives rows without them.
DEFAULTS = {"broker": 0}
#: The columns a log must have.
REQUIRED = tuple(c for c in COLUMNS if c not in DEFAULTS)
#: The quota types a request is logged under (upper case; readers accept any case).
QUOTA_TYPES = ("PRODUCE", "FETCH", "REQUEST")
#: Readers count a row whose ``ts_ms`` is this far from 0 or further (about 2,230 years) as bad.
MAX_ABS_TS_MS = 1 << 46
#: ``simulate``'s ``requests/`` output: the log's columns plus the throttle the replay gave.
SIMULATED_COLUMNS = COLUMNS + ("throttle_ms",)


@lru_cache(maxsize=1)
def arrow_schema() -> Any:
    """The ``pyarrow.Schema`` the writer writes (:data:`WRITTEN_COLUMNS`; pyarrow is imported on
    first use)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    types = {"ts_ms": pa.int64(), "broker": pa.int32(), "user": pa.string(), "client_id": pa.string(),
             "quota_type": pa.string(), "value": pa.float64(), "throttle_time_ms": pa.int32(),
             "shadow_throttle_time_ms": pa.int32(), "shadow_delayed_bytes": pa.int64()}
    return pa.schema([(c, types[c]) for c in WRITTEN_COLUMNS])


__all__ = ["COLUMNS", "DEFAULTS", "MAX_ABS_TS_MS", "OBSERVED_COLUMNS", "QUOTA_TYPES", "REQUIRED", "SIMULATED_COLUMNS",
           "WRITTEN_COLUMNS", "arrow_schema"]
