"""The rows of the comparative benchmark (benches/compare.py): the floors (empty functions and
loops with the same arguments), kquota's calls, the peers, and ``ROWS``, which pairs each row
with its baseline. Imported by compare.py, after it has put ``benches/`` and ``tests/support/``
on ``sys.path``."""

from __future__ import annotations

import os

import kquota
from kquota import _kquota

import bench_support
import features
import peers
from peers import Runner

QUICK = bench_support.QUICK
ENTITIES = int(os.environ.get("KQ_BENCH_ENTITIES", "1000"))

P = kquota.ClientQuotaType.PRODUCE
VALUE = 100
NANOS = 100_000  # request-time rows: 0.1 ms of I/O thread time per request (below 1100 % at any speed this loop reaches)
MUTATIONS = 1
QUOTA = {  # users/<default>: far above the offered load, so every call takes the admitted path
    "producer_byte_rate": 10 * 1024 * 1024,
    "request_percentage": 1100,  # the most 8 io + 3 network threads allow
    "controller_mutation_rate": 1e9,
}


def entities(n: int = ENTITIES) -> list[tuple[str, str, str]]:
    return [(f"user-{i:05d}", f"client-{i:05d}", f"user-{i:05d}:client-{i:05d}") for i in range(n)]


def _manager():
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"user": None}, QUOTA)])
    return qm


# ------------------------------------------------------------------------------------ floors


def empty5(quota_type, user, client_id, value, now_ms=None):
    pass


def empty4(user, client_id, value, now_ms=None):
    pass


def empty3(quota_type, value, now_ms=None):
    pass


def empty2(value, now_ms=None):
    pass


#: Entity counts of the scale rows: a broker's live clients, every call a different entity.
#: Quick mode shrinks them (the rows are still present, their numbers are not meant to be read).
SCALE = {"100k": 10_000 if QUICK else 100_000, "1m": 20_000 if QUICK else 1_000_000}
_SCALED: dict[int, list] = {}


def _scaled(build, n: int):
    """``build`` over its own ``n`` entities (built once, shared by every pass) instead of the
    suite's ``ENTITIES``; per-call time = round / ``n``."""
    def scaled(_ents):
        ents = _SCALED.get(n)
        if ents is None:
            ents = _SCALED[n] = entities(n)
        runner = build(ents)
        runner.calls = n
        return runner

    return scaled


def b_loop_only(ents):
    def run():
        for _u, _c, _k in ents:
            pass

    return Runner(run, lambda: True)


def _named_floor(fn, *, typed=True):
    def build(ents):
        if typed:
            def run():
                for u, c, _k in ents:
                    fn(P, u, c, VALUE, None)
        else:
            def run():
                for u, c, _k in ents:
                    fn(u, c, VALUE, None)
        return Runner(run, lambda: True)

    return build


def _per_entity_floor(fn, *, typed=True):
    def build(ents):
        fns = [fn] * len(ents)
        if typed:
            def run():
                for f in fns:
                    f(P, VALUE, None)
        else:
            def run():
                for f in fns:
                    f(VALUE, None)
        return Runner(run, lambda: True)

    return build


# ------------------------------------------------------------------------------------ kquota


def b_kquota_named(ents, qm=None):
    qm = qm or _manager()
    rec = qm.record_and_get_throttle_time_ms

    def run():
        for u, c, _k in ents:
            rec(P, u, c, VALUE, None)

    return Runner(run, lambda: not any([rec(P, u, c, VALUE, None) for u, c, _k in ents]), close=qm.close)


HOT_ENTITIES = 32


def b_kquota_named_hot(ents):
    """The named call over only ``HOT_ENTITIES`` entities, round robin, same calls per round:
    every (user, client_id) pair fits the extension's small cache of recent named calls."""
    hot = [ents[i % HOT_ENTITIES] for i in range(len(ents))]
    return b_kquota_named(hot)


def _named_clocked(rec, ents, close=None):
    """``rec(P, user, client, VALUE, now_ms)`` per entity, ``now_ms`` given: one value per round,
    advancing 1 ms."""
    clock = [0]

    def run():
        t = clock[0]
        clock[0] = t + 1
        for u, c, _k in ents:
            rec(P, u, c, VALUE, t)

    def check():
        t = clock[0]
        clock[0] = t + 1
        return not any([rec(P, u, c, VALUE, t) for u, c, _k in ents])

    return Runner(run, check, close=close)


