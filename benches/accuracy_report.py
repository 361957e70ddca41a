"""``benches/results/accuracy.md`` and ``accuracy.json``: the side-by-side section (Apache Kafka's
broker and ``kquota proxy``) and the tansu section, each between its own markers so a run of one
keeps the other's last table."""

from __future__ import annotations

import json
import os
import re
import tempfile

TITLE = "# Accuracy: real clients flat out through `kquota proxy`, beside Apache Kafka's own quotas"
#: Rate of the proxy column over the broker column's allowed in every cell.
TARGET = 0.03
SECTIONS = {
    "kafka": ("<!-- side-by-side: written by bench_accuracy.py --broker kafka -->",
              "## Side by side with Apache Kafka's broker"),
    "tansu": ("<!-- tansu: written by bench_accuracy.py --broker tansu -->",
              "## Through `kquota proxy` in front of tansu"),
}
END = "<!-- end -->"


def quick_dir() -> str:
    return os.environ.get("KQ_BENCH_RESULTS_DIR") or tempfile.mkdtemp(prefix="kquota-bench-")


def _sections(path: str) -> dict[str, str]:
    """The current report's sections by name; a report from before the markers is the tansu
    section as a whole (its title and first line dropped)."""
    if not os.path.exists(path):
        return {}
    text = open(path).read()
    out = {}
    for name, (marker, _) in SECTIONS.items():
        m = re.search(re.escape(marker) + r"\n(.*?)\n" + re.escape(END), text, re.S)
        if m:
            out[name] = m.group(1)
    if not out and text.startswith("# Accuracy"):
        body = text.split("\n", 2)[2].strip()
        out["tansu"] = SECTIONS["tansu"][1] + "\n\n" + body
    return out


def _write(path: str, name: str, body: str) -> None:
    sections = _sections(path)
    sections[name] = body.rstrip()
    parts = [TITLE, ""]
    for key, (marker, _) in SECTIONS.items():
        if key in sections:
            parts += [marker, sections[key], END, ""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(parts))


def write_tansu(path: str, lines: list[str]) -> None:
    _write(path, "tansu", "\n".join([SECTIONS["tansu"][1], "", *lines]))


def _x(v: float) -> str:
    return f"{v:.3f}x"


def _ms(r: dict) -> str:
    if not r["throttled_responses"]:
        return "none"
    return f"{r['throttle_p50_ms']:.0f} / {r['throttle_p99_ms']:.0f} / {r['throttle_max_ms']:.0f} ({r['throttled_responses']})"


def kafka_table(rows: list[dict]) -> tuple[list[str], dict]:
    """The table's lines and a summary: cells within the target, cells where the broker ran over."""
    from accuracy_side import pair_rows

    lines = ["| quota | client | window | broker rate | proxy rate | proxy / broker | within 3% | proxy recorded "
             "| throttle ms p50 / p99 / max (n): broker | proxy | burst: broker | proxy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary: dict = {"cells": 0, "within": 0, "broker_over_5pct": [], "not_throttled": [], "failed": []}
    for b, p in pair_rows(rows):
        name = f"{b['role']} {b['kind']}"
        q = f"{b['quota'] / 1e3:.0f} KB/s"
        if "error" in b or "error" in p:
            err = b.get("error") or p.get("error")
            summary["failed"].append(f"{q} {name}: {err}")
            lines.append(f"| {q} | {name} | - | failed: {err!r} | | | | | | | | |")
            continue
        ratio = p["rate"] / b["rate"] if b["rate"] else float("inf")
        ok = abs(ratio - 1) <= TARGET
        # A client that never got a throttle in either column ran below its quota (its own CPU or
        # the machine's load bound it): the ratio compares client speeds, not quota enforcement.
        held = b["throttled_responses"] > 0 or p["throttled_responses"] > 0
        if held:
            summary["cells"] += 1
            summary["within"] += ok
        else:
            summary["not_throttled"].append(f"{q} {name}")
        verdict = ("yes" if ok else "no") if held else "n/a: neither throttled"
        if b["rate"] > 1.05:
            summary["broker_over_5pct"].append(f"{q} {name}: {b['rate']:.3f}x")
        w0, w1 = b["window_s"]
        lines.append(f"| {q} | {name} | {w0:.0f}-{w1:.0f} s | {_x(b['rate'])} | {_x(p['rate'])} | {ratio:.3f} "
                     f"| {verdict} | {_x(p.get('proxy_recorded_rate', 0.0))} | {_ms(b)} | {_ms(p)} "
                     f"| {b['burst']:.2f} | {p['burst']:.2f} |")
    return lines, summary


def write_kafka(path: str, rows: list[dict], meta: dict, start_s: float) -> None:
    lines, summary = kafka_table(rows)
    la0, la1 = meta["loadavg_start"], meta["loadavg_end"]
    head = [
        SECTIONS["kafka"][1], "",
        f"Run {meta['started']} on {meta['machine']}, {meta['cores']} cores, load average "
        f"{la0[0]:.1f} / {la0[1]:.1f} / {la0[2]:.1f} at the start and {la1[0]:.1f} / {la1[1]:.1f} / {la1[2]:.1f} at "
        f"the end (1 / 5 / 15 min; a machine shared with other work: the numbers are noisy). Apache Kafka "
        f"{meta['kafka']} (`scripts/kafka.sh`, one KRaft broker, PLAINTEXT), quota.window.num={meta['window_num']}, "
        "1 s windows on both sides. For each quota every client kind runs twice at the same time, each run its "
        "own client id and the same quota"
        + (" (the producers of both columns first, then the consumers)" if meta.get("by_role") else
           " (every client of the quota at once)")
        + ": **broker**, straight to the broker with the quota set on the broker "
        "(AlterClientQuotas by client id); **proxy**, through the native `kquota proxy` plane in front of the "
        "same broker, the quota in the proxy and none on the broker"
        + (f" (the proxy's `kquota.fetch.answer={meta['fetch_answer']}`)." if meta.get("fetch_answer") else "."),
        "",
        "Both columns are measured the same way, from the client's side: `rate` is the payload bytes "
        "delivered (producers: acknowledged records) or handed to the application (consumers) from "
        f"{start_s:.0f} s over the window, divided by the quota (the quota also counts record and request "
        "overhead, a few per cent at 1000-byte records, so a client held exactly at its quota shows a little "
        "under 1.000x in both columns); `throttle ms` is the distribution of the non-zero `throttle_time_ms` "
        "the client's responses carried in the window (confluent-kafka: `throttle_cb`; kafka-python and "
        "aiokafka: read from each response), with their count; `burst` is the first second's payload bytes "
        "over Kafka's first-window allowance (quota x (window_num - 1) s). `proxy recorded` is the bytes the "
        "proxy itself recorded for the proxy column (request bytes for Produce, response bytes for Fetch), "
        "as in the tansu table.",
        "",
        *lines,
        "",
        f"Proxy within 3% of the broker: {summary['within']} of {summary['cells']} cells where a quota held "
        f"(a throttle in either column); {len(summary['not_throttled'])} cells had no throttle in either column "
        "(the client ran below its quota) and are not counted. "
        "Broker over its quota by more than 5% (client-side rate): "
        + (", ".join(summary["broker_over_5pct"]) or "none") + "."
        + (" Failed: " + "; ".join(summary["failed"]) + "." if summary["failed"] else ""),
    ]
    _write(path, "kafka", "\n".join(head))
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump({"meta": meta, "summary": summary, "rows": rows}, f, indent=1)
