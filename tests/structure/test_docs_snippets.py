"""Every ```python block of README.md and docs/**/*.md runs as written, and every expression
whose line ends in a comment that starts with a Python literal returns that literal, so no page
drifts from the code.

The blocks of one page run in order in one namespace (a page reads as one session), in a fresh
temporary directory. A block may be excluded only by an explicit ``<!-- no-run: reason -->``
line right before it; such blocks are counted, and more than ``MAX_NO_RUN`` fails.
"""

import ast
import io
import pathlib
import re
import tokenize

import pytest

pytestmark = pytest.mark.process

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Blocks that may be marked ``<!-- no-run: ... -->`` (those needing a cluster or a broker).
MAX_NO_RUN = 1
#: A lower bound on the blocks found, so that a broken extraction cannot pass by finding none.
MIN_BLOCKS = 20

_FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
_NO_RUN = re.compile(r"<!--\s*no-run:\s*(\S.*?)\s*-->\s*$")


def blocks(path: pathlib.Path) -> list[tuple[int, str, str]]:
    """``(line, code, no-run reason or "")`` of each ```python block of ``path``."""
    text = path.read_text(encoding="utf-8")
    found = []
    for m in _FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = _NO_RUN.search(before)
        found.append((text.count("\n", 0, m.start()) + 2, m.group(1), reason.group(1) if reason else ""))
    return found


def _comments(code: str) -> dict[int, str]:
    """Trailing comment text by line number."""
    return {tok.start[0]: tok.string[1:].strip()
            for tok in tokenize.generate_tokens(io.StringIO(code).readline) if tok.type == tokenize.COMMENT}


def expected_value(comment: str) -> tuple[bool, object]:
    """``(True, literal)`` if the comment starts with a Python literal (the whole comment, or
    the part before ``": "`` / ``" ("``), else ``(False, None)``."""
    for candidate in (comment, comment.split(": ", 1)[0], comment.split(" (", 1)[0]):
        try:
            return True, ast.literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return False, None


class _CheckComments(ast.NodeTransformer):
    """Turns each expression statement (at any depth) whose line ends in a literal comment into
    ``__doc_check__(expression, index)``; ``self.expected[index]`` is ``(line, comment, value)``."""

    def __init__(self, comments: dict[int, str], first_line: int) -> None:
        self.comments, self.first_line, self.expected = comments, first_line, []

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        comment = self.comments.get(node.end_lineno - self.first_line + 1)
        ok, want = expected_value(comment) if comment is not None else (False, None)
        if not ok:
            return node
        self.expected.append((node.end_lineno, comment, want))
        call = ast.Call(ast.Name("__doc_check__", ast.Load()),
                        [node.value, ast.Constant(len(self.expected) - 1)], [])
        return ast.copy_location(ast.Expr(ast.copy_location(call, node)), node)


def run_block(code: str, ns: dict, where: str, first_line: int = 1) -> int:
    """Runs ``code`` (its first line is line ``first_line`` of the file ``where``) in ``ns``;
    returns how many expression values it checked against their comments."""
    tree = ast.parse(code, where)
    ast.increment_lineno(tree, first_line - 1)  # tracebacks and messages name the page's lines
    checker = _CheckComments(_comments(code), first_line)
    tree = ast.fix_missing_locations(checker.visit(tree))
    seen = []

    def check(value: object, index: int) -> None:
        line, comment, want = checker.expected[index]
        assert value == want, f"{where}:{line}: got {value!r}, the comment says {comment!r}"
        seen.append(index)

    ns["__doc_check__"] = check
    try:
        exec(compile(tree, where, "exec"), ns)
    finally:
        del ns["__doc_check__"]
    return len(seen)


def _page_id(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_pages_hold_python_blocks_and_few_are_excluded():
    found = [(p, b) for p in PAGES for b in blocks(p)]
    assert len(found) >= MIN_BLOCKS, f"only {len(found)} python blocks found in README.md and docs/"
    skipped = [f"{_page_id(p)}:{line} ({reason})" for p, (line, _, reason) in found if reason]
    assert len(skipped) <= MAX_NO_RUN, f"more than {MAX_NO_RUN} blocks marked no-run: {skipped}"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=_page_id)
def test_page_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__docs__"}
    ran = 0
    try:
        for line, code, reason in blocks(page):
            if reason:
                compile(code, f"{_page_id(page)}:{line}", "exec")  # still valid Python
                continue
            run_block(code, ns, _page_id(page), line)
            ran += 1
    finally:
        for value in list(ns.values()):  # stop the expiry threads of the page's managers
            if type(value).__name__ == "QuotaManager" and not value.closed:
                value.close()
    assert ran > 0


def test_expected_value_reads_the_comments_the_pages_use():
    assert expected_value("{'user': 'alice', 'client-id': ''}") == (True, {"user": "alice", "client-id": ""})
    assert expected_value("1000.0: broker 1 leads 1 of alice's 4 partitions") == (True, 1000.0)
    assert expected_value("None: unlimited, there is space") == (True, None)
    assert expected_value("True (the state flipped)") == (True, True)
    assert expected_value("unchecked; weighs on later requests") == (False, None)
    assert expected_value("{ClientQuotaEntity(...): {...}, ...}") == (False, None)


def test_a_wrong_comment_fails():
    with pytest.raises(AssertionError, match="the comment says"):
        run_block("1 + 1   # 3\n", {}, "example")
    assert run_block("x = 2\nx * 2   # 4\nprint(x)   # not a literal\n", {}, "example") == 1
    with pytest.raises(AssertionError, match="page.md:11: got 3"):  # nested lines are checked too
        run_block("if True:\n    1 + 2   # 4\n", {}, "page.md", first_line=10)


def test_no_run_needs_the_marker_right_before_the_block(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("<!-- no-run: needs a broker -->\n```python\nx = 1\n```\n\ntext\n\n```python\ny = 2\n```\n")
    assert [(line, reason) for line, _, reason in blocks(page)] == [(3, "needs a broker"), (9, "")]