def b_kquota_named_now(ents):
    """Explicit ``now_ms`` (one value per round, advancing 1 ms): the oracle's shape."""
    qm = _manager()
    return _named_clocked(qm.record_and_get_throttle_time_ms, ents, close=qm.close)


def b_kquota_handle(ents):
    qm = _manager()
    fns = [qm.client(u, c).record_and_get_throttle_time_ms for u, c, _k in ents]

    def run():
        for f in fns:
            f(P, VALUE, None)

    return Runner(run, lambda: not any([f(P, VALUE, None) for f in fns]), close=qm.close)


def b_kquota_callback(ents):
    qm = features.callback_manager(float(QUOTA["producer_byte_rate"]))
    return b_kquota_named(ents, qm)


def b_kquota_callback_polled(ents):
    qm = features.callback_manager(float(QUOTA["producer_byte_rate"]), polled=True)
    return b_kquota_named(ents, qm)


def _untyped_named(ents, method, amount):
    """``qm.<method>(user, client, amount, None)`` per entity: the per-type record calls without a
    quota type argument (request time, controller mutations), on the named path."""
    features.require_method(method)
    qm = _manager()
    rec = getattr(qm, method)

    def run():
        for u, c, _k in ents:
            rec(u, c, amount, None)

    return Runner(run, lambda: not any([rec(u, c, amount, None) for u, c, _k in ents]), close=qm.close)


def _untyped_handle(ents, method, amount):
    """The same through a handle per entity: ``handle.<method>(amount, None)``."""
    qm = _manager()
    features.require_handle_method(qm, method)
    fns = [getattr(qm.client(u, c), method) for u, c, _k in ents]

    def run():
        for f in fns:
            f(amount, None)

    return Runner(run, lambda: not any([f(amount, None) for f in fns]), close=qm.close)


def b_request_time_named(ents):
    return _untyped_named(ents, "record_request_time", NANOS)


def b_request_time_handle(ents):
    return _untyped_handle(ents, "record_request_time", NANOS)


def b_mutation_named(ents):
    return _untyped_named(ents, "record_controller_mutations", MUTATIONS)


def b_mutation_handle(ents):
    return _untyped_handle(ents, "record_controller_mutations", MUTATIONS)


REPLAY_PER_ENTITY = 100  # requests per entity in one replayed batch


def b_batch_replay(ents):
    """One round = one batch of ``REPLAY_PER_ENTITY * len(ents)`` PRODUCE requests (entities
    round robin, 1 ms per ``len(ents)`` requests) replayed through the pipeline's batch API; the
    numpy arrays are built untimed before each round. Per-request time = round / batch size."""
    import numpy as np

    _spec, replay = features.batch_replay()
    qm = _manager()
    n = len(ents) * REPLAY_PER_ENTITY
    pairs = [(u, c) for u, c, _k in ents]
    ids = np.arange(n, dtype=np.int32) % len(ents)
    steps = np.arange(n, dtype=np.int64) // len(ents)
    types = np.zeros(n, dtype=np.int8)  # PRODUCE
    values = np.full(n, float(VALUE))
    clock = [0]
    batch = [None]

    def prep():
        t0 = clock[0]
        clock[0] = t0 + REPLAY_PER_ENTITY
        batch[0] = steps + t0

    def run():
        replay(qm, batch[0], types, ids, pairs, values)

    def check():
        prep()
        return not np.asarray(replay(qm, batch[0], types, ids, pairs, values)).any()

    return Runner(run, check, prep=prep, close=qm.close, calls=n)


# ------------------------------------------------------------------------------------- peers


def b_oracle(ents):
    from oracle import OracleQuotaManager

    qm = OracleQuotaManager()
    qm.alter_client_quotas([({"user": None}, {"producer_byte_rate": QUOTA["producer_byte_rate"]})])
    return _named_clocked(qm.record_and_get_throttle_time_ms, ents)


