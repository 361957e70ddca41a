"""Tests wait one way: through ``tests/support/waiting.py`` (``wait_until``, ``wait_port``,
``free_port`` and the helpers beside them). A module that writes its own deadline loop or its own
``free_port``/``wait_until``/``wait_for``/``wait_port`` is how the 33 hand-written loops and the
two copies of each helper came about."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")
HOME = os.path.join(TESTS, "support", "waiting.py")
#: Names only waiting.py defines.
OWN = {"free_port", "wait_until", "wait_for", "wait_port"}


def _is_monotonic_call(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "monotonic"
               and isinstance(n.func.value, ast.Name) and n.func.value.id == "time" for n in ast.walk(node))


def offences(source: str) -> list[str]:
    """What in ``source`` waits its own way: ``deadline = time.monotonic() ...`` assignments and
    definitions of the names in :data:`OWN`, each as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in OWN:
            found.append(f"{node.lineno}: defines {node.name} (import it from waiting)")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if (any(isinstance(t, ast.Name) and t.id == "deadline" for t in targets) and node.value is not None
                    and _is_monotonic_call(node.value)):
                found.append(f"{node.lineno}: deadline = time.monotonic() (use waiting.wait_until)")
    return found


def test_the_check_finds_a_deadline_loop_and_a_helper_of_its_own():
    source = ("import time\n"
              "def free_port():\n    return 0\n"
              "async def wait_for(x):\n    pass\n"
              "def f(c):\n    deadline = time.monotonic() + 5\n    while not c() and time.monotonic() < deadline:\n"
              "        time.sleep(0.1)\n")
    assert offences(source) == ["2: defines free_port (import it from waiting)", "4: defines wait_for (import it from waiting)",
                                "7: deadline = time.monotonic() (use waiting.wait_until)"]
    assert offences("from waiting import wait_until\nend = time.monotonic() + 5\n") == []


def test_no_test_module_waits_its_own_way():
    bad = {}
    for directory, _, files in os.walk(TESTS):
        for name in files:
            path = os.path.join(directory, name)
            if not name.endswith(".py") or path == HOME:
                continue
            with open(path, encoding="utf-8") as f:
                found = offences(f.read())
            if found:
                bad[os.path.relpath(path, ROOT)] = found
    assert not bad, bad
