"""A griffe extension for the API reference. kquota's docstrings are written for ``help()`` and
doctest, with reST roles (``:class:`~kquota.callback.ClientQuotaCallback```,
``:meth:`expire_sensors```) and ``>>>`` examples; Markdown has neither, so each role becomes a
code span of the name it points at (the last dotted part for ``~``), and each doctest example
(its ``>>>`` and ``...`` lines and the output up to a blank line) a ``pycon`` code block."""

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")


def _code_span(m: "re.Match[str]") -> str:
    target = m.group(2)
    return f"`{target.rsplit('.', 1)[-1] if m.group(1) else target}`"


def _fence_doctests(text: str) -> str:
    out: list[str] = []
    indent = None  # the open example's indentation, None outside one
    for line in text.split("\n"):
        stripped = line.strip()
        if indent is None and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + "```pycon")
        elif indent is not None and not stripped:
            out.append(indent + "```")
            indent = None
        out.append(line)
    if indent is not None:
        out.append(indent + "```")
    return "\n".join(out)


class ReSTRoles(griffe.Extension):
    """Rewrites reST roles and doctest examples in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _fence_doctests(_ROLE.sub(_code_span, obj.docstring.value))
