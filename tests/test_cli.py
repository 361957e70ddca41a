"""`kquota demo` (the README's main job, in a quick mode) and the CLI's error handling."""

import os
import subprocess
import sys

import pandas as pd

from kquota.cli import main


def test_demo_runs_the_pipeline_and_writes_a_report(spark, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--rows", "20000", "--out", str(out), "--master", "local[2]"]) == 0
    text = capsys.readouterr().out
    for stage in ("generate", "usage", "recommend", "simulate", "report"):
        assert f"[{stage}] done in" in text
    assert f"report: {os.path.abspath(out / 'report.html')}" in text
    assert "Recommended quotas (level user, p95 x 1.2)" in text and "requests throttled" in text
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    summary = pd.read_parquet(out / "simulation" / "summary")
    # The recommended quotas sit below the bursts, so the replay throttles some requests.
    assert summary.requests.sum() == 20_000 and summary.throttled_requests.sum() > 0


def test_bad_arguments_exit_non_zero_without_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "kquota", "demo", "--rows", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "must be >= 1" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kquota", "pipeline", "simulate", "--input", "nowhere.parquet",
                           "--quotas", "nowhere.json", "--out", "x"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("kquota: error:") and "Traceback" not in proc.stderr