# ------------------------------------------------------------------------------------- rows
# (key, group, label, baseline key, builder). The baseline of a kquota row is the empty Python
# function with the same arguments; of a peer row, kquota's named call on the same work (so a
# peer's ratio is "times kquota's cost").
ROWS = [
    ("loop_only", "floor", "the loop alone, no call (inside every row)", None, b_loop_only),
    ("empty_named", "floor", "empty Python function, named args `(P, user, client_id, 100, None)`",
     None, _named_floor(empty5)),
    ("empty_handle", "floor", "empty Python function, handle args `(P, 100, None)`", None,
     _per_entity_floor(empty3)),
    ("empty_named_untyped", "floor", "empty Python function `(user, client_id, v, None)`", None,
     _named_floor(empty4, typed=False)),
    ("empty_handle_untyped", "floor", "empty Python function `(v, None)`", None,
     _per_entity_floor(empty2, typed=False)),
    ("noop", "floor", "native `_kquota._noop(P, 100, None)` (trivial PyO3 call)", None,
     _per_entity_floor(_kquota._noop)),
    ("empty_named_100k", "floor", f"empty Python function, named args, {SCALE['100k']:,} entities", None,
     _scaled(_named_floor(empty5), SCALE["100k"])),
    ("empty_named_1m", "floor", f"empty Python function, named args, {SCALE['1m']:,} entities", None,
     _scaled(_named_floor(empty5), SCALE["1m"])),
    ("kquota_handle", "kquota", "handle `h.record_and_get_throttle_time_ms(P, 100, None)`, one handle per entity",
     "empty_handle", b_kquota_handle),
    ("kquota_named", "kquota", "named `qm.record_and_get_throttle_time_ms(P, user, client_id, 100, None)`",
     "empty_named", b_kquota_named),
    ("kquota_named_100k", "kquota", f"named, {SCALE['100k']:,} entities round robin (every call a different entity)",
     "empty_named_100k", _scaled(b_kquota_named, SCALE["100k"])),
    ("kquota_named_1m", "kquota", f"named, {SCALE['1m']:,} entities round robin (every call a different entity)",
     "empty_named_1m", _scaled(b_kquota_named, SCALE["1m"])),
    ("kquota_named_hot", "kquota", f"named, only {HOT_ENTITIES} entities round robin (fit the recent-name cache)",
     "empty_named", b_kquota_named_hot),
    ("kquota_named_now", "kquota", "named with explicit `now_ms` (the oracle's shape)", "empty_named",
     b_kquota_named_now),
    ("kquota_callback", "kquota", "named, Python `ClientQuotaCallback` installed (answers cached by the kernel)",
     "kquota_named", b_kquota_callback),
    ("kquota_callback_polled", "kquota", "named, callback overriding `quota_reset_required` (polled every request)",
     "kquota_named", b_kquota_callback_polled),
    ("kquota_request_time_named", "kquota", "`qm.record_request_time(user, client_id, 1e5 ns, None)`",
     "empty_named_untyped", b_request_time_named),
    ("kquota_request_time_handle", "kquota", "`h.record_request_time(1e5 ns, None)`",
     "empty_handle_untyped", b_request_time_handle),
    ("kquota_mutation_named", "kquota", "`qm.record_controller_mutations(user, client_id, 1, None)`",
     "empty_named_untyped", b_mutation_named),
    ("kquota_mutation_handle", "kquota", "`h.record_controller_mutations(1, None)`",
     "empty_handle_untyped", b_mutation_handle),
    ("kquota_batch_replay", "kquota", "batch replay `kquota.pipeline.replay.replay` (100k requests per batch), per request",
     "kquota_named", b_batch_replay),
    ("oracle", "peer", "pure-Python oracle (tests/support/oracle.py), named, explicit `now_ms`",
     "kquota_named_now", b_oracle),
    ("limits_fixed", "peer", "`limits` FixedWindowRateLimiter, MemoryStorage: `hit(item, user, client_id)`",
     "kquota_named", peers.limits_builder("fixed")),
    ("limits_moving", "peer", "`limits` MovingWindowRateLimiter, MemoryStorage", "kquota_named",
     peers.limits_builder("moving")),
    ("limits_sliding", "peer", "`limits` SlidingWindowCounterRateLimiter, MemoryStorage", "kquota_named",
     peers.limits_builder("sliding")),
    ("pyrate_log", "peer", "`pyrate-limiter` InMemoryBucket (sliding log), bucket per key: `try_acquire(key, 1, False)`",
     "kquota_named", peers.pyrate_builder("log")),
    ("pyrate_token", "peer", "`pyrate-limiter` StateBucket + TokenBucket, bucket per key", "kquota_named",
     peers.pyrate_builder("token")),
    ("token_bucket", "peer", "`token-bucket` Limiter, MemoryStorage: `consume(key, 1)`", "kquota_named",
     peers.token_bucket_builder()),
]
ROW_KEYS = [r[0] for r in ROWS]
