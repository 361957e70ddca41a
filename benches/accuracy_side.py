"""The accuracy workload side by side: Apache Kafka's broker enforcing the quotas itself, and
``kquota proxy`` enforcing the same quotas in front of the same broker (``bench_accuracy.py``
writes the report).

For one quota every client kind of ``tests/support/proxy_accuracy.py`` runs twice at the same
time, each run its own client id and the same quota:

- column ``broker``: straight to the broker's PLAINTEXT listener, the quota set on the broker by
  client id (one AlterClientQuotas request, ``producer_byte_rate`` / ``consumer_byte_rate``);
- column ``proxy``: through the native proxy (the ``kquota proxy`` data plane, in this process)
  in front of the same listener, the quota in the proxy's kernel and none on the broker for
  those client ids.

Running both columns at once puts them under the same load of a shared machine. Both columns are
measured the same way, from the client's side (``accuracy_client.py``): payload bytes delivered
or consumed over the window, and the ``throttle_time_ms`` of the responses. Payload bytes leave
out the record and request overhead the quota also counts (a few per cent for 1000-byte
records), equally in both columns; the proxy column also shows the bytes the proxy itself
recorded, as the tansu table does.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))

import kquota  # noqa: E402
from proxy_accuracy import CONSUMERS, PRODUCERS, RequestRows, preload, rate_over  # noqa: E402
from proxy_support import ProxyThread  # noqa: E402

CLIENT = os.path.join(HERE, "accuracy_client.py")
COLUMNS = ("broker", "proxy")


@dataclass
class SideCell:
    kind: str
    role: str  # "produce" or "consume"
    column: str  # "broker" or "proxy"
    quota: float
    client_id: str
    log: str
    start_ms: int = 0
    error: str = ""
    proc: Optional[subprocess.Popen] = field(default=None, repr=False)

    @property
    def quota_key(self) -> str:
        return "producer_byte_rate" if self.role == "produce" else "consumer_byte_rate"


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100.0 * len(s)) - 1))]


def broker_quotas(address: str, cells: list[SideCell], remove: bool = False, timeout: float = 60.0) -> None:
    """Sets (or removes) each broker-column cell's quota on the broker by client id, in one
    AlterClientQuotas request, and waits until DescribeClientQuotas shows it."""
    from kquota.kafka.admin_client import AdminConnection

    entries = [{"Entity": [{"EntityType": "client-id", "EntityName": c.client_id}],
                "Ops": [{"Key": c.quota_key, "Value": 0.0 if remove else float(c.quota), "Remove": remove}]}
               for c in cells]
    with AdminConnection(address) as admin:
        for result in admin.alter_client_quotas(entries, False):
            if result.get("ErrorCode"):
                raise RuntimeError(f"AlterClientQuotas refused: {result}")
        deadline = time.monotonic() + timeout
        want = set() if remove else {c.client_id for c in cells}
        while True:
            seen = {part["EntityName"] for e in admin.describe_client_quotas(
                [{"EntityType": "client-id", "MatchType": 2, "Match": None}], False)
                for part in (e["Entity"] or []) if part["EntityName"] in {c.client_id for c in cells}}
            if seen == want:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker's quotas did not settle: {sorted(seen)} vs {sorted(want)}")
            time.sleep(0.2)
    time.sleep(1.0)  # the controller's record reaches the broker's quota manager through the metadata log


def start_client(cell: SideCell, address: str, topic: str, seconds: float) -> None:
    cell.start_ms = int(time.time() * 1000)
    cell.proc = subprocess.Popen(
        [sys.executable, CLIENT, cell.kind, cell.role, address, topic, cell.client_id, str(seconds), cell.log],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_client(cell: SideCell, seconds: float) -> None:
    assert cell.proc is not None
    try:
        _, err = cell.proc.communicate(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        cell.proc.kill()
        _, err = cell.proc.communicate()
    if cell.proc.returncode != 0 or not os.path.exists(cell.log):
        cell.error = " | ".join(err.decode(errors="replace").strip().splitlines()[-3:]) or f"exit {cell.proc.returncode}"


def measure(cell: SideCell, window_num: int, start_s: float, end_s: float,
            rows: Optional[RequestRows] = None) -> dict:
    """One cell's row: client-side rate / quota over ``[start, end)``, the throttle times
    (non-zero ones) in that window, the first second's burst against Kafka's first-window
    allowance (``quota * (window_num - 1)``), and for the proxy column the proxy's own record."""
    with open(cell.log) as f:
        data = json.load(f)
    buckets = [(b * 10, n) for b, n in data["bytes"] if n]
    rate = rate_over(buckets, cell.start_ms, start_s, end_s) / cell.quota
    lo, hi = cell.start_ms + start_s * 1000, cell.start_ms + end_s * 1000
    throttles = [ms for t, ms in data["throttles"] if lo <= t < hi and ms > 0]
    burst = 0.0
    if buckets:
        t0 = buckets[0][0]
        burst = sum(n for t, n in buckets if t < t0 + 1000) / (cell.quota * (window_num - 1))
    row = {"quota": cell.quota, "kind": cell.kind, "role": cell.role, "column": cell.column,
           "client_id": cell.client_id, "start_ms": cell.start_ms, "window_s": [start_s, end_s], "rate": rate, "burst": burst,
           "throttled_responses": len(throttles), "throttle_p50_ms": percentile(throttles, 50),
           "throttle_p99_ms": percentile(throttles, 99), "throttle_max_ms": max(throttles, default=0.0)}
    if rows is not None:
        qt = "PRODUCE" if cell.role == "produce" else "FETCH"
        row["proxy_recorded_rate"] = rate_over(rows.of(cell.client_id, qt), cell.start_ms, start_s, end_s) / cell.quota
    return row


