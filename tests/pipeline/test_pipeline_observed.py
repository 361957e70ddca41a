"""The proxy's observed columns in the pipeline (docs/pipeline.md, "Enforced vs shadow"): a log
written by the proxy's own writer with enforced and shadow throttles is totalled per entity by
``usage`` and shown side by side by ``report``; a log without them (an older one) reads as
before; hostile observed values are bad rows, counted by reason in the one bad-rows line."""

from __future__ import annotations

import csv
import json
import re

import pandas as pd
import pytest

from kquota.cli import main
from kquota.pipeline.schema import read_requests
from kquota.proxy.request_log_writer import RequestLogWriter

pq = pytest.importorskip("pyarrow.parquet")

T0 = 1_700_000_000_000


def _proxy_log(path, shadow: bool = True) -> None:
    """Three entities over 3 s through the proxy's writer: ``alice/app`` throttled both ways
    (the shadow more), ``carol/etl`` only enforced, ``bob`` neither (the shadow saw it)."""
    def s(v: int):
        return v if shadow else None

    log = RequestLogWriter(str(path), rotate_seconds=600)
    try:
        for i in range(30):
            ts = T0 + i * 100
            log.add(ts, "alice", "app", "PRODUCE", 10_000, 40 if i % 3 == 0 else 0,
                    s(100 if i % 2 == 0 else 0), s(10_000 if i % 2 == 0 else 0))
            log.add(ts, "carol", "etl", "PRODUCE", 2_000, 25 if i % 10 == 0 else 0, s(0), s(0))
            log.add(ts, "bob", "", "FETCH", 500, 0, s(0), s(0))
    finally:
        log.close()


def _report(tmp_path, log, capsys) -> tuple[str, str]:
    out = tmp_path / "out"
    assert main(["pipeline", "usage", "--input", str(log), "--out", str(out / "usage")]) == 0
    usage_text = capsys.readouterr().out
    assert main(["pipeline", "recommend", "--usage", str(out / "usage"), "--out", str(out / "rec"),
                 "--level", "client-id"]) == 0
    assert main(["pipeline", "simulate", "--input", str(log), "--quotas", str(out / "rec" / "quotas.json"),
                 "--out", str(out / "sim")]) == 0
    assert main(["pipeline", "report", "--usage", str(out / "usage"), "--simulation", str(out / "sim"),
                 "--recommendation", str(out / "rec"), "--out", str(out / "report.html")]) == 0
    capsys.readouterr()
    return usage_text, (out / "report.html").read_text()


