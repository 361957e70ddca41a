"""`kquota demo` and the CLI's error handling."""

import io
import subprocess
import sys

from kquota.cli import main
from kquota.demo import run_demo


def test_simulated_demo_is_throttled_to_the_quota():
    out = io.StringIO()
    totals = run_demo(seconds=60, quota=1_000_000, simulated=True, out=out)
    # 4x the quota is offered; after the first window's allowance the client is held to the
    # quota, so over a minute it gets barely more than the quota.
    assert totals["offered"] == 4_000_000
    assert totals["throttled"] > 0
    assert 1_000_000 <= totals["achieved"] <= 1_150_000
    assert out.getvalue().count("\n") >= 60


def test_cli_demo_runs_and_bad_arguments_exit_non_zero(capsys):
    assert main(["demo", "--simulated", "--seconds", "2"]) == 0
    assert "achieved" in capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "kquota", "demo", "--seconds", "-1"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "--seconds must be > 0" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kquota", "demo", "--simulated", "--quota", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("kquota: error:") and "Traceback" not in proc.stderr
