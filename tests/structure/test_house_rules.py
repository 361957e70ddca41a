"""The developers' guide's house rules, kept: one place per rule (the version refusal and the
``ThrottleTimeMs`` patch are the data plane's, in Rust; Python uses them), names that say what a
file holds (Kafka's and the kernel's names where they have one), no comment citing an issue."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON = ROOT / "python" / "kquota"
PROXY_RS = ROOT / "rust" / "kquota-proxy" / "src"

#: Where comments and docstrings live: the sources, tests, benchmarks, docs and examples.
_SCANNED = ("python", "rust", "tests", "benches", "docs", "examples", "scripts", "README.md", "mkdocs.yml",
            "pyproject.toml")
_TEXT = {".py", ".pyi", ".rs", ".md", ".toml", ".yml", ".yaml", ".sh", ".txt", ".properties", ".cfg"}
_SKIPPED_DIRS = {"target", "corpus", "artifacts", "__pycache__", ".venv", "node_modules", "site"}

#: A citation of an issue of ours: "issue 35", "issues 13 and 14", "(#35)", "see #35", "KQ-35",
#: a plan's "stop 3" or "phase 1". Another project's issue (``kroxylicious#1028``) is a fact's
#: source and stays.
_ISSUE_CITATION = re.compile(
    r"\bissues?\s*#?\d+|\bKQ-\d+|\((?:#\d+[,; ]*)+\)|\b(?:see|fixes|fixed|closes|closed|resolves|in|per)\s+#\d+"
    r"|\b(?:stop|phase)\s+\d+\b",
    re.IGNORECASE)


def _scanned_files() -> list[pathlib.Path]:
    out = []
    for name in _SCANNED:
        top = ROOT / name
        paths = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for path in paths:
            if path.is_file() and path.suffix in _TEXT and not _SKIPPED_DIRS & set(path.relative_to(ROOT).parts) \
                    and path != pathlib.Path(__file__).resolve():  # this file spells the forms out
                out.append(path)
    return out


def test_no_comment_cites_an_issue_number():
    """Comments and docstrings say why, in words: an issue number says nothing to a reader
    without the tracker, and outlives what it pointed to."""
    found = []
    for path in _scanned_files():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            m = _ISSUE_CITATION.search(line)
            if m:
                found.append(f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r}")
    assert not found, "comments citing an issue (say why instead):\n" + "\n".join(found)


def test_the_issue_citation_pattern_catches_the_usual_forms():
    """The check above can fail: each usual form of a citation is caught, and what is not one
    (a Kafka KIP, another project's issue, a number after '#' in a file name) is not."""
    for cited in ("(issue 28)", "Issue 13 item 6:", "issues 13 and 14", "issue #35", "(#35)", "see #7",
                  "KQ-12", "stop 3", "phase 1"):
        assert _ISSUE_CITATION.search(cited), cited
    for fact in ("KIP-599", "kroxylicious#1028", "grepplabs/kafka-proxy#223", "'my #1 quotas?.db'",
                 "color:#222", "a tissue 3 cells", "stops 30 s later"):
        assert not _ISSUE_CITATION.search(fact), fact


# ---------------------------------------------------------------------------- one place per rule


def _proxy_python() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((PYTHON / "proxy").glob("*.py"))}


def test_the_version_refusal_is_the_data_planes_alone():
    """A request of a version the proxy does not parse is refused by the data plane
    (``ApiTables::check_version``) before any API is handed to Python; no Python module
    restates the check. The proxy's Python reads ``PARSED_VERSIONS`` (the data plane's table,
    through the binding) only to answer ApiVersions (``api_versions.py``, ``handlers.py``: the
    clamp and KIP-511's answer, which Rust leaves to it); the data plane is not handed it."""
    dispatch = (PROXY_RS / "requests.rs").read_text(encoding="utf-8")
    body = dispatch[dispatch.index("async fn dispatch("):]
    assert body.index("check_version(") < body.index("is_python("), "the version is checked after the Python hand-off"
    tables = (PROXY_RS / "tables.rs").read_text(encoding="utf-8")
    assert "not a version the proxy offers" in tables
    readers = {name for name, text in _proxy_python().items() if "PARSED_VERSIONS" in text}
    assert readers <= {"api_versions.py", "handlers.py"}, readers
    for name, text in _proxy_python().items():
        assert "not a version the proxy" not in text, f"{name} restates the version refusal"


def _version_tables(tree: ast.AST) -> list[int]:
    """Lines of a dict literal whose values are all ``(int, int)`` literals: a table of version
    ranges by api key, written out."""
    def version_range(node: ast.expr) -> bool:
        return (isinstance(node, ast.Tuple) and len(node.elts) == 2
                and all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Dict) and len(node.values) >= 2 and all(version_range(v) for v in node.values)]


