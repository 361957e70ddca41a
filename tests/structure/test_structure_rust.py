"""Structure checks for the Rust crates: no module cycle, no oversized module, the README names every module.

Each section checks one part of the tree; keep sections separate.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- Rust crates (rust/*/src)

MAX_RUST_MODULE_LINES = 500
RUST_CRATES = sorted((ROOT / "rust").glob("*/src"))

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def _module_name(src: Path, path: Path) -> str:
    """`a/b.rs` -> `a::b`, `a/mod.rs` -> `a`, `lib.rs` -> `crate`."""
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts == ["lib"] or parts == ["main"]:
        return "crate"
    return "::".join(parts)


def _code(text: str) -> str:
    """The source without comments (line and block) and string literals, so that paths named in
    docs and messages do not count as uses."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def _use_targets(code: str) -> list[str]:
    """Every path a module names through `crate::`: in `use crate::...;` items (groups
    flattened) and in inline paths such as `crate::budget::check_name(...)`."""
    targets: list[str] = []
    for m in re.finditer(r"\buse\s+crate::(.*?);", code, flags=re.S):
        targets.extend(_flatten(m.group(1).replace("\n", " ")))
    without_uses = re.sub(r"\buse\s+crate::.*?;", "", code, flags=re.S)
    for m in re.finditer(rf"\bcrate((?:::{_IDENT})+)", without_uses):
        targets.append(m.group(1)[2:])
    return targets


