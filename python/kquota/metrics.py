"""Quota metrics as Kafka names them, and their JMX-style names.

``QuotaManager.metrics()`` returns :class:`Metric` rows:

==========================  ======================  =================================================
group                       name                    tags / value
==========================  ======================  =================================================
``Produce`` / ``Fetch``     ``byte-rate``           ``user``, ``client-id``: the sensor's rate (B/s)
                            ``quota-limit``         ``user``, ``client-id``: the bound (limited only)
                            ``throttle-time``       none: average throttle (ms) of the throttled
                                                    responses in the quota window (NaN if none)
                            ``queue-size``          none: responses held in the type's delay queue
                            ``sensor-count``        none: live sensors
                            ``sensors-expired-total``  none: sensors removed by expiry
                            ``sensor-overflow-total``  none: resolutions sent to an overflow sensor
                            ``byte-rate``, ``quota-limit``, ``throttle-time``  ``topic``: a topic quota's
                                                    sensor (KIP-1010; only topics with a quota)
``KQuota``                  ``name-bytes``          none: bytes of names held (sensor tags, cache keys)
                            ``name-bytes-limit``    none: their budget (``max_name_bytes``)
                            ``name-bytes-refused-total``  none: sensors or cache entries past it
``ConfigWatcher``           ``watcher-errors-total``   none: failed re-reads (each retried)
                            ``watcher-retry-pending``  none: 1 while a failed re-read awaits its retry
                            ``config-sync-age-seconds``  none: time since the last full sync
==========================  ======================  =================================================

The same rows exist for ``Request`` and ``ControllerMutation`` (per-type values; their
per-sensor values once those quota types record).
"""

from __future__ import annotations


import re
from typing import Iterable, Iterator, Mapping, NamedTuple

from kquota import _kquota
from kquota.callback import ENCODED_TAGS_PREFIX, decode_tags

#: JMX domain of Kafka's broker quota metrics.
JMX_DOMAIN = "kafka.server"

#: Rows converted to Python objects per native call; between batches other threads may run.
BATCH = 2048


class Metric(NamedTuple):
    """One metric value: Kafka's ``group`` (``Produce``, ...), ``name`` (``byte-rate``, ...),
    ``tags`` (``{"user": ..., "client-id": ...}`` for per-sensor values, ``{}`` otherwise) and
    ``value``."""

    group: str
    name: str
    tags: Mapping[str, str]
    value: float

    @property
    def jmx_name(self) -> str:
        """The MBean name Kafka's JmxReporter gives this metric, e.g.
        ``kafka.server:type=Produce,user=alice,client-id=c1`` (the attribute is :attr:`name`)."""
        return jmx_name(self.group, self.tags)


# Java's \w is ASCII-only: [A-Za-z0-9_].
_JMX_PLAIN = re.compile(r"[A-Za-z0-9_\-%. \t]*")


def _jmx_quote(value: str) -> str:
    """``javax.management.ObjectName.quote``."""
    out = ['"']
    for ch in value:
        if ch in '"*?\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def jmx_sanitize(value: str) -> str:
    """Kafka's ``Sanitizer.jmxSanitize``: the value as is when it holds only word characters,
    ``-``, ``%``, ``.``, space or tab, else quoted as ``ObjectName.quote`` does."""
    return value if _JMX_PLAIN.fullmatch(value) else _jmx_quote(value)


def jmx_name(group: str, tags: Mapping[str, str], domain: str = JMX_DOMAIN) -> str:
    """The MBean name of a metric as Kafka's ``JmxReporter.getMBeanName`` builds it: tags in
    order, tags with an empty key or value left out."""
    parts = [f"{domain}:type={group}"]
    for k, v in tags.items():
        if k and v:
            parts.append(f"{k}={jmx_sanitize(v)}")
    return ",".join(parts)


def iter_rows(snapshot: "_kquota.MetricsSnapshot") -> Iterator[tuple]:
    """``(group, name, user, client_id, value)`` rows of a native snapshot, in batches."""
    total = len(snapshot)
    for start in range(0, total, BATCH):
        yield from snapshot.rows(start, start + BATCH)


def collect(snapshot: "_kquota.MetricsSnapshot", extra_rows: Iterable[Metric] = ()) -> list[Metric]:
    """The rows of a native snapshot as :class:`Metric` values, then ``extra_rows`` (the
    per-type rows kept in Python, such as ``queue-size``); see :meth:`kquota.QuotaManager.metrics`."""
    out: list[Metric] = []
    append = out.append
    for group, name, user, client_id, value in iter_rows(snapshot):
        if user is None:
            tags = {}  # a fresh plain dict per row: prints as {} and callers may keep it
        elif user.startswith(ENCODED_TAGS_PREFIX):
            tags = decode_tags(user, client_id)  # a callback's own tag map
        else:
            tags = {"user": user, "client-id": client_id}
        append(Metric(group, name, tags, value))
    # Topic quotas' sensors: the same groups and names, tagged by topic.
    for group, name, topic, value in snapshot.topic_rows():
        append(Metric(group, name, {"topic": topic}, value))
    out.extend(extra_rows)
    return out
