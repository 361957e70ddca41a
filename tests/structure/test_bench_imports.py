"""Every benchmark script imports: a helper moved or renamed must not leave a benchmark that
fails only when someone runs it (``bench_proxy.py --tls-only`` did, after the bench split)."""

from __future__ import annotations

import pytest
import glob
import os
import subprocess
import sys

pytestmark = pytest.mark.process

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


def test_no_import_circle_between_benches():
    """The bench modules import each other in one direction (``bench_proxy.py`` and
    ``bench_proxy_tls.py`` once did both: their shared clients are ``bench_proxy_clients.py``).
    Every import statement counts, lazy ones too."""
    import ast

    from test_structure import import_cycles

    files = glob.glob(os.path.join(ROOT, "benches", "*.py"))
    names = {os.path.basename(f)[:-3] for f in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets.add(node.module)
        graph[os.path.basename(path)[:-3]] = targets & names
    assert graph["bench_proxy_tls"]  # the scan sees the benches' imports of each other
    assert import_cycles(graph) == [], f"import circles in benches/: {import_cycles(graph)}"
