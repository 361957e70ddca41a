"""Every benchmark script imports: a helper moved or renamed must not leave a benchmark that
fails only when someone runs it (``bench_proxy.py --tls-only`` did, after the bench split)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_bench_module_imports():
    names = sorted(os.path.basename(f)[:-3] for f in glob.glob(os.path.join(ROOT, "benches", "bench_*.py")))
    assert "bench_proxy_tls" in names and "bench_fleet" in names
    code = ("import importlib, sys\n"
            f"sys.path[:0] = [{os.path.join(ROOT, 'benches')!r}, {os.path.join(ROOT, 'tests', 'support')!r}]\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
