"""`kquota demo`: a short live demonstration of Kafka-style produce throttling."""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

from kquota._kquota import ClientQuotaType
from kquota.manager import QuotaManager

PRODUCE = ClientQuotaType.PRODUCE


def run_demo(
    seconds: float = 8.0,
    quota: int = 1_000_000,
    batch: int = 100_000,
    interval_ms: int = 25,
    simulated: bool = False,
    out: Optional[TextIO] = None,
    sleep: Optional[Callable[[float], None]] = None,
) -> dict[str, float]:
    """Runs a producer that tries to send at ``batch / interval`` bytes/s against a user quota of
    ``quota`` bytes/s, honouring every throttle like a KIP-219 client (it waits before sending
    again). Prints one line a second and returns the totals.

    With ``simulated=True`` time is simulated (instant, reproducible); otherwise it runs on the
    real monotonic clock and takes ``seconds`` seconds.
    """
    out = out if out is not None else sys.stdout
    qm = QuotaManager()
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": quota})])
    conn = qm.client("alice", "producer-1")
    offered = batch * 1000 / interval_ms
    print(
        f"quota for user alice: {quota:,} B/s; producer offers {offered:,.0f} B/s "
        f"({batch:,} B every {interval_ms} ms){' [simulated clock]' if simulated else ''}",
        file=out,
    )
    print(f"{'second':>6} {'sent B':>12} {'throttled':>9} {'max wait ms':>11} {'measured B/s':>13}", file=out)
    clock_ms = 0
    start = 0 if simulated else int(time.monotonic() * 1000)
    wait = sleep or time.sleep
    sent_total = 0
    throttled_total = 0
    second = 0
    sent = throttled = max_wait = 0
    while True:
        now = start + clock_ms if simulated else int(time.monotonic() * 1000)
        elapsed = now - start
        if elapsed >= (second + 1) * 1000:
            rate = conn.measured_rate(PRODUCE, now_ms=now)
            print(f"{second + 1:>6} {sent:>12,} {throttled:>9} {max_wait:>11} {rate:>13,.0f}", file=out)
            second += 1
            sent = throttled = max_wait = 0
        if elapsed >= seconds * 1000:
            break
        throttle = conn.record_and_get_throttle_time_ms(PRODUCE, batch, now_ms=now)
        sent += batch
        sent_total += batch
        delay = interval_ms
        if throttle > 0:
            throttled += 1
            throttled_total += 1
            max_wait = max(max_wait, throttle)
            delay = max(delay, throttle)
        if simulated:
            clock_ms += delay
        else:
            wait(delay / 1000)
    achieved = sent_total / seconds
    print(
        f"achieved {achieved:,.0f} B/s over {seconds:g} s against a quota of {quota:,} B/s "
        f"({throttled_total} throttled responses)",
        file=out,
    )
    return {"achieved": achieved, "offered": offered, "quota": float(quota), "throttled": float(throttled_total)}
