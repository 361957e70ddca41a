"""Utilization (KIP-1373): who is near or over their quota.

:meth:`kquota.QuotaManager.utilization` returns a :class:`Utilization`: per entity (a sensor's
``user`` / ``client-id`` tags and quota type) the measured rate, the effective quota (KIP-786's
value: the bound the sensor is checked against, after any fleet share), the precedence level
that matched, ``utilization = rate / quota x 100`` (NaN when unlimited or the quota is not
positive, as KIP-1373) and whether it is throttled now (a rate quota: the rate is over the
quota; a controller-mutation quota: its token bucket is in debt).

Cardinality is bounded: every throttled entity plus the ``max_entities`` others with the
highest utilization (unlimited ones last); the rest of each quota type is summed in one
:class:`UtilizationRest` row. The selection runs natively from the live sensors without the GIL
and touches no sensor (a scrape is not a use); the record path does nothing for it.

The level is named as KIP-55 names the configuration entity that matched, with ``<user>`` and
``<client-id>`` standing for the sensor's own names (see :data:`LEVELS`); ``static-default``
is ``quota.producer.default`` / ``quota.consumer.default``, ``callback`` a KIP-257 callback's
limit, ``None`` no quota.

>>> import kquota
>>> qm = kquota.QuotaManager(expiry_interval_seconds=None)
>>> qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
>>> for s in range(11):
...     qm.record_no_throttle("produce", "alice", "app", 2000, now_ms=s * 1000)
>>> row = qm.utilization(now_ms=10_000).rows[0]
>>> row.level, row.throttled, round(row.utilization)
('/config/clients/<default>', True, 220)
>>> qm.close()
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from kquota.callback import ENCODED_TAGS_PREFIX, decode_tags
from kquota.metrics import Metric
from kquota.quota_type import ClientQuotaType

#: ``kquota.metrics.max.entities``: entities besides the throttled ones that utilization
#: reports (by default, on the metrics port too); the rest are summed per quota type.
DEFAULT_MAX_ENTITIES = 1000

#: Kafka-style metric names of the rows (group: the quota type's): the utilization in percent and
#: the effective quota (KIP-786's value).
UTILIZATION = "quota-utilization"
EFFECTIVE_QUOTA = "effective-quota"
#: Tags of the rows summing the entities left out of the selection.
REST_TAGS = {"entity": "other"}

#: The level names, in KIP-55's precedence order, then the static default and a callback's.
LEVELS = (
    "/config/users/<user>/clients/<client-id>",
    "/config/users/<user>/clients/<default>",
    "/config/users/<user>",
    "/config/users/<default>/clients/<client-id>",
    "/config/users/<default>/clients/<default>",
    "/config/users/<default>",
    "/config/clients/<client-id>",
    "/config/clients/<default>",
    "static-default",
    "callback",
)


class UtilizationRow(NamedTuple):
    """One entity: its quota type and metric tags, measured ``rate``, effective ``quota``
    (``None``: unlimited), the ``level`` that matched (one of :data:`LEVELS`, ``None`` when
    unlimited), ``utilization`` in percent (NaN when unlimited) and ``throttled``."""

    quota_type: ClientQuotaType
    user: str
    client_id: str
    rate: float
    quota: Optional[float]
    level: Optional[str]
    utilization: float
    throttled: bool


class UtilizationRest(NamedTuple):
    """The entities of one quota type left out of the selection, summed: how many
    (``entities``), their ``rate``, the ``quota`` of the limited ones and those ones'
    ``utilization`` (their rates over their quotas x 100, NaN when none is limited)."""

    quota_type: ClientQuotaType
    entities: int
    rate: float
    quota: float
    utilization: float


class Utilization(NamedTuple):
    """What :meth:`kquota.QuotaManager.utilization` returns: the time measured at (``now_ms``),
    the selected ``rows`` and the ``rest`` (one row per quota type with entities left out)."""

    now_ms: int
    rows: list[UtilizationRow]
    rest: list[UtilizationRest]


def check_max_entities(value: object) -> int:
    """``max_entities`` as an int >= 0, else :class:`~kquota.QuotaValueError` (one line)."""
    from kquota.exceptions import QuotaValueError

    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise QuotaValueError(f"max_entities must be an int >= 0, got {value!r}")
    return value


def from_native(raw: tuple) -> Utilization:
    """The native ``(now_ms, rows, rest)`` tuples as a :class:`Utilization`."""
    now_ms, rows, rest = raw
    types = ClientQuotaType.members()
    return Utilization(
        now_ms,
        [UtilizationRow(types[r[0]], *r[1:]) for r in rows],
        [UtilizationRest(types[r[0]], *r[1:]) for r in rest],
    )


def utilization_metrics(u: Utilization) -> list[Metric]:
    """``u`` as :class:`~kquota.metrics.Metric` rows (part of ``QuotaManager.metrics()`` and of
    every Prometheus scrape): per selected entity ``quota-utilization`` and, when limited,
    ``effective-quota``, tagged ``user``, ``client-id`` (a callback's own tags instead) and
    ``level`` (``""`` when unlimited); per quota type with entities left out, both tagged
    ``entity="other"`` (the utilization of the limited ones among them, the sum of their
    quotas)."""
    out = []
    for r in u.rows:
        if r.user.startswith(ENCODED_TAGS_PREFIX):
            tags = dict(decode_tags(r.user, r.client_id))
        else:
            tags = {"user": r.user, "client-id": r.client_id}
        tags["level"] = r.level or ""
        group = r.quota_type.metric_group
        out.append(Metric(group, UTILIZATION, tags, r.utilization))
        if r.quota is not None:
            out.append(Metric(group, EFFECTIVE_QUOTA, tags, r.quota))
    for rest in u.rest:
        group = rest.quota_type.metric_group
        out.append(Metric(group, UTILIZATION, dict(REST_TAGS), rest.utilization))
        out.append(Metric(group, EFFECTIVE_QUOTA, dict(REST_TAGS), rest.quota))
    return out
