"""The report's topic quota sections (:mod:`kquota.pipeline.topics`): topic usage, recommended
topic quotas and the replay with topic quotas, each a table with its legend and its full CSV
beside the report. A section is left out when its input is absent (a log without topic rows, a
simulation without topic quotas)."""

from __future__ import annotations

import os
from typing import Any

from kquota.pipeline import units
from kquota.pipeline.report import Column, _table_section


def _rate(header: str, meaning: str, field: str) -> Column:
    return Column(header, meaning, lambda r: units.rate(getattr(r, field), "B/s"),
                  lambda r: round(float(getattr(r, field)), 3), "B/s")


def _topic() -> Column:
    return Column("topic", "topics/<name>", lambda r: f"topics/{r.topic}", lambda r: r.topic)


def _type() -> Column:
    return Column("quota type", "PRODUCE (bytes into the topic) or FETCH (bytes out of it)",
                  lambda r: r.quota_type, lambda r: r.quota_type)


def usage_columns() -> list[Column]:
    """The topic usage table's columns."""
    return [
        _topic(), _type(),
        Column("requests", "requests naming the topic", lambda r: units.count(r.requests), lambda r: int(r.requests)),
        Column("total", "the topic's bytes in the log, the sort key", lambda r: units.rate(r.total, "B/s").replace("/s", ""),
               lambda r: float(r.total), "bytes"),
        _rate("mean", "mean rate over the seconds the topic was active, over all brokers", "mean_rate"),
        _rate("p99", "99th percentile per-second rate, over all brokers", "p99"),
        _rate("max", "highest per-second rate (the peak window)", "max"),
        Column("peak second", "the second (UTC, epoch s) of the highest rate", lambda r: str(int(r.peak_second)),
               lambda r: int(r.peak_second)),
    ]


def recommendation_columns() -> list[Column]:
    """The recommended topic quotas' columns."""
    return [
        _topic(), _type(),
        Column("config key", "the topic quota's key to set", lambda r: r.config_key, lambda r: r.config_key),
        _rate("observed", "the chosen percentile of the topic's per-second rate over all brokers", "observed"),
        _rate("quota", "observed x headroom, rounded up: the recommended value", "quota"),
    ]


def replay_columns() -> list[Column]:
    """The replay with topic quotas' columns."""
    return [
        _topic(), _type(),
        Column("quota", "the topic's quota (its own or <default>'s), empty when none",
               lambda r: "" if r.quota != r.quota else units.rate(r.quota, "B/s"),
               lambda r: None if r.quota != r.quota else float(r.quota), "B/s"),
        Column("requests", "requests naming the topic", lambda r: units.count(r.requests), lambda r: int(r.requests)),
        Column("throttled", "of those, requests that got a throttle (client, topic or request quota)",
               lambda r: units.count(r.throttled_requests), lambda r: int(r.throttled_requests)),
        Column("total delay", "the throttles of those requests, summed", lambda r: units.count(r.total_delay_ms) + " ms",
               lambda r: int(r.total_delay_ms), "ms"),
        Column("orphan rows", "topic rows without their request (not replayed)", lambda r: units.count(r.orphan_rows),
               lambda r: int(r.orphan_rows)),
    ]


def _read(path: str) -> Any:
    import pandas as pd

    return pd.read_parquet(path) if os.path.exists(path) else None


def topic_sections(out_path: str, usage_dir: str, simulation_dir: str, recommendation_dir: str) -> list[str]:
    """The HTML sections (and their CSVs beside ``out_path``) of whatever topic outputs exist."""
    import pandas as pd

    parts = []
    usage = _read(os.path.join(usage_dir, "topics", "entities"))
    if usage is not None:
        parts.append('<h2 id="topic-usage">Topic usage</h2>')
        parts.append("<p class=tablenote>A topic quota bounds the topic's total over all clients and "
                     "brokers: rates here are summed over brokers.</p>")
        parts.append(_table_section(out_path, "topic-usage", usage_columns(), list(usage.itertuples()),
                                    "sorted by total (largest first)") if len(usage) else "<p>No topic rows.</p>")
    rec_path = os.path.join(recommendation_dir, "topics.csv")
    if os.path.exists(rec_path):
        rec = pd.read_csv(rec_path, dtype={"topic": str}, keep_default_na=False)
        parts.append('<h2 id="topic-recommendation">Recommended topic quotas</h2>')
        parts.append(_table_section(out_path, "topic-recommendation", recommendation_columns(),
                                    list(rec.itertuples()), "in topic order") if len(rec)
                     else "<p>No recommendation.</p>")
    replay = _read(os.path.join(simulation_dir, "topics"))
    if replay is not None:
        parts.append('<h2 id="topic-replay">Replay with topic quotas</h2>')
        parts.append("<p class=tablenote>The simulation replayed the configuration's topic quotas with the "
                     "client quotas: a request's throttle is the largest of its client quota's, its topics' "
                     "and the request quota's.</p>")
        parts.append(_table_section(out_path, "topic-replay", replay_columns(), list(replay.itertuples()),
                                    "sorted by total delay (largest first)") if len(replay)
                     else "<p>No topic rows replayed.</p>")
    return parts
