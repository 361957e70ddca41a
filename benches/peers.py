"""The peer rate limiters of the comparison, each set up for the same keyed work as kquota.

Every builder takes the entities (a list of ``(user, client_id, key)``; ``key`` is
``"user:client_id"`` for peers that take one name) and returns a :class:`Runner`: ``run()`` is one
round, a loop over every entity doing one "record one unit for this entity, may it proceed?" in
the peer's own idiom, with the peer's method bound to a local beforehand (no wrapper call in
the timed loop, the same shape as kquota's rows); ``check()`` runs one more round and returns
whether every call was admitted (run once after timing, to confirm the timed path was the
non-limited one, as for kquota).

A builder raises :class:`Unavailable` when the peer is not installed or its installed version
has a different API; the suite then lists the row as unavailable instead of measuring
something else.

Limits are set far above the offered load (1e6 units per second per key) so no call is ever
refused: like kquota's rows, the timed path is the admitted one.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Callable, Optional

#: Units per second per key: never reached by the benchmark's load.
PEER_LIMIT_PER_SECOND = 1_000_000


@dataclasses.dataclass
class Runner:
    """One measured row, built fresh for every pass.

    ``run``: one timed round (one call per entity). ``check``: one untimed round returning
    whether every call took the admitted / zero-throttle path. ``prep``: untimed work before
    each round (e.g. building the next batch). ``close``: releases background threads.
    ``calls``: requests per round, if not one per entity (per-call time = round / calls)."""

    run: Callable[[], None]
    check: Callable[[], bool]
    prep: Optional[Callable[[], None]] = None
    close: Optional[Callable[[], None]] = None
    calls: Optional[int] = None  # calls per round when not one per entity


class Unavailable(Exception):
    """This row cannot be measured with what is installed (the message says why)."""


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _need(dist: str, module: str, major: tuple[int, ...]):
    v = version(dist)
    if v is None:
        raise Unavailable(f"{dist} is not installed (pip install 'kquota[bench]')")
    if int(v.split(".")[0]) not in major:
        raise Unavailable(f"{dist} {v} installed; this suite speaks major version(s) {major}")
    return importlib.import_module(module)


def limits_builder(strategy: str):
    """``limits`` (5.x), ``MemoryStorage``, one ``RateLimitItemPerSecond``; ``hit(item, user,
    client_id)`` builds the key from the item's namespace and both identifiers, as a web
    framework integration does."""

    def build(ents):
        limits = _need("limits", "limits", (5,))
        from limits import storage, strategies

        cls = {"fixed": strategies.FixedWindowRateLimiter,
               "moving": strategies.MovingWindowRateLimiter,
               "sliding": getattr(strategies, "SlidingWindowCounterRateLimiter", None)}[strategy]
        if cls is None:
            raise Unavailable(f"limits {version('limits')} has no {strategy}-window strategy")
        limiter = cls(storage.MemoryStorage())
        item = limits.RateLimitItemPerSecond(PEER_LIMIT_PER_SECOND)
        hit = limiter.hit

        def run():
            for u, c, _k in ents:
                hit(item, u, c)

        def check():
            return all([hit(item, u, c) for u, c, _k in ents])

        return Runner(run, check)

    return build


def pyrate_builder(kind: str):
    """``pyrate-limiter`` (4.x), in memory. Its ``Limiter`` over a single bucket shares that
    bucket between all names, so keyed limiting needs a ``BucketFactory`` routing each name to
    its own bucket (the pattern its documentation gives); buckets are created through the
    factory's ``create`` so its background leaker trims them, as in real use.

    ``kind="log"``: ``InMemoryBucket`` (a sliding-window log, its default);
    ``kind="token"``: ``StateBucket`` with the ``TokenBucket`` algorithm (constant state per key).
    """

    def build(ents):
        pl = _need("pyrate-limiter", "pyrate_limiter", (4,))
        rates = [pl.Rate(PEER_LIMIT_PER_SECOND, pl.Duration.SECOND)]
        if kind == "token" and not hasattr(pl, "StateBucket"):
            raise Unavailable(f"pyrate-limiter {version('pyrate-limiter')} has no StateBucket")

        class KeyedFactory(pl.BucketFactory):
            def __init__(self):
                self.buckets = {}
                self.clock = pl.MonotonicClock()

            def wrap_item(self, name, weight=1):
                return pl.RateItem(name, self.clock.now(), weight=weight)

            def get(self, item):
                b = self.buckets.get(item.name)
                if b is None:
                    if kind == "log":
                        b = self.create(pl.InMemoryBucket, rates)
                    else:
                        b = self.create(pl.StateBucket, rates, algorithm=pl.TokenBucket())
                    self.buckets[item.name] = b
                return b

        limiter = pl.Limiter(KeyedFactory())
        acquire = limiter.try_acquire

        def run():
            for _u, _c, k in ents:
                acquire(k, 1, False)

        def check():
            return all([acquire(k, 1, False) for _u, _c, k in ents])

        return Runner(run, check, close=limiter.close)

    return build


def token_bucket_builder():
    """``token-bucket`` (0.x), ``MemoryStorage``: ``consume(key, 1)``."""

    def build(ents):
        tb = _need("token-bucket", "token_bucket", (0,))
        limiter = tb.Limiter(PEER_LIMIT_PER_SECOND, PEER_LIMIT_PER_SECOND, tb.MemoryStorage())
        consume = limiter.consume

        def run():
            for _u, _c, k in ents:
                consume(k, 1)

        def check():
            return all([consume(k, 1) for _u, _c, k in ents])

        return Runner(run, check)

    return build
