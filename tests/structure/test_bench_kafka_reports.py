"""The Apache Kafka benchmarks' parsing and reports, without a broker: the perf tools' output
lines (a changed format must fail here, not print an empty table), the accuracy cell's
client-side measurement, and the report keeping the section it did not write."""

from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "benches"), os.path.join(ROOT, "tests", "support")]

import accuracy_report  # noqa: E402
from accuracy_side import SideCell, measure, pair_rows, percentile  # noqa: E402
from bench_perf_tools import parse_consumer, parse_producer  # noqa: E402

# ProducerPerformance's format: progress lines every 5 s, then the summary with percentiles.
PRODUCER_OUT = """\
21766 records sent, 4353.2 records/sec (4.25 MB/sec), 2812.3 ms avg latency, 4400.0 ms max latency.
60000 records sent, 4308.5 records/sec (4.21 MB/sec), 4272.15 ms avg latency, 6361.00 ms max latency, \
4486 ms 50th, 5705 ms 95th, 6285 ms 99th, 6358 ms 99.9th.
"""
CONSUMER_OUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, \
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-12-02 04:47:01:123, 2026-12-02 04:47:09:000, 19.5313, 2.4998, 20000, 2559.8, 3545, 4268, 4.5762, 4685.8
"""


def test_producer_summary_parsed_not_a_progress_line():
    row = parse_producer(PRODUCER_OUT, 1024)
    assert row is not None
    assert (row["records"], row["mb_per_s"], row["avg_ms"]) == (60000, 4.21, 4272.15)
    assert (row["p50_ms"], row["p99_ms"], row["p999_ms"]) == (4486, 6285, 6358)
    assert row["mb"] == pytest.approx(60000 * 1024 / 2**20)
    assert parse_producer(PRODUCER_OUT.splitlines()[0], 1024) is None  # progress only: no summary
    assert parse_producer("Exception in thread main", 1024) is None


def test_consumer_row_parsed_header_skipped():
    row = parse_consumer(CONSUMER_OUT)
    assert row == {"mb": 19.5313, "mb_per_s": 2.4998, "records": 20000, "rebalance_ms": 3545.0,
                   "fetch_ms": 4268.0, "fetch_mb_per_s": 4.5762}
    assert parse_consumer(CONSUMER_OUT.splitlines()[0]) is None


def test_percentile_nearest_rank():
    assert percentile([], 99) == 0.0
    assert percentile([5.0], 50) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)


def test_cell_measured_over_its_window_only(tmp_path):
    start_ms = 1_000_000
    log = tmp_path / "c.json"
    # 10 ms buckets: 50 kB in the first second (the burst), then 10 kB every 100 ms from 2 s to 30 s
    buckets = [[(start_ms + t) // 10, 5000] for t in range(0, 1000, 100)]
    buckets += [[(start_ms + t) // 10, 10000] for t in range(2000, 30000, 100)]
    throttles = [[start_ms + 500, 700.0], [start_ms + 12500, 0.0], [start_ms + 13000, 40.0], [start_ms + 20000, 60.0]]
    log.write_text(json.dumps({"bytes": buckets, "throttles": throttles}))
    cell = SideCell("aiokafka", "produce", "broker", 100_000.0, "c", str(log), start_ms=start_ms)
    row = measure(cell, 11, 12.0, 22.0)
    assert row["rate"] == pytest.approx(1.0)  # 100 kB/s over 12-22 s
    assert row["throttled_responses"] == 2 and row["throttle_max_ms"] == 60.0  # the 0 and the t=0.5 s one left out
    assert row["burst"] == pytest.approx(50_000 / (100_000 * 10))
    assert "proxy_recorded_rate" not in row


def _row(column: str, rate: float, throttled: int, **extra) -> dict:
    return {"quota": 1e6, "kind": "confluent-16k", "role": "produce", "column": column, "client_id": column,
            "window_s": [12.0, 72.0], "rate": rate, "burst": 0.1, "throttled_responses": throttled,
            "throttle_p50_ms": 10.0, "throttle_p99_ms": 100.0, "throttle_max_ms": 200.0, **extra}


def test_report_keeps_the_other_section_and_counts_only_held_cells(tmp_path):
    path = tmp_path / "accuracy.md"
    path.write_text("# Accuracy: real clients flat out through `kquota proxy`\n\nRun before markers.\n\n| old |\n")
    meta = {"started": "now", "machine": "x86_64", "cores": 2, "kafka": "4.1.1", "window_num": 11,
            "loadavg_start": (1.0, 1.0, 1.0), "loadavg_end": (2.0, 2.0, 2.0)}
    held = [_row("broker", 1.00, 5), _row("proxy", 1.02, 4, proxy_recorded_rate=1.03)]
    free = [dict(r, kind="aiokafka") for r in (_row("broker", 0.3, 0), _row("proxy", 0.5, 0, proxy_recorded_rate=0.5))]
    failed = [dict(_row("broker", 0, 0), kind="kafka-python"), {"quota": 1e6, "kind": "kafka-python",
                                                                "role": "produce", "column": "proxy", "error": "boom"}]
    accuracy_report.write_kafka(str(path), held + free + failed, meta, 12.0)
    text = path.read_text()
    assert "Run before markers." in text and "| old |" in text  # the tansu table survives
    assert "1 of 1 cells where a quota held" in text and "n/a: neither throttled" in text
    assert "failed: 'boom'" in text
    summary = json.loads((tmp_path / "accuracy.json").read_text())["summary"]
    assert summary["within"] == 1 and summary["not_throttled"] == ["1000 KB/s produce aiokafka"]
    accuracy_report.write_tansu(str(path), ["new tansu table"])
    text = path.read_text()
    assert "new tansu table" in text and "| old |" not in text and "1 of 1 cells where a quota held" in text
    assert len(pair_rows(held + free)) == 2
