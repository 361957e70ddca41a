"""The rows of the proxy benchmark (benches/bench_proxy.py): pooled quantiles, bootstrap
intervals over the broker pairs, the verdict of each row against its target, and the Markdown
report."""

from __future__ import annotations

import bisect
import random
import statistics
from collections.abc import Callable, Iterable, Iterator


def pooled_pct(segments: list[list[float]], q: float, weights: list[int] | None = None) -> float:
    """The ``q`` quantile of the segments' samples pooled, segment ``i`` counted ``weights[i]`` times.

    ``segments`` are sorted. Bisection on the value (not a sort of the pool) keeps a bootstrap
    resample cheap: the k-th smallest pooled sample is the least x with k + 1 samples <= x."""
    weights = weights or [1] * len(segments)
    n = sum(w * len(s) for s, w in zip(segments, weights))
    k = min(n - 1, int(q * n))
    lo = min(s[0] for s, w in zip(segments, weights) if w and s)
    hi = max(s[-1] for s, w in zip(segments, weights) if w and s)
    for _ in range(40):  # (hi - lo) / 2**40: far below the clock's resolution
        mid = (lo + hi) / 2
        if sum(w * bisect.bisect_right(s, mid) for s, w in zip(segments, weights)) >= k + 1:
            hi = mid
        else:
            lo = mid
    return hi


def added_latency(direct: list[list[float]], proxy: list[list[float]], q: float) -> tuple[float, float, float]:
    """Proxy minus direct ``q`` quantile of the pooled samples, and its 95% bootstrap interval.

    The pairs of segments are resampled (with replacement, both sides by the same draw: a pair
    ran back to back), so the interval carries what the pair-to-pair spread says about the
    estimate, the broker's pauses included."""
    est = pooled_pct(proxy, q) - pooled_pct(direct, q)
    return est, *interval(pooled_pct(proxy, q, w) - pooled_pct(direct, q, w) for w in resample_pairs(len(direct)))


def interval(draws: Iterable[float]) -> tuple[float, float]:
    """The central 95% of bootstrap ``draws``."""
    ordered = sorted(draws)
    return ordered[int(0.025 * len(ordered))], ordered[int(0.975 * len(ordered)) - 1]


def resample_pairs(n: int, resamples: int = 1000) -> Iterator[list[int]]:
    """Bootstrap draws of ``n`` pairs: how often each pair is taken. Fixed seed: the same samples
    give the same bounds."""
    rng = random.Random(599)
    for _ in range(resamples):
        weights = [0] * n
        for _ in range(n):
            weights[rng.randrange(n)] += 1
        yield weights


def verdict(lo: float, hi: float, ok: Callable[[float], bool]) -> str:
    """met: the whole 95% interval passes; NOT met: none of it does; else this run cannot tell,
    and says so rather than read the noise either way."""
    if ok(lo) and ok(hi):
        return "met"
    return "NOT met" if not ok(lo) and not ok(hi) else "unresolved: the interval spans it"


def ratio_row(direct: list[float], proxy: list[float], target: float | str) -> dict:
    """One throughput row: proxy over direct medians of interleaved pairs, with the 95% bootstrap
    interval over the pairs; ``target`` a least ratio (judged), or "control" / "floor" (not)."""
    def ratio(weights: list[int]) -> float:
        pick = [i for i, w in enumerate(weights) for _ in range(w)]
        return statistics.median(proxy[i] for i in pick) / statistics.median(direct[i] for i in pick)

    lo, hi = interval(ratio(w) for w in resample_pairs(len(direct)))
    row = {"direct": statistics.median(direct), "proxy": statistics.median(proxy), "unit": "msg/s",
           "ratio": ratio([1] * len(direct)), "ci95": [lo, hi], "pairs": len(direct),
           "runs": {"direct": [round(v) for v in direct], "proxy": [round(v) for v in proxy]},
           "target": target if isinstance(target, str) else f">= {target}"}
    if not isinstance(target, str):
        row["verdict"] = verdict(lo, hi, lambda r: r >= target)
    return row


