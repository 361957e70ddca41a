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

A log may also have a ``topic`` column (:data:`TOPIC`, string, optional: null when absent),
written between those and the observed ones:

=============  ===========================  =================================================
``topic``      string, null (string)        null on a request's own row; on a *topic row*,
                                            the topic: one row per topic the request named,
                                            ``quota_type`` ``PRODUCE`` or ``FETCH``,
                                            ``value`` that topic's bytes in the request
=============  ===========================  =================================================

A topic row follows its request's own row (same ``ts_ms``, ``broker``, ``user``, ``client_id``
and ``quota_type``). Readers of client usage read only the rows whose ``topic`` is null, so a
request's bytes are counted once whatever topic rows follow it; a log without the column has
no topic rows. A topic row whose topic is empty or not a legal Kafka topic name (1 to
:data:`MAX_TOPIC_LENGTH` of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``), or whose quota type is
``REQUEST``, is a bad row. The proxy writes a Produce request's topic rows whenever it keeps a
request log, after the request's ``PRODUCE`` row; their number is bounded by the request's size
(each topic costs at least its name's bytes).

The proxy also writes what it observed (:data:`OBSERVED_COLUMNS`, after those; readers of the
log as input ignore them):

===========================  =========================  ===========================================
column                       type (Arrow, as written)   meaning
===========================  =========================  ===========================================
``throttle_time_ms``         integer (int32)            the throttle the response carried (on one
                                                        row of each response, 0 on its others)
``shadow_throttle_time_ms``  integer, null (int32)      the shadow configuration's would-be
                                                        throttle of the row's quota type, on the
                                                        connection's next row of that type (the
                                                        shadow is stepped off the response path);
                                                        null without a shadow (``--shadow-store``)
``shadow_delayed_bytes``     integer, null (int64)      the bytes the response adds to the shadow's
                                                        would-be backlog past its peak (on a row of
                                                        its type, as above); null without a shadow
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

from kquota.entity import MAX_TOPIC_NAME_LENGTH, topic_name_error

#: Every column, in the order the writer writes them.
COLUMNS = ("ts_ms", "broker", "user", "client_id", "quota_type", "value")
#: The optional topic column: null on a request's own row, the topic on a topic row.
TOPIC = "topic"
#: Kafka's ``Topic.MAX_NAME_LENGTH``: a topic row's topic is at most this long.
MAX_TOPIC_LENGTH = MAX_TOPIC_NAME_LENGTH
#: The quota types a topic row may have.
TOPIC_QUOTA_TYPES = ("PRODUCE", "FETCH")
#: What the proxy observed, written after :data:`COLUMNS` (``docs/pipeline.md``): a reader of the
#: log as input ignores them.
OBSERVED_COLUMNS = ("throttle_time_ms", "shadow_throttle_time_ms", "shadow_delayed_bytes")
#: Every column the proxy's writer writes, in order.
WRITTEN_COLUMNS = COLUMNS + (TOPIC,) + OBSERVED_COLUMNS
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
             "quota_type": pa.string(), "value": pa.float64(), TOPIC: pa.string(), "throttle_time_ms": pa.int32(),
             "shadow_throttle_time_ms": pa.int32(), "shadow_delayed_bytes": pa.int64()}
    return pa.schema([(c, types[c]) for c in WRITTEN_COLUMNS])


__all__ = ["COLUMNS", "DEFAULTS", "MAX_ABS_TS_MS", "MAX_TOPIC_LENGTH", "OBSERVED_COLUMNS", "QUOTA_TYPES", "REQUIRED",
           "SIMULATED_COLUMNS", "TOPIC", "TOPIC_QUOTA_TYPES", "WRITTEN_COLUMNS", "arrow_schema", "is_legal_topic"]


def is_legal_topic(name: object) -> bool:
    """Whether ``name`` is a topic name Kafka accepts (``Topic.validate``, the one rule of
    :func:`kquota.entity.topic_name_error`): what a topic row's ``topic`` must be."""
    return isinstance(name, str) and topic_name_error(name) is None
