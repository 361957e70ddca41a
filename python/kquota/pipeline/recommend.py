"""``kquota pipeline recommend``: quotas from observed usage.

For each entity at the chosen level (``user``, ``client-id`` or ``user-client``) and quota type,
the quota is the chosen percentile of its per-broker, per-second rates (see
:mod:`kquota.pipeline.usage`) times the headroom: byte rates rounded up to whole bytes/s,
``request_percentage`` up to 0.01 % and capped at the broker's thread capacity. Entities whose
name is empty (an empty client-id) cannot carry a quota of their own and are skipped (counted).

The result is written as a quota configuration file (``docs/pipeline.md``; what
``simulate --quotas`` and the config stores read) and as ``kafka-configs.sh`` command lines.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

from kquota.config_file import QuotaEntries, dump_quota_config, parse_quota_config, quota_config_document
from kquota.entity import ClientQuotaEntity
from kquota.pipeline.usage import LEVELS
from kquota.quota_type import ClientQuotaType

#: The config key of each quota type the pipeline recommends (by type name).
CONFIG_KEYS = {t.name: t.config_key for t in (ClientQuotaType.PRODUCE, ClientQuotaType.FETCH, ClientQuotaType.REQUEST)}
#: (num.io.threads + num.network.threads) * 100 with Kafka's defaults (8 + 3).
DEFAULT_CAPACITY_PERCENT = 1100.0


@dataclass
class Recommendation:
    """``table``: pandas rows (level, user, client_id, quota_type, config_key, observed, quota);
    ``entries``: the validated quota configuration; ``skipped``: entities with an empty name;
    ``topics``: the topic quotas' table when the log had topic rows
    (:func:`kquota.pipeline.topics.recommend_topics`; their entries are in ``entries`` with
    ``recommend --topics``)."""

    table: Any
    entries: QuotaEntries
    skipped: int
    level: str
    percentile: float
    headroom: float
    topics: Any = None


def _quota(quota_type: str, observed: float, headroom: float, capacity: float) -> float:
    x = observed * headroom
    if quota_type == "REQUEST":
        return min(capacity, max(0.01, math.ceil(x * 100 - 1e-9) / 100))
    return float(max(1, math.ceil(x - 1e-9)))


def recommend(
    per_sec: Any,
    level: str = "user",
    percentile: float = 99.0,
    headroom: float = 1.2,
    capacity_percent: float = DEFAULT_CAPACITY_PERCENT,
) -> Recommendation:
    """Recommends quotas from a ``per_second`` usage table (Spark DataFrame)."""
    from pyspark.sql import functions as F

    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    if not headroom > 0 or math.isinf(headroom):
        raise ValueError(f"headroom must be a finite number > 0, got {headroom}")
    keys = LEVELS[level]
    pdf = (
        per_sec.where(F.col("level") == level)
        .groupBy("user", "client_id", "quota_type")
        .agg(F.percentile_approx("rate", percentile / 100.0, 10_000).alias("observed"),
             F.max("rate").alias("max_rate"))
        .toPandas()
    )
    empty = pdf[list(keys)].eq("").any(axis=1) if len(pdf) else pdf.index == 0
    skipped = int(pdf[empty][list(keys)].drop_duplicates().shape[0])
    pdf = pdf[~empty].sort_values(list(keys) + ["quota_type"], ignore_index=True)
    pdf.insert(0, "level", level)
    pdf["config_key"] = pdf["quota_type"].map(CONFIG_KEYS)
    pdf["quota"] = [_quota(t, o, headroom, capacity_percent) for t, o in zip(pdf["quota_type"], pdf["observed"])]
    by_entity: dict[ClientQuotaEntity, dict[str, float]] = {}
    for row in pdf.itertuples(index=False):
        spec = {}
        if "user" in keys:
            spec["user"] = row.user
        if "client_id" in keys:
            spec["client-id"] = row.client_id
        by_entity.setdefault(ClientQuotaEntity(spec), {})[row.config_key] = row.quota
    entries = parse_quota_config(quota_config_document(by_entity.items()), source="recommendation")
    return Recommendation(pdf, entries, skipped, level, percentile, headroom)


def kafka_configs_commands(entries: QuotaEntries, bootstrap_server: str = "localhost:9092") -> list[str]:
    """One ``kafka-configs.sh --alter`` command line per entity; ``kquota configs`` for a topic
    quota (Kafka's brokers refuse the entity type: it is enforced by kquota)."""
    lines = []
    for entity, config in entries:
        adds = ",".join(f"{k}={int(v) if float(v).is_integer() else v}" for k, v in sorted(config.items()))
        tool = ["kquota", "configs"] if "topic" in entity.entries else ["kafka-configs.sh"]
        cmd = tool + ["--bootstrap-server", bootstrap_server, "--alter", "--add-config", adds]
        for side, etype in (("user", "users"), ("client-id", "clients"), ("topic", "topics")):
            if side in entity.entries:
                name = entity.entries[side]
                cmd += ["--entity-type", etype] + (["--entity-default"] if name is None else ["--entity-name", name])
        lines.append(" ".join(shlex.quote(c) for c in cmd))
    return lines


def write_recommendation(rec: Recommendation, config_path: str, commands_path: str,
                         bootstrap_server: str = "localhost:9092") -> None:
    """Writes the quota configuration file and the ``kafka-configs.sh`` script."""
    dump_quota_config(rec.entries, config_path)
    header = (f"#!/bin/sh\n# kquota recommendation: level {rec.level}, p{rec.percentile:g} of per-second "
              f"rates x {rec.headroom:g} headroom\nset -e\n")
    with open(commands_path, "w", encoding="utf-8") as f:
        f.write(header + "".join(line + "\n" for line in kafka_configs_commands(rec.entries, bootstrap_server)))
