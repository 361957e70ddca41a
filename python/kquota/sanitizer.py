"""Kafka's ``Sanitizer``: a principal's user tag, and how names become ZooKeeper node names.

``sanitize`` is Java's ``URLEncoder.encode(name, "UTF-8")`` (letters, digits and ``. - * _``
kept, space as ``+``, every other byte ``%XX`` upper-case) followed by ``*`` -> ``%2A`` and
``+`` -> ``%20``; it is the kernel's own (``quota-core``'s ``sanitize.rs``), so metric tags,
node names and plugins agree on every name, a lone surrogate included (``?``, as Java).

``desanitize`` is Java's ``URLDecoder.decode(name, "UTF-8")``: ``+`` is a space, each run of
``%XX`` escapes is UTF-8 bytes (malformed UTF-8 becomes U+FFFD) and a broken escape is a
``ValueError``; also the kernel's (``sanitize.rs``), so this module is only their Python face.
"""

from __future__ import annotations

from kquota._kquota import desanitize, sanitize

__all__ = ["desanitize", "sanitize"]
