"""The HTML report's structure and number format, built from small pandas tables (no Spark),
and what a person sees: rendered by real headless Chromium."""

import csv
import os
import re
import shutil
import subprocess

import pandas as pd
import pytest

from kquota.pipeline import units
from kquota.pipeline.report import TOP_ROWS, build_report, csv_path

pytestmark = pytest.mark.process


def _inputs(n_summary=40, n_users=30, spike=5_000_000.0):
    users = [f"user-{i:03d}" for i in range(n_users)]
    entities = pd.DataFrame({
        "level": "user", "user": users, "client_id": None, "quota_type": "PRODUCE", "unit": "B/s",
        "requests": [1000 + i for i in range(n_users)], "total": [1e6 * (n_users - i) for i in range(n_users)],
        "seconds": 600, "brokers": 4, "mean_rate": 12345.678, "p50": 10000.0, "p95": 50000.0, "p99": 80000.0,
        "max": 900000.0,
    })
    seconds = list(range(600))
    rates = [40_000.0 + (i % 17) * 1000 for i in seconds]
    rates[300] = spike  # one burst far above everything else
    series = pd.DataFrame({"user": "user-000", "client_id": None, "quota_type": "PRODUCE", "second": seconds,
                           "rate": rates})
    histogram = pd.DataFrame({"quota_type": ["PRODUCE", "PRODUCE", "FETCH"], "bucket": ["≤10", "≤100", "≤1000"],
                              "count": [12, 3400, 5]})
    summary = pd.DataFrame({
        "quota_type": ["PRODUCE"] * n_summary, "tag_user": [f"user-{i:03d}" for i in range(n_summary)],
        "tag_client_id": "", "quota": 84585.0, "brokers": 4, "requests": [2982 + i for i in range(n_summary)],
        "throttled_requests": [i for i in range(n_summary)], "total_value": 1e6,
        "total_delay_ms": [210457 - i for i in range(n_summary)], "p99_delay_ms": 1462.11,
        "max_delay_ms": 11597, "time_over_quota_ms": 27739, "total_pushback_ms": 0, "max_pushback_ms": 0,
        "throttled_share": 0.011737,
    })
    rec = pd.DataFrame({"level": "user", "user": users[:3], "client_id": None,
                        "quota_type": ["PRODUCE", "FETCH", "REQUEST"], "observed": [70487.0, 65430.0, 0.0553],
                        "max_rate": 1.0, "config_key": ["producer_byte_rate", "consumer_byte_rate",
                                                        "request_percentage"],
                        "quota": [84585.0, 78516.0, 0.07]})
    quotas_for = {("user-000", None, "PRODUCE"): 84585.0}
    return entities, series, [("user-000", None, "PRODUCE")], histogram, summary, rec, quotas_for


@pytest.fixture
def report(tmp_path):
    entities, series, top, histogram, summary, rec, quotas_for = _inputs()
    path = str(tmp_path / "report.html")
    build_report(path, entities, series, top, "user", histogram, summary, rec, quotas_for, notes=("A note.",))
    with open(path, encoding="utf-8") as f:
        return path, f.read()


def _tables(html):
    return re.findall(r"<table>.*?</table>", html, re.S)


def test_charts_each_with_a_caption(report):
    _, html = report
    figures = re.findall(r"<figure>(.*?)</figure>", html, re.S)
    assert len(figures) == 3  # one rate chart, two throttle histograms
    for fig in figures:
        assert fig.startswith("<svg") and fig.count("<figcaption>") == 1
        caption = re.search(r"<figcaption>(.*?)</figcaption>", fig).group(1)
        assert 40 < len(caption) < 260 and "\n" not in caption
    assert 'viewBox="0 0 600 300"' in figures[0] and 'width="100%"' in figures[0]


def test_outliers_do_not_squash_the_rate_axis(report):
    _, html = report
    fig = re.findall(r"<figure>(.*?)</figure>", html, re.S)[0]
    # The axis ends near the bulk of the data (tens of KB/s), not at the 5 MB/s burst ...
    ticks = re.findall(r'text-anchor="end" fill="#444">([^<]+)</text>', fig)
    assert ticks[0] == "0 KB/s" and all(t.endswith(" KB/s") for t in ticks), ticks
    assert float(ticks[-1].split()[0]) <= 150
    # ... the burst is marked and the caption says the axis is clipped and by how much.
    assert fig.count("<path d=") == 1 and "5 MB/s at 300 s" in fig
    assert "Y-axis clipped above the 97.5th percentile: 1 second above it (▲), peak 5 MB/s." in fig
    assert "against the quota of 84.6 KB/s (dashed)" in fig and "quota 84.6 KB/s" in fig


def test_no_clipping_without_outliers(tmp_path):
    entities, series, top, histogram, summary, rec, quotas_for = _inputs(spike=45_000.0)
    path = str(tmp_path / "r.html")
    build_report(path, entities, series, top, "user", histogram, summary, rec, quotas_for)
    fig = re.findall(r"<figure>(.*?)</figure>", open(path, encoding="utf-8").read(), re.S)[0]
    assert "clipped" not in fig and "<path d=" not in fig


