"""Fuzz target (atheris) for the Python codec's ``decode_body``: every message the schema data
knows, at each of its valid versions, fed hostile bytes. Its contract: a body decodes, or
:class:`~kquota.kafka.protocol.codec.CodecError` says why not; any other exception is a bug (a
traceback from deep inside the proxy, a connection torn down the wrong way). A decoded body
encodes again, as the proxy re-encodes what it rewrites.

The input: two bytes choose the message and its version, the rest is the body.
``python tests/fuzz/fuzz_codec.py [libFuzzer flags] [corpus dirs]``; scripts/fuzz.sh runs it.
"""

from __future__ import annotations

import harness

from kquota.kafka.protocol import codec
from kquota.kafka.protocol.codec import SCHEMAS, CodecError, decode_body, encode_body

NAMES = sorted(SCHEMAS)


def pick(data: bytes) -> tuple[str, int, bytes]:
    """The message, version and body an input names."""
    name = NAMES[data[0] % len(NAMES)] if data else NAMES[0]
    lo, hi = SCHEMAS[name]["valid"]
    version = lo + (data[1] if len(data) > 1 else 0) % (hi - lo + 1)
    return name, version, data[2:]


def seed(name: str, version: int, body: bytes) -> bytes:
    """The input that :func:`pick` reads as ``body`` of ``name`` at ``version``."""
    lo, _ = SCHEMAS[name]["valid"]
    return bytes([NAMES.index(name), version - lo]) + body


def check(data: bytes) -> None:
    name, version, body = pick(data)
    try:
        obj = decode_body(name, version, body, 0)
    except CodecError:
        return
    encode_body(name, version, obj)


def main() -> None:
    harness.fuzz(codec, check)


if __name__ == "__main__":
    main()
