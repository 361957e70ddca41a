"""`kquota demo` (the README's main job, in a quick mode) and the CLI's error handling."""

import pytest
import os
import re
import subprocess
import sys

import pandas as pd

pytestmark = pytest.mark.process


def test_demo_runs_the_pipeline_and_explains_the_result(tmp_path):
    # A process of its own, as a newcomer runs it: its own JVM, whose console lines must not
    # reach the terminal.
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "kquota", "demo", "--rows", "20000", "--out", str(out),
                           "--master", "local[2]"], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""  # Spark's JVM warnings and log4j lines went to spark.log
    assert (out / "spark.log").exists()
    text = proc.stdout
    for stage in ("generate", "usage", "recommend", "simulate", "report"):
        assert f"[{stage}] done in" in text
    # One line with every stage's time, labelled, and the total.
    timings = re.search(r"^Timings: (.*)$", text, re.M).group(1)
    assert re.fullmatch(r"spark [\d.]+ s, generate [\d.]+ s, usage [\d.]+ s, recommend [\d.]+ s, "
                        r"simulate [\d.]+ s, report [\d.]+ s; total [\d.]+ s", timings), timings
    assert "Recommended quotas (level user, p95 x 1.2)" in text and "requests throttled" in text
    # The summary table names its sort column, shows it, and has no always-empty column.
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if "sorted by total delay (largest first)" in line)
    header = lines[i + 1]
    assert header.split("  ")[0] == "quota type" and "total delay" in header and "client tag" not in header
    rows = lines[i + 2:i + 12]
    delays = [int(re.search(r"([\d,]+) ms", r).group(1).replace(",", ""))  # the first ms column
              for r in rows]
    assert delays == sorted(delays, reverse=True) and len(rows) == 10
    # Next steps: the report as a file:// link, the commands for one's own logs.
    report = out / "report.html"
    assert f"Open the report:  {report.as_uri()}" in text
    for cmd in ("kquota pipeline usage     --input LOGS", "kquota pipeline simulate  --input LOGS",
                "kquota pipeline report", f"kquota configs --alter --quota-file {out / 'recommendation' / 'quotas.json'}"):
        assert cmd in text, cmd
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<figcaption>") >= 4
    for name in ("simulation", "recommendation", "usage"):
        assert (out / f"report-{name}.csv").exists()
    summary = pd.read_parquet(out / "simulation" / "summary")
    # The recommended quotas sit below the bursts, so the replay throttles some requests.
    assert summary.requests.sum() == 20_000 and summary.throttled_requests.sum() > 0


def test_without_a_log_file_stderr_is_left_alone():
    from kquota.demo import jvm_stderr_to

    # --verbose leaves the JVM's stderr alone; otherwise fd 2 points at the log while it starts.
    r, w = os.pipe()
    saved = os.dup(2)
    os.dup2(w, 2)
    try:
        with jvm_stderr_to(None):
            os.write(2, b"shown\n")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(w)
    assert os.read(r, 100) == b"shown\n"
    os.close(r)


def test_jvm_console_lines_go_to_the_log(tmp_path):

    log = tmp_path / "spark.log"
    code = ("import os, subprocess, sys\n"
            "from kquota.demo import jvm_stderr_to\n"
            f"with jvm_stderr_to({str(log)!r}):\n"
            "    subprocess.run([sys.executable, '-c', 'import sys; sys.stderr.write(\"WARNING: jvm noise\\\\n\")'])\n"
            "sys.stderr.write('after\\n')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "after\n" and log.read_text() == "WARNING: jvm noise\n"


def test_bad_arguments_exit_non_zero_without_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "kquota", "demo", "--rows", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "must be >= 1" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kquota", "pipeline", "simulate", "--input", "nowhere.parquet",
                           "--quotas", "nowhere.json", "--out", "x"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("kquota: error:") and "Traceback" not in proc.stderr


def test_demo_without_java_says_why_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kquota", "demo", "--rows", "100", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAVA_HOME": str(tmp_path / "no-java")})
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kquota: error: Spark did not start"), proc.stderr
    assert f"{tmp_path / 'spark.log'} says:" in lines[0] and "no-java/bin/java: No such file or directory" in lines[0]
