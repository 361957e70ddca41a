"""Fleet shares: how a quota is split among the proxies of a fleet (``--quota-scope fleet``).

Every member computes the split from the same usage records, so the members agree without
talking to each other beyond the usage topic. The rule is max-min fair on demand:

* a member whose measured rate stays below :data:`SATURATED` of its current share of the limit
  is *light*: it gets its rate times :data:`HEADROOM` (at least :data:`FLOOR` of an equal
  split), so it is never throttled below what it uses and can grow; a rate above the whole quota
  is read as the quota (no member uses more, so a larger one is an error and must not squeeze
  the others to nothing);
* the rest of the quota is split equally among the *saturated* members (those throttled at their
  share: they want more);
* whatever nobody wants is split equally among all, so the shares always add up to the whole.

The shares of one entity therefore add up to 1 and the fleet's aggregate rate tracks the quota.
"""

from __future__ import annotations

from typing import Mapping, Optional

#: A member measuring at least this fraction of its share of the limit wants more.
SATURATED = 0.9
#: A light member's share: its rate times this (room to grow before it saturates).
HEADROOM = 1.5
#: The smallest share of a member, as a fraction of an equal split (so a member whose client
#: just arrived is not held near zero while the others learn of it).
FLOOR = 0.1


def split(quota: float, demands: Mapping[str, Optional[float]]) -> dict[str, float]:
    """Each member's fraction of ``quota``: ``demands`` maps every live member to its measured
    rate if light, ``None`` if saturated (or 0.0 when it has no client of the entity). The
    fractions add up to 1."""
    n = len(demands)
    if n == 0 or not quota > 0:
        return {m: 1.0 / max(n, 1) for m in demands}
    floor = FLOOR / n
    alloc: dict[str, float] = {}
    saturated = [m for m, d in demands.items() if d is None]
    for m, d in demands.items():
        if d is not None:
            alloc[m] = max(min(d, quota) * HEADROOM / quota, floor)
    light_total = sum(alloc.values())
    if light_total > 1.0:  # light members alone want more than the quota: scale them down
        scale = (1.0 - floor * len(saturated)) / light_total
        alloc = {m: a * scale for m, a in alloc.items()}
        light_total = sum(alloc.values())
    rest = max(0.0, 1.0 - light_total)
    if saturated:
        # Water-filling: a light member wanting more than the equal split of the rest among the
        # saturated ones is treated as saturated too.
        while True:
            level = rest / len(saturated)
            over = [m for m in alloc if m not in saturated and alloc[m] > level and demands[m] is not None]
            if not over:
                break
            for m in over:
                saturated.append(m)
                rest += alloc.pop(m)
        for m in saturated:
            alloc[m] = rest / len(saturated)
    else:
        for m in alloc:
            alloc[m] += rest / n
    return alloc
