"""Kafka's ``Sanitizer``: how user principals and client-ids become ZooKeeper node names.

``sanitize`` is Java's ``URLEncoder.encode(name, "UTF-8")`` (letters, digits and ``. - * _``
kept, space as ``+``, every other byte ``%XX`` upper-case) followed by ``*`` -> ``%2A`` and
``+`` -> ``%20``. ``desanitize`` is Java's ``URLDecoder.decode(name, "UTF-8")``: ``+`` is a
space, ``%XX`` sequences are UTF-8 bytes (malformed UTF-8 becomes U+FFFD) and a broken escape
is an error.
"""

from __future__ import annotations

import re

_KEPT = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def sanitize(name: str) -> str:
    """The ZooKeeper node name (and metric tag) of a user principal or client-id."""
    # A lone surrogate has no UTF-8 form; Java's encoder writes '?' for it, and so do we.
    out = []
    for byte in name.encode("utf-8", errors="replace"):
        if byte in _KEPT:
            out.append(chr(byte))
        else:
            # '*' and ' ' are the two bytes Kafka re-encodes after URLEncoder: the result is
            # plain percent-encoding for every byte outside the kept set.
            out.append("%%%02X" % byte)
    return "".join(out)


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
