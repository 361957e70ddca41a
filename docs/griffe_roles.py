"""A griffe extension for the API reference: kquota's docstrings use reST roles
(``:class:`~kquota.callback.ClientQuotaCallback```, ``:meth:`expire_sensors```); Markdown has
none, so each becomes a code span of the name it points at (the last dotted part for ``~``)."""

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")


def _code_span(m: "re.Match[str]") -> str:
    target = m.group(2)
    return f"`{target.rsplit('.', 1)[-1] if m.group(1) else target}`"


class ReSTRoles(griffe.Extension):
    """Rewrites reST roles in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code_span, obj.docstring.value)
