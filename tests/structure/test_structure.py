"""Checks that keep the code's shape: no import circle, no oversized module."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
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
    # configs_format imports kquota.stores.base inside a function.
    assert "kquota.stores.base" in graph["kquota.configs_format"]


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
    """The architecture page (docs/architecture.md, which the README's Architecture section links)
    and the folder layout tell the same story: every module and data file of python/kquota is
    named there (packages' ``__init__``/``__main__`` aside)."""
    section = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for path in sorted((PYTHON / "kquota").rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".so", ".pyc"):
            continue
        if path.name in ("__init__.py", "__main__.py", "py.typed"):
            continue
        if path.name not in section:
            missing.append(path.relative_to(PYTHON).as_posix())
    assert not missing, f"not named in docs/architecture.md: {missing}"


# ------------------------------------------------------------------ the proxy's one enforcement path

#: The kernel's per-request record, peek and decision entry points, and the pure throttle
#: combination. The proxy's per-request quota rules run once, in the native data plane, through
#: the kernel's response steps (quota-core ``response.rs``); Python's proxy package may reach the
#: kernel's per-request quotas only through those steps (``request_response``, ``throttle_response``,
#: ``produce_response``, ``fetch_response``, ``fetch_request_cap``), never by recording and
#: combining throttles itself, as the retired asyncio data plane did.
KERNEL_RECORD_ENTRY_POINTS = frozenset({
    "record_and_get_throttle_time_ms", "record_no_throttle", "unrecord", "peek_throttle_time_ms",
    "record_request_time", "record_network_thread_time", "record_throttle_time", "time_at_quota_ms",
    "max_value_in_quota_window", "fetch_answer", "combine_throttles", "response_throttle",
})
#: What an asyncio (or blocking) socket data plane calls: listeners, connections, streams.
SOCKET_APIS = frozenset({
    "start_server", "open_connection", "create_server", "create_connection", "StreamReader",
    "StreamWriter", "sock_recv", "sock_sendall", "sock_accept", "socket",
})
PROXY = PYTHON / "kquota" / "proxy"


def _names_used(tree: ast.AST) -> set[str]:
    """Every name a module refers to: attributes (``h.unrecord``), bare names, imported names
    (``from kquota._kquota import fetch_answer``, ``import socket``) and strings (``getattr(h,
    "unrecord")``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(part for a in node.names for part in a.name.split("."))
            if isinstance(node, ast.ImportFrom) and node.module:
                out.update(node.module.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
    return out


def _proxy_sources() -> dict[str, ast.AST]:
    return {str(p.relative_to(PYTHON)): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in sorted(PROXY.rglob("*.py"))}


def test_enforcement_checkers_catch_what_they_forbid():
    # The checkers themselves: each way back in is seen.
    for source in ("h.record_and_get_throttle_time_ms(PRODUCE, size)", "handle.unrecord(FETCH, n)",
                   "from kquota._kquota import fetch_answer", "from kquota.response import response_throttle",
                   "getattr(h, 'peek_throttle_time_ms')(PRODUCE, 0)", "x = h.record_request_time(ns)"):
        assert _names_used(ast.parse(source)) & KERNEL_RECORD_ENTRY_POINTS, source
    assert not _names_used(ast.parse("t, _ = h.request_response(ns)")) & KERNEL_RECORD_ENTRY_POINTS
    for source in ("await asyncio.start_server(cb, host, port)", "r, w = await asyncio.open_connection(h, p)",
                   "import socket", "def f(reader: asyncio.StreamReader) -> None: ..."):
        assert _names_used(ast.parse(source)) & SOCKET_APIS, source


def test_no_per_request_quota_rule_in_the_python_proxy():
    """Produce's and Fetch's quota paths, and every throttle combination, live once: in the native
    data plane on the kernel's response steps. No module of ``kquota/proxy/`` records into the
    kernel's per-request quotas, peeks at them, or combines throttles except through those steps,
    and neither Produce nor Fetch has a Python handler."""
    offenders = {name: sorted(_names_used(tree) & KERNEL_RECORD_ENTRY_POINTS)
                 for name, tree in _proxy_sources().items()}
    offenders = {name: found for name, found in offenders.items() if found}
    assert offenders == {}, f"per-request quota rules outside the kernel's response steps: {offenders}"
    # The Python-handled APIs do use a step (the check above is about a live path).
    assert any("request_response" in _names_used(tree) for tree in _proxy_sources().values())

    from kquota.proxy import server  # noqa: F401  (server imports the handlers, which register)
    from kquota.kafka.protocol import apis
    from kquota.proxy.dispatch import _DISPATCH

    assert apis.PRODUCE not in _DISPATCH and apis.FETCH not in _DISPATCH


def test_native_plane_imports_no_socket_plane():
    """The native data plane's Python side (``server.py``, ``bridge.py``) and everything of
    ``kquota/proxy/`` it imports, directly or not, open no socket: the sockets are Rust's
    (``ProxyDataPlane``). The request contract and the settings are modules of their own
    (``request.py``, ``settings.py``), not parts of a socket plane."""
    graph = python_import_graph()
    sources = {name: ast.parse(path.read_text(encoding="utf-8"), str(path))
               for name, (path, _) in _python_modules().items() if name.startswith("kquota.proxy")}
    for root in ("kquota.proxy.server", "kquota.proxy.bridge"):
        seen, todo = set(), [root]
        while todo:
            name = todo.pop()
            if name in seen or name not in sources:
                continue
            seen.add(name)
            todo.extend(graph[name])
        assert "kquota.proxy.request" in seen  # the contract, apart from any plane
        socketed = {name: sorted(_names_used(sources[name]) & SOCKET_APIS) for name in seen}
        socketed = {name: found for name, found in socketed.items() if found}
        assert socketed == {}, f"{root} imports socket-plane modules: {socketed}"


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
    """Only kquota/request_log_schema.py spells the request log's columns."""
    columns = re.compile(r'"ts_ms",\s*"(broker|user)"')
    found = [str(p.relative_to(ROOT)) for p in sorted((PYTHON / "kquota").rglob("*.py"))
             if p.name != "request_log_schema.py" and columns.search(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_native_planes_python_side_takes_the_header_the_plane_parsed():
    """A request handed to Python comes with the header the native plane parsed (bridge
    ``on_request``): server.py and bridge.py never parse a request header again."""
    for name in ("server.py", "bridge.py"):
        tree = ast.parse((PROXY / name).read_text(encoding="utf-8"))
        assert "parse_request_header" not in _names_used(tree), name


# ------------------------------------------------------------------------- tests and benches

#: The folders of tests/: one per area, the helpers in support/, data in fixtures/.
TEST_AREAS = frozenset({"kernel", "config", "proxy", "pipeline", "plugins", "embedding", "structure", "fuzz",
                        "support", "fixtures"})


def _over_bound(paths) -> dict[str, int]:
    return {str(p.relative_to(ROOT)): n for p in paths
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}


def test_no_test_or_bench_file_over_500_lines():
    """The sources' bound holds for tests/ and benches/ too: a test file is split by concept."""
    long = _over_bound(sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "benches").rglob("*.py")))
    assert long == {}, f"test or bench files over {MAX_MODULE_LINES} lines: {long}"


def test_tests_are_grouped_by_area():
    """tests/ holds only conftest.py and the area folders; test files live in an area, helpers in
    support/ (imported by bare name), never at the top or in support/ itself."""
    tests = ROOT / "tests"
    top = sorted(p.name for p in tests.iterdir() if p.name not in ("__pycache__", "conftest.py") and p.name[0] != "."
                 and not (p.is_dir() and p.name in TEST_AREAS))
    assert top == [], f"tests/ entries outside the area folders {sorted(TEST_AREAS)}: {top}"
    misplaced = sorted(str(p.relative_to(ROOT)) for p in (tests / "support").rglob("test_*.py"))
    assert misplaced == [], f"test files in tests/support/: {misplaced}"