def run_rate(broker, quota: float, window_num: int, start_s: float, length: float,
             by_role: bool = False, roles: tuple[str, ...] = ("produce", "consume"),
             fetch_answer: str | None = None) -> list[dict]:
    """Both columns of one quota at once; one row per cell (``error`` set when a client failed).
    ``by_role``: the producers of both columns first, then the consumers (half the processes at
    once, for a machine that cannot run them all at their quota). ``roles``: which clients run;
    ``fetch_answer``: the proxy's ``kquota.fetch.answer`` (``None``: its default)."""
    end = start_s + length
    address = broker.listeners["PLAINTEXT"]
    run = uuid.uuid4().hex[:6]
    topics = {(col, "produce"): f"acc-{run}-{col}-p" for col in COLUMNS}
    consume_topic = f"acc-{run}-c"
    for name in [*topics.values(), consume_topic]:
        broker.create_topic(name)
    for col in COLUMNS:
        topics[(col, "consume")] = consume_topic
    print(f"[{quota:.0f} B/s] preloading {quota * (end + 5) / 1e6:.0f} MB", flush=True)
    preload(address, consume_topic, int(quota * (end + 5)))
    logs = tempfile.mkdtemp(prefix="kquota-accuracy-")
    tag = f"{int(quota)}-{run}"
    cells = [SideCell(k, role, col, quota, f"{col[0]}{role[0]}-{k}-{tag}", os.path.join(logs, f"{col}-{role}-{k}.json"))
             for col in COLUMNS for role, kinds in (("produce", PRODUCERS), ("consume", CONSUMERS)) if role in roles
             for k in kinds]
    on_broker = [c for c in cells if c.column == "broker"]
    broker_quotas(address, on_broker)
    rows = RequestRows()
    qm = kquota.QuotaManager(window_num=window_num, window_size_seconds=1, fetch_answer=fetch_answer)
    qm.alter_client_quotas([({"client-id": c.client_id}, {c.quota_key: c.quota}) for c in cells if c.column == "proxy"])
    host, port = address.rsplit(":", 1)
    proxy = ProxyThread((host, int(port)), qm=qm, request_log=rows)
    try:
        groups = [[c for c in cells if c.role == role] for role in roles] if by_role else [cells]
        for group in groups:
            print(f"[{quota:.0f} B/s] {len(group)} clients (half per column) for {end:.0f} s", flush=True)
            for c in group:
                start_client(c, address if c.column == "broker" else proxy.address, topics[(c.column, c.role)], end + 1)
            for c in group:
                wait_client(c, end + 1)
    finally:
        for c in cells:
            if c.proc is not None and c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
        proxy.stop()
        qm.close()
        broker_quotas(address, on_broker, remove=True)
    out = []
    for c in cells:
        if c.error:
            out.append({"quota": quota, "kind": c.kind, "role": c.role, "column": c.column, "error": c.error})
        else:
            out.append(measure(c, window_num, start_s, end, rows if c.column == "proxy" else None))
    return out


def pair_rows(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(broker row, proxy row) of each (quota, role, kind), in the run's order."""
    by = {(r["quota"], r["role"], r["kind"], r["column"]): r for r in rows}
    keys = list(dict.fromkeys((r["quota"], r["role"], r["kind"]) for r in rows))
    return [(by[(*k, "broker")], by[(*k, "proxy")]) for k in keys if (*k, "broker") in by and (*k, "proxy") in by]