def test_long_tables_show_top_rows_and_write_the_full_csv(report):
    path, html = report
    sim, rec, usage = _tables(html)
    assert sim.count("<tr>") == TOP_ROWS + 1 and f"Top {TOP_ROWS} of 40 rows" in html
    assert usage.count("<tr>") == TOP_ROWS + 1 and f"Top {TOP_ROWS} of 30 rows" in html
    assert rec.count("<tr>") == 4 and "All 3 rows" in html
    for name, n in (("simulation", 40), ("usage", 30), ("recommendation", 3)):
        p = csv_path(path, name)
        assert os.path.dirname(p) == os.path.dirname(path)
        assert f'<a href="{os.path.basename(p)}">' in html
        with open(p, newline="") as f:
            rows = list(csv.reader(f))
        assert len(rows) == n + 1
    with open(csv_path(path, "simulation"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["total delay (ms)"] == "210457" and rows[0]["quota (B/s; % of a thread for REQUEST)"] == "84585.0"
    assert "client tag" not in rows[0]  # empty in every row: dropped from the CSV as from the page


def test_every_column_is_explained_and_empty_columns_are_dropped(report):
    _, html = report
    for table, legend in zip(_tables(html), re.findall(r"<dl class=legend>(.*?)</dl>", html, re.S)):
        headers = re.findall(r"<th(?: [^>]*)?>(.*?)</th>", table)
        assert headers == re.findall(r"<dt>(.*?)</dt>", legend)
        assert all(len(d) > 8 for d in re.findall(r"<dd>(.*?)</dd>", legend))
    sim_headers = re.findall(r"<th(?: [^>]*)?>(.*?)</th>", _tables(html)[0])
    assert "client tag" not in sim_headers and "client back-off" not in sim_headers
    assert "sorted by total delay (largest first)" in html and "total delay" in sim_headers


def test_one_number_format(report):
    _, html = report
    cells = re.findall(r"<td(?: [^>]*)?>(.*?)</td>", html)
    assert "2,982" in cells and "84.6 KB/s" in cells and "210,457 ms" in cells and "1.2 %" in cells
    assert "1,462 ms" in cells and "0.07 %" in cells and "12.3 KB/s" in cells
    for c in cells:  # no raw floats, no unseparated large integers, no exponent notation
        assert not re.fullmatch(r"-?\d{4,}(\.\d+)?", c), c
        assert not re.search(r"\d\.\d{4,}|e[+-]\d", c), c
    assert "3,400" in html and "8,417.5 s" in html  # bar labels and the headline total delay


def test_self_contained(report):
    _, html = report
    assert html.startswith("<!DOCTYPE html>")
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs and all(h.startswith("#") or re.fullmatch(r"report-\w+\.csv", h) for h in hrefs), hrefs
    assert not re.search(r"src\s*=|https?://|<script|@import|url\(", html)


def test_units_and_ticks():
    assert units.rate(84585) == "84.6 KB/s" and units.rate(5_000_000) == "5 MB/s" and units.rate(999) == "999 B/s"
    assert units.rate(0.07, "%") == "0.07 %" and units.rate(123456, "B/s", (1e3, "KB/s")) == "123 KB/s"
    assert units.ms(11597) == "11,597 ms" and units.count(1234567) == "1,234,567" and units.share(0.0117) == "1.2 %"
    assert units.nice_ticks(92_000) == [0, 20_000, 40_000, 60_000, 80_000, 100_000]
    assert units.nice_ticks(7) == [0, 2, 4, 6, 8] and units.nice_ticks(0) == [0, 0.2]
    assert units.tick_label(250_000, "B/s", (1e3, "KB/s")) == "250 KB/s"


@pytest.mark.skipif(shutil.which("chromium") is None and not os.environ.get("CI"),
                    reason="Debian chromium not installed (scripts/test.sh installs it)")
def test_renders_in_headless_chromium(report, tmp_path):
    path, _ = report
    png = tmp_path / "shot.png"
    p = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={png}", "--window-size=1280,900", f"file://{path}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG") and int.from_bytes(data[16:20], "big") == 1280
    assert len(data) > 30_000  # a page with charts, not a blank one


def test_throttle_histograms_label_buckets_with_units(report):
    _, html = report
    figs = re.findall(r"<figure>(.*?)</figure>", html, re.S)
    fetch, produce = figs[1], figs[2]  # sorted by quota type
    assert "FETCH: throttled requests by throttle time" in fetch and ">≤ 1 s<" in fetch
    assert ">≤ 10 ms<" in produce and ">≤ 20 ms<" in produce and ">≤ 100 ms<" in produce  # empty buckets between
    assert "3,412 PRODUCE requests were throttled; half of them by at most 100 ms." in produce
    assert ">3,400<" in produce  # each bar's count, with separators


def test_terminal_summary_is_sorted_by_a_shown_column_without_empty_ones():
    from kquota.pipeline.tables import summary_lines

    summary = _inputs()[4].sample(frac=1, random_state=1)  # shuffled
    lines = summary_lines(summary, 10)
    assert lines[0] == "top 10 of 40 sensors, sorted by total delay (largest first):"
    header = lines[1]
    assert header.split()[:4] == ["quota", "type", "user", "tag"] and "total delay" in header
    assert "client tag" not in header  # empty in every row
    delays = [int(re.search(r"([\d,]+) ms", r).group(1).replace(",", "")) for r in lines[2:]]
    assert delays == sorted(delays, reverse=True) == [210457 - i for i in range(10)]
    assert "84.6 KB/s" in lines[2] and "2,982" in lines[2] and "1.2 %" in lines[2]