def latency_row(direct: list[list[float]], proxy: list[list[float]], q: float, target: str) -> dict:
    """One latency row; ``target`` "added <= X ms" gets a verdict on the whole 95% interval."""
    added, lo, hi = added_latency(direct, proxy, q)
    row = {"direct": pooled_pct(direct, q), "proxy": pooled_pct(proxy, q), "unit": "ms", "added": added,
           "ci95": [lo, hi], "pairs": len(direct), "target": target}
    if target.startswith("added <="):
        bound = float(target.split()[-2])
        row["verdict"] = verdict(lo, hi, lambda added: added <= bound)
    return row


def congestion_control() -> str:
    """The machine's default TCP congestion control (every socket here uses it: client, proxy and
    broker set none of their own), or "unknown" off Linux."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def value_text(row: dict) -> str:
    """``0.93× (95%: 0.85 to 1.02)`` or ``+1.234 ms (95%: -0.50 to +3.00)``: ratio or added latency
    with its bootstrap interval."""
    lo, hi = row["ci95"]
    if "ratio" in row:
        return f"{row['ratio']:.2f}× (95%: {lo:.2f} to {hi:.2f})"
    return f"{row['added']:+.3f} ms (95%: {lo:+.2f} to {hi:+.2f})"


def render(r: dict) -> str:
    from kquota._kquota import __build_profile__

    m = r["machine"]
    lines = [
        "# kquota proxy: through the proxy vs direct (tansu, librdkafka, 1 KB messages)", "",
        (f"Generated {r['generated']} by `benches/bench_proxy.py` ({r['messages']} messages per throughput "
         f"segment, median of {r['repeats'] * r.get('segments', 1)} direct/proxied segment pairs, alternating, on "
         f"{r['repeats']} pairs of fresh brokers, timed from the first message; latency: "
         f"{r.get('latency_pairs', 1)} interleaved direct/proxy segments of {r.get('latency_seconds', 5)} s pooled, "
         "95% intervals from resampling the pairs); "
         f"kquota {__build_profile__} build."),
        (f"Machine: {m['cpu_count']} CPUs, {m['platform']}, Python {m['python']}; load average before "
         f"{m['loadavg_before'][0]:.2f}, after {m['loadavg_after'][0]:.2f} (the machine is shared: broker, client "
         "and proxy compete for the same 2 cores except in the rows with the broker on its own core, and "
         "other jobs ran); TCP congestion control "
         f"{m.get('tcp_congestion_control', 'unknown')}."), "",
        "| row | direct | proxy | ratio / added | target | |", "|---|---:|---:|---:|---|---|",
    ]
    for key, row in r["rows"].items():
        if "ratio" not in row and "added" not in row:
            continue
        target = {"floor": "(reference)", "control": "(control)"}.get(row["target"], row["target"])
        fmt = "{:,.0f} msg/s" if "ratio" in row else "{:.3f} ms"
        lines.append(f"| {key} | {fmt.format(row['direct'])} | {fmt.format(row['proxy'])} | {value_text(row)} | "
                     f"{target} | {row.get('verdict', '')} |")
    lines += ["", "| row | value | |", "|---|---:|---|"]
    for key, row in r["rows"].items():
        if "value" in row:
            lines.append(f"| {key} | {row['value']:.2f} {row['unit']} | {row['note']} |")
    for key, c in r["rows"].items():
        if not key.startswith("concurrent connections"):
            continue
        lines.append(f"| {key} | {c['answered']} / {c['connections']} answered | all open at once: "
                     f"opened in {c['open_s']:.2f} s, all answered in {c['all_answered_s']:.2f} s; proxy RSS "
                     f"{c['proxy_rss_mb_before']:.0f} -> {c['proxy_rss_mb_with_conns']:.0f} MB |")
    codes = r["proxy_exit_code"]
    codes = ", ".join(f"{k}: {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in codes.items())
    lines += ["", f"Proxy exit status on SIGTERM: {codes}.", ""]
    return "\n".join(lines)
