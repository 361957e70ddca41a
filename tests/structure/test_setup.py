"""What a newcomer runs is what CI runs, and the test command installs what the tests import."""

import ast
import importlib.metadata
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _setup_blocks():
    section = README.split("## Set-up (fresh machine)", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_readme_setup_is_two_one_line_commands_that_work_under_pep_668():
    demo, tests = _setup_blocks()
    # A virtual environment first: a stock Debian/Ubuntu python refuses a bare pip install.
    assert demo == 'python3 -m venv .venv && . .venv/bin/activate && pip install ".[pipeline]" && kquota demo'
    assert tests == "bash scripts/test.sh"
    assert (ROOT / "docs" / "report.png").read_bytes().startswith(b"\x89PNG")
    assert "![kquota demo report](docs/report.png)" in README


def test_ci_runs_exactly_the_readme_test_command():
    run = (ROOT / ".ci" / "run").read_text()
    commands = [line for line in run.splitlines() if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert commands == ["bash scripts/test.sh"]


def test_the_test_command_builds_a_fresh_environment_with_the_test_extra():
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert re.search(r'^rm -rf "\$VENV"\n"\$SYSTEM_PYTHON" -m venv "\$VENV"$', script, re.M)
    assert re.search(r'"\$PY" -m pip install -q -e "\.\[test\]"', script)
    assert 'KQUOTA_ZK_PORT="${KQUOTA_ZK_PORT:-21810}"' in script  # an existing port is honoured
    assert '"$PY" -m pytest' in script and "cargo test" in script


def _test_extra():
    text = (ROOT / "pyproject.toml").read_text()
    body = re.search(r"^test = \[(.*?)^\]", text, re.S | re.M).group(1)
    return {_norm(re.match(r"[A-Za-z0-9_.\-]+", r).group(0)) for r in re.findall(r'"([^"]+)"', body)}


def _third_party_imports():
    local = {p.stem for d in ("tests", "benches") for p in (ROOT / d).rglob("*.py")} | {"kquota"}
    found = {}
    for d in ("tests", "benches"):
        for path in (ROOT / d).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for n in names:
                    top = n.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in local and not top.startswith("_"):
                        found.setdefault(top, str(path.relative_to(ROOT)))
            # modules named to importorskip / find_spec count too
            for m in re.findall(r'(?:importorskip|find_spec)\("([\w.]+)"\)', path.read_text()):
                top = m.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_the_test_extra_installs_every_module_the_tests_and_benches_import():
    extra = _test_extra()
    dists = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(_third_party_imports().items()):
        names = {_norm(d) for d in dists.get(module, [])} or {_norm(module)}
        if not names & extra:
            missing.append(f"{module} (imported in {where}; distribution {sorted(names)})")
    assert not missing, "not in the `test` extra of pyproject.toml: " + "; ".join(missing)
    assert os.environ.get("CI", "").lower() != "true" or sys.prefix != sys.base_prefix, \
        "CI runs the tests in a virtual environment (scripts/test.sh)"
