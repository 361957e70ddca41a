"""The worked examples of the shipped plugins (docs/guides/callbacks.md, moved there from the
README) run as written, and every expression line's comment states what it returns."""

import ast
import pathlib
import re

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guides" / "callbacks.md"


def section_blocks():
    text = PAGE.read_text()
    section = text.split("\n## Shipped plugins\n", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_plugin_examples_return_what_their_comments_say():
    blocks = section_blocks()
    assert len(blocks) == 3  # quota groups, partition-proportional, storage-aware
    ns: dict = {}
    checked = 0
    for block in blocks:
        lines = block.splitlines()
        for stmt in ast.parse(block).body:
            if not isinstance(stmt, ast.Expr):
                exec(compile(ast.Module([stmt], []), "callbacks.md", "exec"), ns)
                continue
            value = eval(compile(ast.Expression(stmt.value), "callbacks.md", "eval"), ns)
            rest = lines[stmt.end_lineno - 1][stmt.end_col_offset:]
            m = re.match(r"\s*#\s*(\{.*?\}|[^:\s]+)", rest)
            if m is None:
                continue  # a call run for its effect (e.g. qm.close())
            assert value == ast.literal_eval(m.group(1)), lines[stmt.end_lineno - 1]
            checked += 1
    assert checked >= 10
