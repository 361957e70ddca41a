"""Kafka's ``Sanitizer``: a principal's user tag, and how names become ZooKeeper node names.

``sanitize`` is Java's ``URLEncoder.encode(name, "UTF-8")`` (letters, digits and ``. - * _``
kept, space as ``+``, every other byte ``%XX`` upper-case) followed by ``*`` -> ``%2A`` and
``+`` -> ``%20``; it is the kernel's own (``quota-core``'s ``sanitize.rs``), so metric tags,
node names and plugins agree on every name, a lone surrogate included (``?``, as Java).

``desanitize`` is Java's ``URLDecoder.decode(name, "UTF-8")``: ``+`` is a space, ``%XX``
sequences are UTF-8 bytes (malformed UTF-8 becomes U+FFFD) and a broken escape is an error.
"""

from __future__ import annotations

import re

from kquota._kquota import sanitize

__all__ = ["desanitize", "sanitize"]

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def desanitize(node_name: str) -> str:
    """The raw name back from a sanitized node name; ``ValueError`` on a broken ``%`` escape."""
    if _BAD_ESCAPE.search(node_name):
        raise ValueError(f"invalid URL-encoded name {node_name!r}: incomplete '%' escape")
    raw = bytearray()
    i = 0
    while i < len(node_name):
        ch = node_name[i]
        if ch == "%":
            raw.append(int(node_name[i + 1 : i + 3], 16))
            i += 3
            continue
        raw.extend(b" " if ch == "+" else ch.encode("utf-8", errors="replace"))
        i += 1
    return raw.decode("utf-8", errors="replace")
