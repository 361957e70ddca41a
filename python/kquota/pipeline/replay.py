"""Batch replay of recorded requests through the kernel (``QuotaKernel._replay``).

Requests are applied in array order: sort by time first (ties in input order). Two models:

* ``"open"`` — every request is recorded at its recorded ``ts_ms`` (what the brokers would have
  answered to that exact traffic);
* ``"closed"`` — clients honour throttles as KIP-219 clients do: a client (one
  ``(user, client_id)``) that gets a throttle of ``d`` ms for a request sent at ``s`` sends
  nothing before ``s + d``. Each request is sent at ``max(ts_ms, ready)`` where ``ready`` is the
  latest ``s + d`` of its client, keeps its order among the client's requests, and all requests
  are recorded in order of send time (ties: array order). ``sent_ms - ts_ms`` is how far the
  throttles pushed a request back.
"""

from __future__ import annotations

from typing import Sequence, Tuple, Union

import numpy as np

from kquota._kquota import QuotaKernel
from kquota.exceptions import QuotaValueError
from kquota.quota_type import ClientQuotaType

#: Codes of the ``quota_types`` array (``int(ClientQuotaType.X)``); the batch replay has no
#: controller-mutation requests.
TYPE_CODES = {t.name: int(t) for t in (ClientQuotaType.PRODUCE, ClientQuotaType.FETCH, ClientQuotaType.REQUEST)}
MODELS = ("open", "closed")


def _ints(name: str, a: object, dtype: type) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, not {arr.dtype}")
    info = np.iinfo(dtype)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise ValueError(f"{name} holds values outside the {np.dtype(dtype).name} range")
    return np.ascontiguousarray(arr, dtype=dtype)


def type_codes(quota_types: object) -> np.ndarray:
    """``int8`` codes for an array of ``ClientQuotaType`` names (any case) or codes."""
    arr = np.asarray(quota_types)
    if arr.dtype.kind in "OUS":
        names = np.char.upper(arr.astype(str))
        codes = np.full(len(names), -1, dtype=np.int8)
        for name, code in TYPE_CODES.items():
            codes[names == name] = code
        bad = np.flatnonzero(codes < 0)
        if bad.size:
            raise QuotaValueError(f"quota_types[{bad[0]}] = {arr[bad[0]]!r} is not PRODUCE, FETCH or REQUEST")
        return codes
    return _ints("quota_types", arr, np.int8)


def replay(
    qm: QuotaKernel,
    ts_ms: object,
    quota_types: object,
    entity_ids: object,
    entities: Sequence[Tuple[str, str]],
    values: object,
    model: str = "open",
    return_sent: bool = False,
) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
    """Records every request into ``qm`` and returns the throttles (``int32`` ms, one per
    request). ``entity_ids[i]`` indexes ``entities``, a list of ``(user, client_id)``; each
    distinct entity is resolved once. With ``return_sent`` also returns the send times
    (``int64``; equal to ``ts_ms`` in the open model).

    Bad input raises before anything is recorded: ``TypeError``/``ValueError`` for arrays,
    ``QuotaValueError`` (naming the request) for a NaN, infinite or negative value.
    """
    if model not in MODELS:
        raise ValueError(f"model must be 'open' or 'closed', not {model!r}")
    ts = _ints("ts_ms", ts_ms, np.int64)
    types = type_codes(quota_types)
    ids = _ints("entity_ids", entity_ids, np.int32)
    vals = np.asarray(values)
    if vals.size and vals.dtype.kind not in "iuf":
        raise TypeError(f"values must be numbers, not {vals.dtype}")
    vals = np.ascontiguousarray(vals, dtype=np.float64)
    out = np.zeros(len(ts), dtype=np.int32)
    sent = np.zeros(len(ts), dtype=np.int64) if return_sent else None
    pairs = [(str(u), str(c)) for u, c in entities]
    qm._replay(ts, types, ids, vals, pairs, out, closed=(model == "closed"), sent_ms=sent)
    return (out, sent) if return_sent else out