def test_enforced_and_shadow_throttles_side_by_side(spark, tmp_path, capsys):
    log = tmp_path / "log"
    _proxy_log(log)
    usage_text, html = _report(tmp_path, log, capsys)
    assert "no bad rows" in usage_text and "observed" in usage_text
    got = pd.read_parquet(tmp_path / "out" / "usage" / "observed").set_index(["user", "client_id", "quota_type"])
    alice = got.loc[("alice", "app", "PRODUCE")]
    assert (alice.requests, alice.throttle_time_ms, alice.throttled) == (30, 10 * 40, 10)
    assert (alice.shadow_throttle_time_ms, alice.shadow_throttled, alice.shadow_delayed_bytes) == (15 * 100, 15, 150_000)
    assert alice.shadow_rows == 30
    carol = got.loc[("carol", "etl", "PRODUCE")]
    assert (carol.throttle_time_ms, carol.shadow_throttle_time_ms, carol.shadow_delayed_bytes) == (3 * 25, 0, 0)
    assert got.loc[("bob", "", "FETCH")].throttle_time_ms == 0

    section = html.split('<h2 id="shadow">Enforced vs shadow</h2>')[1]
    assert '<a href="#shadow">Enforced vs shadow</a>' in html
    rows = re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1].split("</tbody>")[0])
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
    # Largest throttle either way first; bob (no throttle either way) left out, and said so.
    assert [c[0] for c in cells] == ["users/alice/clients/app", "users/carol/clients/etl"]
    assert cells[0][1:] == ["PRODUCE", "30", "400 ms", "10", "1,500 ms", "15", "150 KB"]
    assert "(1 entity without any left out)" in section and "no shadow value" not in section
    with open(tmp_path / "out" / "report-shadow.csv", newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    assert table[0] == ["entity", "quota type", "requests", "enforced throttle (ms)", "throttled", "shadow throttle (ms)",
                        "shadow throttled", "shadow delayed (bytes)"]
    assert table[1] == ["users/alice/clients/app", "PRODUCE", "30", "400", "10", "1500", "15", "150000"]


def test_a_log_without_a_shadow_or_without_observed_columns(spark, tmp_path, capsys):
    log = tmp_path / "log"
    _proxy_log(log, shadow=False)
    _, html = _report(tmp_path, log, capsys)
    section = html.split('<h2 id="shadow">Enforced vs shadow</h2>')[1]
    assert "The log carries no shadow value" in section
    header = section.split("<thead>")[1].split("</thead>")[0]
    assert "enforced throttle" in header and "shadow throttle" not in header  # empty columns left out

    # An older log (the required columns only): read as before, no observed table, no section.
    old = tmp_path / "old.csv"
    old.write_text("ts_ms,user,client_id,quota_type,value\n" + "".join(
        f"{T0 + i * 100},alice,app,PRODUCE,1000\n" for i in range(20)))
    assert read_requests(spark, str(old)).observed is None
    (tmp_path / "out").rename(tmp_path / "first")
    _, html = _report(tmp_path, old, capsys)
    assert not (tmp_path / "out" / "usage" / "observed").exists()
    assert "Enforced vs shadow" not in html and 'id="usage"' in html


def test_hostile_observed_values_are_bad_rows_in_one_line(spark, tmp_path, capsys):
    """Negative, NaN, infinite, fractional and non-numeric observed values, in CSV (all text) and
    JSON lines (numbers, NaN and text mixed): each row is bad with its column named; a null (not
    observed) is not; the good rows are totalled."""
    header = "ts_ms,user,client_id,quota_type,value,throttle_time_ms,shadow_throttle_time_ms,shadow_delayed_bytes\n"
    lines = [f"{T0},a,app,PRODUCE,100,5,10,100",              # good
             f"{T0 + 1},a,app,PRODUCE,100,0,,",                 # good: no shadow observed
             f"{T0 + 2},a,app,PRODUCE,100,0,-1,100",            # negative shadow throttle
             f"{T0 + 3},a,app,PRODUCE,100,0,NaN,100",           # NaN
             f"{T0 + 4},a,app,PRODUCE,100,0,10,-5",             # negative delayed bytes
             f"{T0 + 5},a,app,PRODUCE,100,0,10,NaN",
             f"{T0 + 6},a,app,PRODUCE,100,0,10,Infinity",
             f"{T0 + 7},a,app,PRODUCE,100,-3,0,0",              # negative enforced throttle
             f"{T0 + 8},a,app,PRODUCE,100,1.5,0,0",             # fractional
             f"{T0 + 9},a,app,PRODUCE,100,0,x,0",               # text
             f"{T0 + 10},a,app,PRODUCE,-1,0,-1,0"]              # a bad value: its first reason counts
    (tmp_path / "log.csv").write_text(header + "\n".join(lines) + "\n")
    rows = [{"ts_ms": T0, "user": "a", "client_id": "app", "quota_type": "FETCH", "value": 10,
             "throttle_time_ms": 0, "shadow_throttle_time_ms": 7, "shadow_delayed_bytes": 70},
            {"ts_ms": T0 + 1, "user": "a", "client_id": "app", "quota_type": "FETCH", "value": 10,
             "throttle_time_ms": 0, "shadow_throttle_time_ms": float("nan"), "shadow_delayed_bytes": 1},
            {"ts_ms": T0 + 2, "user": "a", "client_id": "app", "quota_type": "FETCH", "value": 10,
             "throttle_time_ms": 0, "shadow_throttle_time_ms": -7, "shadow_delayed_bytes": 1},
            {"ts_ms": T0 + 3, "user": "a", "client_id": "app", "quota_type": "FETCH", "value": 10,
             "throttle_time_ms": 0, "shadow_throttle_time_ms": 1, "shadow_delayed_bytes": "lots"},
            {"ts_ms": T0 + 4, "user": "a", "client_id": "app", "quota_type": "FETCH", "value": 10,
             "throttle_time_ms": 0, "shadow_throttle_time_ms": 1e300, "shadow_delayed_bytes": 1}]
    (tmp_path / "log.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

    for name, good, counts in (
        ("log.csv", (5, 10, 100), {"shadow_throttle_time_ms is negative or not an integer": 3,
                                   "shadow_delayed_bytes is negative or not an integer": 3,
                                   "throttle_time_ms is negative or not an integer": 2,
                                   "value is missing, negative or not a finite number": 1}),
        ("log.json", (0, 7, 70), {"shadow_throttle_time_ms is negative or not an integer": 3,
                                  "shadow_delayed_bytes is negative or not an integer": 1}),
    ):
        out = tmp_path / name.replace(".", "-")
        assert main(["pipeline", "usage", "--input", str(tmp_path / name), "--out", str(out)]) == 0
        text = capsys.readouterr().out
        line = [x for x in text.splitlines() if "bad rows skipped" in x]
        assert len(line) == 1, text
        total = sum(counts.values())
        assert line[0].startswith(f"{total} bad rows skipped (")
        for reason, n in counts.items():
            assert f"{n} {reason}" in line[0], line[0]
        observed = pd.read_parquet(out / "observed")
        assert len(observed) == 1
        r = observed.iloc[0]
        assert (r.throttle_time_ms, r.shadow_throttle_time_ms, r.shadow_delayed_bytes) == good
        bad = pq.read_table(out / "bad_rows").to_pylist()
        assert len(bad) == total and all(b["reason"] for b in bad)


def test_simulate_skips_the_same_bad_observed_rows_on_its_fast_path(spark, tmp_path, capsys):
    """A Parquet log as the proxy writes it (its Arrow schema) with one negative shadow value:
    ``simulate``'s Arrow-direct path does not take it as good, so ``simulate`` and ``usage``
    skip the same row for the same reason, in their one bad-rows line."""
    import pyarrow as pa

    from kquota.request_log_schema import arrow_schema

    rows = [{"ts_ms": T0 + i, "broker": 0, "user": "a", "client_id": "app", "quota_type": "PRODUCE", "value": 100.0,
             "throttle_time_ms": 0, "shadow_throttle_time_ms": -1 if i == 3 else None, "shadow_delayed_bytes": None}
            for i in range(10)]
    (tmp_path / "log").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), tmp_path / "log" / "part-0.parquet")
    quotas = tmp_path / "quotas.json"
    quotas.write_text(json.dumps({"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": 1000}}]}))
    line = "1 bad rows skipped (1 shadow_throttle_time_ms is negative or not an integer)"
    assert main(["pipeline", "usage", "--input", str(tmp_path / "log"), "--out", str(tmp_path / "usage")]) == 0
    assert line in capsys.readouterr().out
    assert main(["pipeline", "simulate", "--input", str(tmp_path / "log"), "--quotas", str(quotas),
                 "--out", str(tmp_path / "sim")]) == 0
    assert line in capsys.readouterr().out
    assert len(pq.read_table(tmp_path / "sim" / "requests")) == 9
