"""kquota paths that arrive in later builds, detected at run time.

Each builder raises :class:`peers.Unavailable` with the reason when the running kquota does not
have the API, so the suite lists the row as "not available in this build" rather than timing
something else. The API names follow ``docs/api.md``.
"""

from __future__ import annotations

import importlib
import os

import kquota
from peers import Unavailable


def require_method(name: str) -> None:
    if not hasattr(kquota.QuotaManager, name):
        raise Unavailable(f"not available in this build (no QuotaManager.{name})")


def require_handle_method(qm, name: str) -> None:
    require_method(name)
    if not hasattr(qm.client("u", "c"), name):
        raise Unavailable(f"not available in this build (no ClientHandle.{name})")


def bench_callback_class():
    """KIP-257 callbacks doing what the built-in rules do for a ``users/<default>`` quota:
    tags ``{user, client-id=""}`` and the same limit for every user. The plain one overrides only
    the two required methods (the kernel caches its answers); the polled one also overrides
    ``quota_reset_required``."""
    base = getattr(kquota, "ClientQuotaCallback", None)
    if base is None:
        raise Unavailable("not available in this build (no kquota.ClientQuotaCallback)")

    class BenchCallback(base):
        def __init__(self, limit: float):
            self.limit = limit

        def quota_metric_tags(self, quota_type, principal, client_id):
            return {"user": principal.name, "client-id": ""}

        def quota_limit(self, quota_type, metric_tags):
            return self.limit

    class PolledBenchCallback(BenchCallback):
        """Also overrides ``quota_reset_required``, which the kernel then polls on every
        request: one Python call per request."""

        def quota_reset_required(self, quota_type):
            return False

    return BenchCallback, PolledBenchCallback


def callback_manager(limit: float, polled: bool = False):
    cls = bench_callback_class()[1 if polled else 0]
    try:
        return kquota.QuotaManager(callback=cls(limit))
    except Exception as e:  # the build has the class but refuses callbacks: say so, do not time
        raise Unavailable(f"not available in this build (QuotaManager(callback=...) raised "
                          f"{type(e).__name__}: {e})") from None


# ------------------------------------------------------------------------------ batch replay
#: The batch-replay entry point, ``module:function``, called as the pipeline's
#: ``replay(qm, ts_ms, quota_types, entity_ids, entities, values)`` (numpy arrays; entity_ids
#: index the ``(user, client_id)`` list). ``KQ_BENCH_REPLAY`` overrides it; an entry point with
#: another signature can be registered in ``REPLAY_ADAPTERS`` (spec -> adapter taking the
#: function and returning one with the signature above).
REPLAY_DEFAULT = "kquota.pipeline.replay:replay"
REPLAY_ADAPTERS: dict = {}


def batch_replay():
    """``(spec, replay)`` for the configured entry point, or :class:`Unavailable`."""
    spec = os.environ.get("KQ_BENCH_REPLAY") or REPLAY_DEFAULT
    mod_name, _, fn_name = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise Unavailable(f"not available in this build (cannot import {mod_name}: {e})") from None
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise Unavailable(f"not available in this build (no {spec}; set KQ_BENCH_REPLAY)")
    adapter = REPLAY_ADAPTERS.get(spec)
    return spec, (adapter(fn) if adapter else fn)
