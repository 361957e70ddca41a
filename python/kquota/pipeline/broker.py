"""One broker's replay, shared by both ``simulate`` paths (Arrow-direct and Spark fallback).

Input: one broker's requests as numpy arrays *already in replay order* (``ts_ms``, ties in input
order), with entities as dense codes into a list of ``(user, client_id)``. Output: throttles, send
times, and for each row its sensor (quota type + metric tags, the unit of the summary) and its
share of the sensor's time over quota.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, Tuple

import numpy as np

from kquota.pipeline.replay import TYPE_CODES

TYPE_NAMES = {code: name for name, code in TYPE_CODES.items()}


@dataclass
class BrokerReplay:
    """What replaying one broker produced (row arrays in replay order, sensor arrays per sensor)."""

    throttle: np.ndarray  # int32 ms per row
    sent: np.ndarray  # int64 send time per row (== ts_ms in the open model)
    sensor: np.ndarray  # int32 sensor id per row
    over_ms: np.ndarray  # int64: the row's share of its sensor's time over quota
    sensor_type: np.ndarray  # int8 quota type code per sensor
    sensor_user: list  # metric tag "user" per sensor
    sensor_client: list  # metric tag "client-id" per sensor
    sensor_quota: np.ndarray  # float64 limit per sensor, NaN when unlimited


def replay_sorted(
    quotas_doc: dict,
    model: str,
    ts: np.ndarray,
    types: np.ndarray,
    codes: np.ndarray,
    entities: Sequence[Tuple[str, str]],
    values: np.ndarray,
) -> BrokerReplay:
    """Replays rows (in replay order) through a fresh ``QuotaManager`` configured with
    ``quotas_doc``; computes sensors and over-quota shares."""
    from kquota.config_file import parse_quota_config
    from kquota.manager import QuotaManager
    from kquota.pipeline.replay import replay

    qm = QuotaManager()
    qm.alter_client_quotas(parse_quota_config(quotas_doc, source="--quotas"))
    throttle, sent = replay(qm, ts, types, codes, entities, values, model=model, return_sent=True)
    # Metric tags and limit of each (entity, quota type) present: few keys, not every row. The
    # keys are dense small integers: a counting pass, no sort.
    key = codes.astype(np.int64) * 4 + types
    present = np.bincount(key, minlength=len(entities) * 4) > 0 if len(key) else np.zeros(0, dtype=bool)
    ukeys = np.flatnonzero(present)
    lut = np.full(len(present), -1, dtype=np.int32)
    lut[ukeys] = np.arange(len(ukeys), dtype=np.int32)
    inverse = lut[key]
    del key
    tag_user, tag_client, limit = [], [], []
    for k in ukeys.tolist():
        u, c = entities[k // 4]
        t = TYPE_NAMES[k % 4]
        tags = qm.quota_metric_tags(t, u, c)
        tag_user.append(tags["user"])
        tag_client.append(tags["client-id"])
        q = qm.quota_limit(t, u, c)
        limit.append(np.nan if q is None else q)
    # One id per sensor (quota type, metric tags), numbered in order of first key.
    sensor_ids: dict = {}
    sensor_of_key = np.empty(len(ukeys), dtype=np.int32)
    s_type: list = []
    s_user: list = []
    s_client: list = []
    s_quota: list = []
    for i, k in enumerate(ukeys.tolist()):
        sk = (k % 4, tag_user[i], tag_client[i])
        sid = sensor_ids.get(sk)
        if sid is None:
            sid = sensor_ids[sk] = len(s_type)
            s_type.append(k % 4)
            s_user.append(tag_user[i])
            s_client.append(tag_client[i])
            s_quota.append(limit[i])
        sensor_of_key[i] = sid
    sensor = sensor_of_key[inverse]
    del inverse
    return BrokerReplay(
        throttle=throttle, sent=sent, sensor=sensor, over_ms=over_quota_shares(sent, throttle, sensor),
        sensor_type=np.asarray(s_type, dtype=np.int8), sensor_user=s_user, sensor_client=s_client,
        sensor_quota=np.asarray(s_quota, dtype=np.float64),
    )


def over_quota_shares(sent: np.ndarray, throttle: np.ndarray, sensor: np.ndarray) -> np.ndarray:
    """Each row's contribution to the union of its sensor's throttle intervals
    ``[sent, sent + throttle)``, so that the sum over a sensor's rows is the time the sensor was
    over quota."""
    # A row without a throttle has an empty interval: it adds nothing and, with the rows
    # ordered by start, never moves a later row's running end. Only throttled rows matter.
    result = np.zeros(len(sent), dtype=np.int64)
    hit = np.flatnonzero(throttle > 0)
    if not hit.size:
        return result
    # Memory: a few 8-byte arrays per throttled row, each dropped as soon as it is consumed.
    start = sent[hit].astype(np.int64)
    sens = sensor[hit]
    order = np.lexsort((start, sens))
    s_start = start[order]
    del start
    s_sensor = sens[order]
    del sens
    s_end = s_start + throttle[hit][order]
    hit = hit[order]
    del order
    # Per sensor (contiguous after the sort): the latest end among the earlier rows.
    prev = np.empty(len(hit), dtype=np.int64)
    cuts = np.flatnonzero(np.r_[True, s_sensor[1:] != s_sensor[:-1], True])
    del s_sensor
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        prev[a] = np.iinfo(np.int64).min
        if b - a > 1:
            np.maximum.accumulate(s_end[a:b - 1], out=prev[a + 1:b])
    # share = max(0, end - max(start, prev)), in place.
    np.maximum(s_start, prev, out=prev)
    del s_start
    np.subtract(s_end, prev, out=prev)
    np.clip(prev, 0, None, out=prev)
    result[hit] = prev
    return result


def factorize_pairs(
    u_codes: np.ndarray, n_users: int, c_codes: np.ndarray, n_clients: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Dense ids of the (user code, client code) pairs in order of first appearance, and for each
    id its (user code, client code) pair key ``u * n_clients + c``."""
    import pandas as pd

    n_c = max(n_clients, 1)
    pair = u_codes.astype(np.int64) * n_c + c_codes.astype(np.int64)
    codes, uniques = pd.factorize(pair, sort=False)
    return codes.astype(np.int32), np.asarray(uniques, dtype=np.int64)


def entity_list(pair_keys: np.ndarray, users: Any, clients: Any) -> list:
    """``(user, client_id)`` for each pair key of :func:`factorize_pairs`."""
    n_c = max(len(clients), 1)
    return [(str(users[k // n_c]), str(clients[k % n_c])) for k in pair_keys.tolist()]
