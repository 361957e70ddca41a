"""The test command's scheduling (tests/support/scheduling.py) holds: under pytest-xdist's
``--dist loadgroup`` every test of a module runs on one worker, and the tests marked ``timing``
or ``heavy`` share the one group ``alone`` (never beside each other)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.process


def test_groups_reach_the_workers(tmp_path):
    """Two workers, two modules: each module's tests all on one worker (the group is in every
    reported node id), as scripts/test.sh runs them."""
    plugin = tmp_path / "seen.py"
    plugin.write_text("def pytest_runtest_setup(item):\n"
                      "    import sys\n"
                      "    sys.stderr.write('SEEN ' + item.nodeid + '\\n')\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "seen", "-p", "no:cacheprovider", "-q", "-s", "-n", "2",
                           "--dist", "loadgroup", "tests/kernel/test_quota_type.py", "tests/kernel/test_validation.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    seen = [line.split(" ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("SEEN ")]
    assert seen and all("@" in nodeid for nodeid in seen), seen[:5]
    for module in ("test_quota_type.py", "test_validation.py"):
        groups = {nodeid.rsplit("@", 1)[1] for nodeid in seen if module in nodeid}
        assert groups == {f"tests/kernel/{module}"}, groups