def test_the_parsed_versions_are_defined_in_rust_alone():
    """The versions the proxy parses are one table, the data plane's
    (``kquota_proxy::tables::PARSED_VERSIONS``, which ``check_version`` reads); Python reads it
    through ``kquota._kquota.parsed_versions`` (``apis.PARSED_VERSIONS``, a read-only view) and
    defines no version table of its own."""
    found = {}
    for path in sorted(PYTHON.rglob("*.py")):
        lines = _version_tables(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if lines:
            found[str(path.relative_to(PYTHON))] = lines
    assert not found, f"version tables defined in Python (read kquota._kquota.parsed_versions): {found}"
    assigned = {}
    for path in sorted(PYTHON.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == "PARSED_VERSIONS" for t in targets):
                assigned[str(path.relative_to(PYTHON))] = ast.unparse(node.value)
    assert assigned == {"kafka/protocol/apis.py": "MappingProxyType(_kquota.parsed_versions())"}, assigned
    tables = (PROXY_RS / "tables.rs").read_text(encoding="utf-8")
    assert "pub const PARSED_VERSIONS: &[(i16, i16, i16)]" in tables
    binding = (ROOT / "rust" / "kquota-py" / "src" / "proxy_tables.rs").read_text(encoding="utf-8")
    assert "ApiTables::parsed_versions()" in binding and "parsed_versions" not in \
        (ROOT / "rust" / "kquota-py" / "src" / "proxy.rs").read_text(encoding="utf-8")


def test_the_version_table_scan_finds_a_table():
    """The scan above can fail: a table written as the old ``apis.py`` wrote it is found; a dict
    of other pairs (names, strings) is not."""
    written = "PARSED_VERSIONS = {\n    PRODUCE: (3, 11),\n    FETCH: (4, 17),\n}\n"
    assert _version_tables(ast.parse(written)) == [1]
    for other in ("X = {0: ('a', 1), 1: ('b', 2)}", "X = {0: (lo, hi), 1: (lo, hi)}", "X = {0: (1, 2)}"):
        assert _version_tables(ast.parse(other)) == [], other


def _max_over_throttle_field(tree: ast.AST) -> list[int]:
    """Lines of ``x["ThrottleTimeMs"] = max(...)`` (the patch's rule written again)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Name) and call.func.id == "max":
                for target in node.targets:
                    if (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                            and target.slice.value == "ThrottleTimeMs"):
                        lines.append(node.lineno)
    return lines


def test_the_throttle_time_patch_is_the_data_planes_alone():
    """``ThrottleTimeMs`` = max(broker's, proxy's) is written once, in Rust
    (``header::raise_response_throttle`` over ``wire::patch_throttle``); Python's answers use it
    through ``ProxyDataPlane.raise_throttle`` (``RequestPaths.throttled``). The only Python
    module that sets the field from a max is the ApiVersions clamp: its field is not at the
    start of the body, where the patch writes, and it re-encodes the answer anyway."""
    assert not (PYTHON / "proxy" / "throttle_field.py").exists()
    found = {}
    for path in sorted(PYTHON.rglob("*.py")):
        lines = _max_over_throttle_field(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if lines:
            found[str(path.relative_to(PYTHON))] = lines
    assert set(found) <= {"proxy/api_versions.py"}, found
    readers = {name for name, text in _proxy_python().items() if "THROTTLE_FIRST" in text}
    assert readers <= {"server.py"}, f"the patch's table read outside the data plane's: {readers}"
    rust = {p.name: p.read_text(encoding="utf-8") for p in sorted(PROXY_RS.rglob("*.rs"))}
    assert [n for n, t in rust.items() if "fn patch_throttle" in t] == ["wire.rs"]
    assert [n for n, t in rust.items() if "fn raise_response_throttle" in t] == ["header.rs"]
    binding = (ROOT / "rust" / "kquota-py" / "src" / "proxy.rs").read_text(encoding="utf-8")
    assert "raise_response_throttle" in binding
    assert "raise_throttle(" in (PYTHON / "proxy" / "request.py").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- names


def test_modules_are_named_for_what_they_hold():
    """One proxy server (``server.py``: ``ProxyServer``, there is one data plane), the request
    log's schema and its writer named apart, a fleet's usage-record codec beside the fleet."""
    proxy = {p.name for p in (PYTHON / "proxy").glob("*.py")}
    assert {"server.py", "request_log_writer.py", "fleet_usage.py"} <= proxy
    assert not {"native.py", "reqlog.py"} & proxy
    assert (PYTHON / "request_log_schema.py").exists() and not (PYTHON / "request_log.py").exists()
    assert not (PYTHON / "stores" / "kafka" / "usage.py").exists()
    server = ast.parse((PYTHON / "proxy" / "server.py").read_text(encoding="utf-8"))
    classes = {n.name for n in server.body if isinstance(n, ast.ClassDef)}
    assert "ProxyServer" in classes and not any(c.startswith("Native") for c in classes)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_fetch_answers_are_named_as_the_kernel_names_them():
    """The Python names of a Fetch answer are ``quota_core::FetchAnswer``'s variants in snake
    case (``DeliverMuted`` is ``"deliver_muted"``), in the binding and in its stub."""
    enum = (ROOT / "rust" / "quota-core" / "src" / "fetch_answer.rs").read_text(encoding="utf-8")
    block = enum[enum.index("pub enum FetchAnswer {"):]
    block = block[:block.index("}")]
    variants = re.findall(r"^\s*([A-Z][A-Za-z]*),", block, re.MULTILINE)
    assert variants == ["Deliver", "Empty", "DeliverMuted"], variants
    binding = (ROOT / "rust" / "kquota-py" / "src" / "handle.rs").read_text(encoding="utf-8")
    named = dict(re.findall(r'FetchAnswer::([A-Za-z]+) => "([a-z_]+)"', binding))
    assert named == {v: _snake(v) for v in variants}, named
    stub = (PYTHON / "_kquota.pyi").read_text(encoding="utf-8")
    literal = 'Literal[' + ", ".join(f'"{_snake(v)}"' for v in variants) + "]"
    assert stub.count(literal) == 2, literal


def _rust_sources(*skip: str) -> list[pathlib.Path]:
    return [p for p in sorted(PROXY_RS.rglob("*.rs")) if p.name not in skip]


def test_the_mute_is_written_once():
    """The muted-until / serial-until arithmetic is ``mute.rs``'s ``Mute``, shared by the
    connection and the producer gate; no other file of the data plane keeps those instants."""
    stray = [f"{p.relative_to(ROOT)}:{i}" for p in _rust_sources("mute.rs")
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\b(muted_until|serial_until)\b", line)]
    assert not stray, stray


def test_max_connections_is_the_kernels_alone():
    """Kafka's ``max.connections`` (broker-wide and per listener) lives in the kernel's
    ``ConnectionLimits``; the data plane's own guard is ``kquota.proxy.max.client.sockets`` and
    never reads Kafka's setting, so the two cannot disagree again."""
    stray = [f"{p.relative_to(ROOT)}:{i}" for p in _rust_sources()
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bmax_connections\b|\"max\.connections\"", line) and not line.lstrip().startswith("//")]
    assert not stray, stray


