"""Tests wait one way: through ``tests/support/waiting.py`` (``wait_until``, ``wait_port``,
``free_port`` and the helpers beside them). A module that writes its own deadline loop or its own
``free_port``/``wait_until``/``wait_for``/``wait_port`` is how the 33 hand-written loops and the
two copies of each helper came about."""

from __future__ import annotations

import ast
import os
import re

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


def _every_test_module(check) -> dict:
    """``check(source)``'s findings in every test module but waiting.py, by path."""
    bad = {}
    for directory, _, files in os.walk(TESTS):
        for name in files:
            path = os.path.join(directory, name)
            if not name.endswith(".py") or path == HOME:
                continue
            with open(path, encoding="utf-8") as f:
                found = check(f.read())
            if found:
                bad[os.path.relpath(path, ROOT)] = found
    return bad


def test_no_test_module_waits_its_own_way():
    bad = _every_test_module(offences)
    assert not bad, bad


#: What a fixed sleep of a second or more says on its line: that the time is what the test is
#: about (the window a rate is measured over, a span a rule needs to pass), not a stand-in for
#: waiting on something, which ``wait_until`` and its kin wait for instead.
SAID = re.compile(r"#.*\b(?:measured (?:window|span)|span under test)\b")


def long_sleeps(source: str) -> list[str]:
    """The fixed sleeps of a second or more in ``source`` that do not say why: ``time.sleep(x)``
    or ``asyncio.sleep(x)`` (or ``sleep`` imported from either) with a literal ``x >= 1``, each as
    ``line: call``. Only the modules' ``sleep``: a ``time`` of the test's own (the ported tests'
    MockTime, whose sleep moves a clock) is not the module."""
    tree = ast.parse(source)
    modules, bare = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name in ("time", "asyncio")}
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "asyncio"):
            bare |= {a.asname or a.name for a in node.names if a.name == "sleep"}
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        f = node.func
        if not ((isinstance(f, ast.Attribute) and f.attr == "sleep" and isinstance(f.value, ast.Name)
                 and f.value.id in modules) or (isinstance(f, ast.Name) and f.id in bare)):
            continue
        try:
            seconds = ast.literal_eval(node.args[0])
        except ValueError:
            continue  # computed: a pacing schedule, a deadline's remainder
        if isinstance(seconds, (int, float)) and seconds >= 1 and not SAID.search(lines[node.lineno - 1]):
            found.append((node.lineno, f"{node.lineno}: {ast.unparse(node)}"))
    return [what for _, what in sorted(found)]


def test_the_check_finds_a_long_sleep_that_does_not_say_why():
    source = ("import time\nimport asyncio as aio\nfrom time import sleep as nap\n"
              "time.sleep(3)\n"
              "time.sleep(8)  # the measured window: the rate below is over it\n"
              "time.sleep(1.2)  # the span under test: Kafka allows one a second\n"
              "time.sleep(0.2)\n"
              "time.sleep(end - time.monotonic())\n"
              "async def f():\n    await aio.sleep(2.5)\n"
              "nap(1)  # wait for the proxy\n")
    assert long_sleeps(source) == ["4: time.sleep(3)", "10: aio.sleep(2.5)", "11: nap(1)"]
    # A clock of the test's own (Kafka's MockTime, ported): not the time module.
    assert long_sleeps("def t():\n    time = Clock()\n    time.sleep(1000)\n") == []


def test_no_test_sleeps_a_second_or_more_without_saying_why():
    """A sleep that waits for something waits for that thing (``wait_until``, ``wait_port``,
    ...); a fixed sleep of a second or more is left only where the time is the point, and its
    line says so (``# the measured window``, ``# the span under test``)."""
    bad = _every_test_module(long_sleeps)
    assert not bad, bad
