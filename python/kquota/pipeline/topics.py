"""Topic quotas in the pipeline (``docs/topic-quotas.md``): topic usage, recommended topic
quotas and the replay of a quota configuration with ``topics/<t>`` entries.

The input is the request log's *topic rows* (:mod:`kquota.request_log_schema`, ``topic`` not
null: one per topic a request named, ``value`` that topic's bytes). A topic quota bounds the
topic's total over every client and broker, so topic usage is per topic, type and second summed
over brokers (not per broker, as a client's).

Tables written under ``OUT/topics/`` by ``usage``:

* ``per_second/`` — ``topic, quota_type, second, rate, requests``;
* ``entities/`` — per topic and type: ``requests, total, seconds, mean_rate, p50, p95, p99,
  max`` and ``peak_second`` (the second of ``max``: the peak window).

A replay with topic quotas runs the requests through the kernel's response step with their
topics (``ClientHandle.produce_response`` / ``fetch_response`` with ``topics=``): a request's
throttle is the largest of its client quota's, its topics' and the request quota's. The topic
budget is the topic's over every broker, so the replay is one quota domain, as a ``kquota proxy``
is: every broker's requests through one kernel, in ``ts_ms`` order (ties in input order).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from kquota.request_log_schema import TOPIC

#: The topic quota's config key of each type.
TOPIC_KEYS = {"PRODUCE": "producer_byte_rate", "FETCH": "consumer_byte_rate"}


def topic_per_second(topic_requests: Any) -> Any:
    """Per topic, quota type and second (over all brokers): the rate and the request count."""
    from pyspark.sql import functions as F

    return (
        topic_requests.select(TOPIC, "quota_type", F.floor(F.col("ts_ms") / 1000).cast("long").alias("second"), "value")
        .groupBy(TOPIC, "quota_type", "second")
        .agg(F.sum("value").alias("rate"), F.count(F.lit(1)).alias("requests"))
    )


def topic_stats(per_sec: Any) -> Any:
    """Per topic and quota type: totals, the distribution of per-second rates and the peak second."""
    from pyspark.sql import functions as F

    q = F.percentile_approx("rate", [0.5, 0.95, 0.99], 10_000)
    return (
        per_sec.groupBy(TOPIC, "quota_type")
        .agg(F.sum("requests").alias("requests"), F.sum("rate").alias("total"), F.count(F.lit(1)).alias("seconds"),
             F.avg("rate").alias("mean_rate"), q.alias("_q"), F.max("rate").alias("max"),
             F.max_by("second", "rate").alias("peak_second"))
        .select(TOPIC, "quota_type", "requests", "total", "seconds", "mean_rate", F.col("_q")[0].alias("p50"),
                F.col("_q")[1].alias("p95"), F.col("_q")[2].alias("p99"), "max", "peak_second")
        .orderBy(F.desc("total"), TOPIC, "quota_type")
    )


def topic_usage(topic_requests: Any, out_dir: str) -> dict[str, str]:
    """Writes ``topics/per_second/`` and ``topics/entities/`` under ``out_dir``; returns their paths."""
    paths = {"per_second": os.path.join(out_dir, "topics", "per_second"),
             "entities": os.path.join(out_dir, "topics", "entities")}
    per_sec = topic_per_second(topic_requests)
    per_sec.write.mode("overwrite").parquet(paths["per_second"])
    topic_stats(spark_read(per_sec, paths["per_second"])).coalesce(1).write.mode("overwrite").parquet(paths["entities"])
    return paths


def spark_read(df: Any, path: str) -> Any:
    """``path`` read back with ``df``'s session (one pass over the log, not two)."""
    return df.sparkSession.read.parquet(path)


