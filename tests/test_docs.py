"""The README's quick start and the package docstring run as written."""

import doctest
import pathlib
import re

import kquota

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_quick_start_runs():
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    qm, Q = ns["qm"], ns["Q"]
    assert ns["throttle_ms"] == 0
    assert qm.quota_metric_tags(Q.PRODUCE, "alice", "app-1") == {"user": "alice", "client-id": ""}
    assert qm.quota_limit(Q.FETCH, "bob", "x") == 2_000_000.0


def test_package_docstring_examples():
    result = doctest.testmod(kquota)
    assert result.attempted > 0 and result.failed == 0
