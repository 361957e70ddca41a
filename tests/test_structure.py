"""Checks that keep the code's shape: no import circle, no oversized module."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYTHON = ROOT / "python"
MAX_MODULE_LINES = 500


# ---------------------------------------------------------------------------------- Python


def _python_modules() -> dict[str, tuple[pathlib.Path, bool]]:
    """``dotted name -> (path, is_package)`` of every module in python/kquota."""
    out = {}
    for path in sorted((PYTHON / "kquota").rglob("*.py")):
        parts = list(path.relative_to(PYTHON).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    return out


def python_import_graph() -> dict[str, set[str]]:
    """``module -> modules of python/kquota it imports``: every import statement counts, at
    module level, inside functions (lazy imports) and under ``if TYPE_CHECKING``. ``from pkg
    import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. The implicit
    import of a parent package is not an edge (every module would otherwise close a circle with
    ``kquota/__init__.py``)."""
    modules = _python_modules()
    known = set(modules) | {"kquota._kquota"}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    if target in known:
                        graph[name].add(target)
                    elif source in known:
                        graph[name].add(source)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_import_cycle_finder_finds_cycles():
    # The checker itself: a lazy import closing a circle must be caught.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"], ["e"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_python_import_graph_sees_lazy_and_type_checking_imports():
    graph = python_import_graph()
    # aio imports the manager only for annotations; that edge is still counted.
    assert "kquota.manager" in graph["kquota.aio"]
    # configs_cli imports kquota.stores.base inside a function.
    assert "kquota.stores.base" in graph["kquota.configs_cli"]


def test_no_python_import_cycle():
    cycles = import_cycles(python_import_graph())
    assert cycles == [], f"import circles in python/kquota: {cycles}"


def test_no_python_module_over_500_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path, _ in _python_modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_readme_architecture_names_every_python_module():
    """The README's architecture section and the folder layout tell the same story: every module
    and data file of python/kquota is named there (packages' ``__init__``/``__main__`` aside)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    missing = []
    for path in sorted((PYTHON / "kquota").rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".so", ".pyc"):
            continue
        if path.name in ("__init__.py", "__main__.py", "py.typed"):
            continue
        if path.name not in section:
            missing.append(path.relative_to(PYTHON).as_posix())
    assert not missing, f"not named in the README's architecture section: {missing}"


# ------------------------------------------------------------ one definition of Kafka's constants


def test_kafkas_constants_are_not_literals_in_python() -> None:
    """Kafka's broker defaults (``_kquota.BROKER_DEFAULTS``), ``MAX_NAME_BYTES`` and the tag
    prefixes come from the core: no parameter default, assignment or ``getattr`` fallback in
    python/kquota spells them as a number or a control character."""
    from kquota import _kquota

    settings = "|".join(_kquota.BROKER_DEFAULTS)
    kafka = "|".join(re.escape(f"{prefix}{name}") for prefix in ("", "controller.") for name in (
        "quota.window.num", "quota.window.size.seconds")) + "|num.io.threads|num.network.threads"
    default = re.compile(rf"\b({settings})\s*(:\s*[\w\[\], ]+)?=\s*\d", re.M)
    fallback = re.compile(rf'(getattr\(\w+, "({settings})"|_int_prop\(props, "({kafka})"), \d')
    files = sorted((PYTHON / "kquota").rglob("*.py")) + [PYTHON / "kquota" / "_kquota.pyi"]
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for rx in (default, fallback, re.compile(r"MAX_NAME_BYTES\s*(:\s*int)?\s*=\s*\d"),
                   re.compile(r'= "\\x0[12]"')):
            found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in rx.finditer(text)]
    assert found == []


def test_the_request_log_schema_has_one_definition() -> None:
    """Only kquota/request_log.py spells the request log's columns (issue 32)."""
    columns = re.compile(r'"ts_ms",\s*"(broker|user)"')
    found = [str(p.relative_to(ROOT)) for p in sorted((PYTHON / "kquota").rglob("*.py"))
             if p.name != "request_log.py" and columns.search(p.read_text(encoding="utf-8"))]
    assert found == []
