"""Fuzz target (atheris) for the SASL name readers (:func:`kquota.proxy.sasl.username`): a
client's SaslAuthenticate bytes under each mechanism. Its contract: a name (text that UTF-8 can
hold, as the kernel's names must be) or ``None``; never an exception, since the bytes come from
a client that has not authenticated yet.

The input: one byte chooses the mechanism, the rest is the client's auth bytes.
``python tests/fuzz/fuzz_sasl.py [libFuzzer flags] [corpus dirs]``; scripts/fuzz.sh runs it.
"""

from __future__ import annotations

import harness

from kquota.proxy import sasl
from kquota.proxy.sasl import username

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", None)


def seed(mechanism: str, auth_bytes: bytes) -> bytes:
    """The input that :func:`check` reads as ``auth_bytes`` under ``mechanism``."""
    return bytes([MECHANISMS.index(mechanism)]) + auth_bytes


def check(data: bytes) -> None:
    mechanism = MECHANISMS[data[0] % len(MECHANISMS)] if data else None
    name = username(mechanism, data[1:])
    if name is not None:
        assert isinstance(name, str) and name, f"{mechanism}: {name!r} is not a name"
        name.encode("utf-8")  # no lone surrogate


def main() -> None:
    harness.fuzz(sasl, check)


if __name__ == "__main__":
    main()