def _flatten(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> [`a::b`, `a::c::d`, `a::c::e`]."""
    tree = tree.strip()
    depth = 0
    for i, ch in enumerate(tree):
        if ch == "{" and depth == 0:
            prefix = tree[:i].rstrip(":").strip()
            inner = tree[i + 1 : tree.rindex("}")]
            parts, buf, d = [], "", 0
            for c in inner:
                if c == "," and d == 0:
                    parts.append(buf)
                    buf = ""
                    continue
                d += c == "{"
                d -= c == "}"
                buf += c
            parts.append(buf)
            out = []
            for p in parts:
                if p.strip():
                    for sub in _flatten(p):
                        out.append(f"{prefix}::{sub}" if prefix else sub)
            return out
    return [tree.split(" as ")[0].strip()]


def _root_reexports(src: Path) -> dict[str, str]:
    """Names the crate root re-exports (`pub use m::{A, B}`), mapped to the module they come from,
    so `crate::A` counts as a use of `m`."""
    lib = src / "lib.rs"
    if not lib.exists():
        return {}
    out: dict[str, str] = {}
    for m in re.finditer(r"\bpub\s+use\s+(.*?);", _code(lib.read_text()), flags=re.S):
        for path in _flatten(m.group(1).replace("\n", " ")):
            segs = path.split("::")
            if len(segs) >= 2:
                out[segs[-1]] = "::".join(segs[:-1])
    return out


def rust_module_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same crate it uses (self-uses and the crate root dropped)."""
    files = {_module_name(src, p): p for p in sorted(src.rglob("*.rs"))}
    modules = set(files)
    reexports = _root_reexports(src)
    graph: dict[str, set[str]] = {m: set() for m in modules if m != "crate"}
    for name, path in files.items():
        if name == "crate":
            continue
        for target in _use_targets(_code(path.read_text())):
            segs = target.split("::")
            # The longest module path that prefixes the target.
            dep = next(
                ("::".join(segs[:k]) for k in range(len(segs), 0, -1) if "::".join(segs[:k]) in modules),
                None,
            )
            if dep is None and segs[0] in reexports:
                dep = reexports[segs[0]]
            if dep and dep != name and not name.startswith(dep + "::") and dep != "crate":
                graph[name].add(dep)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as a path `[a, b, ..., a]`, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_rust_module_graph_parser_sees_uses_and_cycles(tmp_path: Path) -> None:
    """The checker itself: grouped uses, inline paths, root re-exports, and a cycle it must find."""
    src = tmp_path / "src"
    (src / "c").mkdir(parents=True)
    (src / "lib.rs").write_text("pub mod a;\npub mod b;\npub mod c;\npub use c::d::Thing;\n")
    (src / "a.rs").write_text("use crate::{b::X, c::d::{Y, Z}};\n// use crate::z;\nfn f() { crate::b::g(); }\n")
    (src / "b.rs").write_text('const S: &str = "crate::a::nope";\nfn g() -> crate::Thing { todo!() }\n')
    (src / "c" / "mod.rs").write_text("pub mod d;\n")
    (src / "c" / "d.rs").write_text("use crate::a;\n")
    graph = rust_module_graph(src)
    assert graph == {"a": {"b", "c::d"}, "b": {"c::d"}, "c": set(), "c::d": {"a"}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and "a" in cycle
    graph["c::d"] = set()
    assert find_cycle(graph) is None


@pytest.mark.parametrize("src", RUST_CRATES, ids=lambda p: p.parent.name)
def test_rust_modules_use_each_other_without_a_cycle(src: Path) -> None:
    """No module of a crate reaches itself through `crate::` uses (test code included)."""
    graph = rust_module_graph(src)
    assert len(graph) > 1
    cycle = find_cycle(graph)
    assert cycle is None, "module cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("src", RUST_CRATES, ids=lambda p: p.parent.name)
def test_rust_modules_are_small(src: Path) -> None:
    """One file per concept: no Rust module over the limit (tests included)."""
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in src.rglob("*.rs")}
    too_big = {p: n for p, n in sizes.items() if n > MAX_RUST_MODULE_LINES}
    assert not too_big, f"modules over {MAX_RUST_MODULE_LINES} lines: {too_big}"


def test_readme_architecture_names_every_kernel_module() -> None:
    """The architecture page (docs/architecture.md, which the README's Architecture section links)
    and quota-core's folder layout tell the same story."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = re.search(r"^# Architecture\n(.*)", page, re.S | re.M)
    assert section, "docs/architecture.md has no Architecture heading"
    src = ROOT / "rust" / "quota-core" / "src"
    files = sorted(p.name for p in src.glob("*.rs") if p.name != "lib.rs")
    missing = [f for f in files if not re.search(rf"(?<![\w/]){re.escape(f)}", section.group(1).replace("src/", ""))]
    assert not missing, f"quota-core modules missing from docs/architecture.md: {missing}"
    named = set(re.findall(r"src/(\w+\.rs)", section.group(1).split("rust/kquota-py/")[0]))
    gone = sorted(named - set(files) - {"lib.rs"})
    assert not gone, f"docs/architecture.md names quota-core files that do not exist: {gone}"


# ---------------------------------------------------------------- the extension and the package

KQUOTA_PY = ROOT / "rust" / "kquota-py" / "src"


def test_the_extension_never_imports_the_kquota_package() -> None:
    """Arrows run from the package to the extension only: `kquota.quota_type` and
    `kquota.callback` hand their class and function over at import (`_register_quota_type`,
    `_register_tag_decoder`); no module of the extension imports `kquota` back."""
    pattern = re.compile(r'import\w*\(\s*(?:py\s*,\s*)?c?"(kquota\b[\w.]*)"')
    hits = {p.relative_to(ROOT).as_posix(): pattern.findall(p.read_text())
            for p in KQUOTA_PY.rglob("*.rs")}
    assert {p: h for p, h in hits.items() if h} == {}


def test_kafkas_constants_have_one_definition_in_the_extension() -> None:
    """Broker defaults come from quota-core (`types.rs`, listed by `settings::BROKER_DEFAULTS`),
    the tag prefixes from quota-core's `callback.rs`: the binding writes no literal of them."""
    kernel = (KQUOTA_PY / "kernel.rs").read_text()
    assert not re.search(r"\b(Int|Real)\(\d", kernel), "a literal default in kernel.rs"
    for p in KQUOTA_PY.rglob("*.rs"):
        text = p.read_text()
        assert "'\\u{1}'" not in text and "'\\u{2}'" not in text, p