def recommend_topics(per_sec: Any, percentile: float = 99.0, headroom: float = 1.2) -> Any:
    """Topic quotas from a topic ``per_second`` table, as client quotas are recommended
    (:mod:`kquota.pipeline.recommend`): the percentile of the topic's per-second rates times the
    headroom, rounded up to whole bytes/s. A pandas table ``topic, quota_type, config_key,
    observed, quota`` in topic order."""
    from pyspark.sql import functions as F

    pdf = (per_sec.groupBy(TOPIC, "quota_type")
           .agg(F.percentile_approx("rate", percentile / 100.0, 10_000).alias("observed")).toPandas())
    pdf = pdf.sort_values([TOPIC, "quota_type"], ignore_index=True)
    pdf["config_key"] = pdf["quota_type"].map(TOPIC_KEYS)
    pdf["quota"] = [float(max(1, math.ceil(o * headroom - 1e-9))) for o in pdf["observed"]]
    return pdf[[TOPIC, "quota_type", "config_key", "observed", "quota"]]


def topic_entries(table: Any) -> list:
    """The quota configuration entries (``topics/<t>``) of a :func:`recommend_topics` table."""
    from kquota.entity import ClientQuotaEntity

    by_topic: dict = {}
    for r in table.itertuples(index=False):
        by_topic.setdefault(getattr(r, TOPIC), {})[r.config_key] = float(r.quota)
    return [(ClientQuotaEntity({"topic": t}), c) for t, c in by_topic.items()]


def has_topic_quotas(quotas_doc: dict) -> bool:
    """Whether a quota configuration document has a ``topics/<t>`` entry."""
    return any("topic" in (q.get("entity") or {}) for q in quotas_doc.get("quotas", ()))


def owners(own: Any, topic_rows: Any) -> np.ndarray:
    """For each topic row (pandas, in input order by ``_file``, ``_row``), the index in ``own``
    of its request's own row: the last own row before it in input order with the same broker,
    user, client id, quota type and ``ts_ms``; -1 when there is none (the row is not replayed)."""
    import pandas as pd

    keys = ["broker", "user", "client_id", "quota_type", "ts_ms"]
    a = own[["_file", "_row"] + keys].assign(_own=np.arange(len(own)), _o=0)
    b = topic_rows[["_file", "_row"] + keys].assign(_own=-1, _o=1, _t=np.arange(len(topic_rows)))
    both = pd.concat([a, b], ignore_index=True).sort_values(["_file", "_row", "_o"], kind="stable")
    both["_own"] = both["_own"].where(both["_own"] >= 0)
    both["_own"] = both.groupby(keys, sort=False, dropna=False)["_own"].ffill()
    t = both[both["_o"] == 1].sort_values("_t")
    return t["_own"].fillna(-1).to_numpy(np.int64)


def replay_with_topics(own: Any, topic_rows: Any, quotas_doc: dict, model: str) -> tuple[Any, Any]:
    """Replays every broker's requests (``own``, pandas with ``_file`` and ``_row``) with their
    topic rows through one kernel configured with ``quotas_doc``. Returns ``own`` in replay
    order with ``throttle_ms`` and, per topic row (``topic_rows`` with the throttle of its
    request), ``throttle_ms`` (-1 when the row had no request)."""
    from kquota.config_file import parse_quota_config
    from kquota.manager import QuotaManager

    if model != "open":
        raise ValueError("a replay with topic quotas has the open model only (requests at their recorded times)")
    own = own.reset_index(drop=True)
    topic_rows = topic_rows.reset_index(drop=True)
    owner = owners(own, topic_rows) if len(topic_rows) else np.zeros(0, dtype=np.int64)
    topics_of: dict[int, list] = {}
    for i, (name, value) in zip(owner.tolist(), zip(topic_rows[TOPIC].tolist(), topic_rows["value"].tolist())):
        if i >= 0:
            topics_of.setdefault(i, []).append((name, float(value)))
    order = own.sort_values(["ts_ms", "_file", "_row"], kind="stable").index.to_numpy()
    qm = QuotaManager()
    throttle = np.zeros(len(own), dtype=np.int32)
    try:
        qm.alter_client_quotas(parse_quota_config(quotas_doc, source="--quotas"))
        handles: dict = {}
        users, clients = own["user"].tolist(), own["client_id"].tolist()
        types, values, ts = own["quota_type"].tolist(), own["value"].tolist(), own["ts_ms"].tolist()
        for i in order.tolist():
            key = (users[i], clients[i])
            h = handles.get(key)
            if h is None:
                h = handles[key] = qm.client(*key)
            topics = topics_of.get(i)
            t, v, now = types[i], float(values[i]), int(ts[i])
            if topics and t == "PRODUCE":
                throttle[i] = h.produce_response(v, 0.0, True, now, topics=topics)[0]
            elif topics and t == "FETCH":
                throttle[i] = h.fetch_response(v, math.inf, 0.0, now, topics=topics)[1]
            else:
                throttle[i] = h.record_and_get_throttle_time_ms(t, v, now)
        out = own.assign(throttle_ms=throttle).loc[order].reset_index(drop=True)
        _sensors(qm, out)
    finally:
        qm.close()
    per_topic = topic_rows.assign(throttle_ms=np.where(owner >= 0, throttle[np.maximum(owner, 0)], -1))
    return out, per_topic