def test_no_path_function_of_the_data_plane_takes_ten_arguments():
    """A request reaches its path as a ``Frame`` and the ``RequestSource`` it came from: clippy's
    bound on arguments holds in the data plane without exceptions."""
    allowed = [f"{p.relative_to(ROOT)}" for p in _rust_sources() if "too_many_arguments" in p.read_text(encoding="utf-8")]
    assert not allowed, allowed


def test_kafkas_topic_name_rule_is_the_kernels():
    """Kafka's ``Topic.validate`` is quota-core's ``is_legal_topic_name``; Python asks it
    (``kquota.entity.topic_name_error``, which only words the reason) and never restates the
    character class, except the pipeline's Spark expression, a vectorised form of the same rule
    that tests/pipeline/test_topic_log.py checks row by row."""
    allowed = {"python/kquota/pipeline/schema.py", "python/kquota/entity.py"}
    stray = []
    for p in sorted((ROOT / "python" / "kquota").rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        if rel in allowed:
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for n in ast.walk(tree):
            if not isinstance(n, ast.Constant) or id(n) in docstrings:
                continue
            restated = isinstance(n.value, str) and re.search(r"(a-zA-Z|A-Za-z)0-9\\?\.?_-", n.value)
            if n.value == 249 or restated:
                stray.append(f"{rel}:{n.lineno}")
    assert not stray, stray


def test_the_python_topic_name_check_agrees_with_the_kernel():
    from kquota._kquota import MAX_TOPIC_NAME_LENGTH, is_legal_topic_name
    from kquota.entity import topic_name_error
    from kquota.request_log_schema import is_legal_topic

    assert MAX_TOPIC_NAME_LENGTH == 249
    names = ["a", "orders.v1_x-2", ".", "..", "...", "", "a/b", "é", "a b", "x" * 249, "x" * 250, "<script>",
             "a\nb", "_", "-", "ü" * 100, "\x00"]
    for name in names:
        legal = is_legal_topic_name(name)
        assert (topic_name_error(name) is None) == legal == is_legal_topic(name), name
        if not legal:
            error = topic_name_error(name)
            assert error.startswith("Topic name is invalid: ") and "\n" not in error and len(error) < 400, error
    assert is_legal_topic(None) is False and is_legal_topic(b"a") is False


def test_the_tests_have_one_conftest():
    """Test modules import helpers with ``from conftest import ...``. Pytest imports a
    directory's conftest.py as the module ``conftest``, so a second one below tests/ shadows the
    root's and the modules importing from it fail to collect (once, 694 tests went uncollected)."""
    found = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("conftest.py")
                   if not _SKIPPED_DIRS.intersection(p.parts))
    assert found == ["tests/conftest.py"], found
