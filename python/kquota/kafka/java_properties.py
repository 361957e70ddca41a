"""Java ``.properties`` files as ``java.util.Properties.load`` reads them, so that an operator's
Kafka broker and client files (``server.properties``, ``client.properties``) work unchanged:
``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comment lines; a line ending in an
odd number of backslashes continues on the next (whose leading blanks are dropped: how inline PEM
certificates are written, KIP-651); ``\\t \\n \\r \\f \\uXXXX`` escapes, any other ``\\x`` is x.

The values are kept as read (Java keeps trailing blanks); Kafka's ConfigDef trims when it parses
a value, and so do the readers of each property.
"""

from __future__ import annotations

import re

from kquota.exceptions import KQuotaError

__all__ = ["load_properties", "parse_properties"]

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"
_LINE_END = re.compile(r"\r\n|\r|\n")


def _logical_lines(text: str):
    """(first line number, logical line) pairs, continuations joined, comments and blanks dropped."""
    # Java's line terminators only (str.splitlines would also split at \f, \v, U+2028...).
    lines = _LINE_END.split(text)
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_BLANK)
            i += 1
        if _continues(line):
            line = line[:-1]
        yield start + 1, line


def _continues(line: str) -> bool:
    slashes = len(line) - len(line.rstrip("\\"))
    return slashes % 2 == 1


def _unescape(text: str, where: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 >= len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise KQuotaError(f"{where}: malformed \\uxxxx escape {text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """Key and raw value of a logical line (Java: the key ends at an unescaped ``=``, ``:`` or blank)."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _BLANK:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANK)
    return key, rest


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The properties in ``text`` (a later key replaces an earlier one, as in Java)."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        where = f"{source}:{number}"
        out[_unescape(key, where)] = _unescape(value, where)
    return out


def load_properties(path: str, option: str = "--config") -> dict[str, str]:
    """The properties of the file at ``path``; ``KQuotaError`` naming ``option`` and the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise KQuotaError(f"cannot read {option} {path!r}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise KQuotaError(f"cannot read {option} {path!r}: not UTF-8 text ({e.reason})") from None
    return parse_properties(text, path)