def _sensors(qm: Any, out: Any) -> None:
    """Adds ``simulate``'s per-row sensor columns to replayed rows (in replay order, open model):
    ``sent_ms``, ``tag_user``, ``tag_client_id``, ``quota`` and ``over_ms``."""
    from kquota.pipeline.broker import over_quota_shares

    tags: dict = {}
    for key in set(zip(out["quota_type"].tolist(), out["user"].tolist(), out["client_id"].tolist())):
        t, u, c = key
        tg = qm.quota_metric_tags(t, u, c)
        q = qm.quota_limit(t, u, c)
        tags[key] = (tg["user"], tg["client-id"], math.nan if q is None else q)
    rows = [tags[k] for k in zip(out["quota_type"].tolist(), out["user"].tolist(), out["client_id"].tolist())]
    out["sent_ms"] = out["ts_ms"].to_numpy(np.int64)
    out["tag_user"] = [r[0] for r in rows]
    out["tag_client_id"] = [r[1] for r in rows]
    out["quota"] = np.asarray([r[2] for r in rows], dtype=np.float64)
    sensor_keys = list(zip(out["quota_type"].tolist(), out["tag_user"].tolist(), out["tag_client_id"].tolist()))
    ids: dict = {}
    sensor = np.asarray([ids.setdefault(k, len(ids)) for k in sensor_keys], dtype=np.int32)
    out["over_ms"] = over_quota_shares(out["sent_ms"].to_numpy(), out["throttle_ms"].to_numpy(np.int32), sensor)


def topic_summary(per_topic: Any, quotas_doc: dict) -> Any:
    """Per topic and type of a replay with topic quotas (``per_topic``: Spark rows ``topic,
    quota_type, value, throttle_ms``, -1 for a row without its request): ``quota`` (the topic's
    own or ``<default>``'s, NaN when none), ``requests``, ``total_bytes``, ``throttled_requests``
    (requests naming the topic that got a throttle), ``total_delay_ms`` and ``orphan_rows`` (topic
    rows without their request, not replayed). Pandas, most delayed first."""
    from pyspark.sql import functions as F

    limits: dict = {}
    for q in quotas_doc.get("quotas", ()):
        e = q.get("entity") or {}
        if "topic" in e:
            for k, v in (q.get("config") or {}).items():
                limits[(e["topic"], k)] = float(v)
    th = F.col("throttle_ms")
    g = per_topic.groupBy(TOPIC, "quota_type").agg(
        F.sum((th >= 0).cast("long")).alias("requests"), F.sum("value").alias("total_bytes"),
        F.sum((th > 0).cast("long")).alias("throttled_requests"),
        F.sum(F.greatest(th, F.lit(0)).cast("long")).alias("total_delay_ms"),
        F.sum((th < 0).cast("long")).alias("orphan_rows")).toPandas()

    def limit(t: str, qt: str) -> float:
        key = TOPIC_KEYS.get(qt, "")
        return limits.get((t, key), limits.get((None, key), math.nan))

    g.insert(2, "quota", [limit(t, qt) for t, qt in zip(g[TOPIC], g["quota_type"])])
    return g.sort_values(["total_delay_ms", TOPIC, "quota_type"], ascending=[False, True, True], ignore_index=True)
