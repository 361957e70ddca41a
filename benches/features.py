"""kquota paths that arrive in later builds, detected at run time.

Each builder raises :class:`peers.Unavailable` with the reason when the running kquota does not
have the API, so the suite lists the row as "not available in this build" rather than timing
something else. The API names follow ``/work/shared/spec/api.md``.
"""

from __future__ import annotations

import importlib
import os

import kquota
from peers import Unavailable

P = kquota.ClientQuotaType.PRODUCE


def require_method(name: str) -> None:
    if not hasattr(kquota.QuotaManager, name):
        raise Unavailable(f"not available in this build (no QuotaManager.{name})")


def require_handle_method(qm, name: str) -> None:
    require_method(name)
    if not hasattr(qm.client("u", "c"), name):
        raise Unavailable(f"not available in this build (no ClientHandle.{name})")


def bench_callback_class():
    """A KIP-257 callback doing what the built-in one does for a ``users/<default>`` quota:
    tags ``{user, client-id=""}`` and the same limit for every user. Measures what calling into
    Python from the record path costs (the kernel caches nothing a callback could change)."""
    base = getattr(kquota, "ClientQuotaCallback", None)
    if base is None:
        raise Unavailable("not available in this build (no kquota.ClientQuotaCallback)")

    class BenchCallback(base):
        def __init__(self, limit: float):
            self.limit = limit

        def configure(self, configs):
            pass

        def quota_metric_tags(self, quota_type, principal, client_id):
            return {"user": principal.name, "client-id": ""}

        def quota_limit(self, quota_type, metric_tags):
            return self.limit

        def update_quota(self, quota_type, entity, new_value):
            pass

        def remove_quota(self, quota_type, entity):
            pass

        def quota_reset_required(self, quota_type):
            return False

        def update_cluster_metadata(self, cluster):
            return False

        def close(self):
            pass

    return BenchCallback


def callback_manager(limit: float):
    cls = bench_callback_class()
    try:
        return kquota.QuotaManager(callback=cls(limit))
    except Exception as e:  # the build has the class but refuses callbacks: say so, do not time
        raise Unavailable(f"not available in this build (QuotaManager(callback=...) raised "
                          f"{type(e).__name__}: {e})") from None


# ------------------------------------------------------------------------------ batch replay
#: How to find the batch-replay entry point of ``kquota.pipeline``: ``module:function``. The
#: function is called as ``fn(qm, requests)`` with ``requests`` a list of
#: ``(ts_ms, user, client_id, quota_type_name, value)`` tuples in time order (the request-log
#: columns of pipeline.md), and must apply them to ``qm`` in order. Override with
#: ``KQ_BENCH_REPLAY=module:function``; an adapter with another signature can be registered in
#: ``REPLAY_ADAPTERS`` (name -> adapter taking the function and returning ``fn(qm, requests)``).
REPLAY_DEFAULT = "kquota.pipeline:replay_requests"
REPLAY_ADAPTERS: dict = {}


def batch_replay():
    """``(label, replay)`` for the configured entry point, or :class:`Unavailable`."""
    spec = os.environ.get("KQ_BENCH_REPLAY") or REPLAY_DEFAULT
    mod_name, _, fn_name = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError:
        raise Unavailable(f"not available in this build (no module {mod_name})") from None
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise Unavailable(f"not available in this build (no {spec}; set KQ_BENCH_REPLAY)")
    adapter = REPLAY_ADAPTERS.get(spec)
    return spec, (adapter(fn) if adapter else fn)
