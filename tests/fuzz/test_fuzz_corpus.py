"""The atheris targets' committed corpora replayed through the same checks, without atheris: every
seed (a valid input of its kind) and every input a fuzzing run found to crash (committed to the
corpus once fixed) is a test of the suite. scripts/fuzz.sh fuzzes from these corpora."""

from __future__ import annotations

import pathlib

import fuzz_codec
import fuzz_sasl
import pytest

from kquota.kafka.protocol.codec import SCHEMAS

CORPUS = pathlib.Path(__file__).parent / "corpus"


def _inputs(target: str) -> list[pathlib.Path]:
    return sorted((CORPUS / target).iterdir())


def test_every_message_and_version_has_a_seed():
    seeded = {fuzz_codec.pick(p.read_bytes())[:2] for p in _inputs("codec")}
    for name, spec in SCHEMAS.items():
        lo, hi = spec["valid"]
        assert {(name, v) for v in range(lo, hi + 1)} <= seeded, name


@pytest.mark.parametrize("path", _inputs("codec"), ids=lambda p: p.name[:12])
def test_codec_corpus(path):
    fuzz_codec.check(path.read_bytes())


@pytest.mark.parametrize("path", _inputs("sasl"), ids=lambda p: p.name[:12])
def test_sasl_corpus(path):
    fuzz_sasl.check(path.read_bytes())


def test_the_checks_catch_what_they_exist_for(monkeypatch):
    # An exception other than CodecError escapes; an empty name, or one UTF-8 cannot hold, fails.
    def broken(*_):
        raise IndexError("deep inside")

    monkeypatch.setattr(fuzz_codec, "decode_body", broken)
    with pytest.raises(IndexError):
        fuzz_codec.check(fuzz_codec.seed("ApiVersionsRequest", 3, b""))
    for name, error in (("", AssertionError), ("\ud800", UnicodeEncodeError)):
        monkeypatch.setattr(fuzz_sasl, "username", lambda *_, n=name: n)
        with pytest.raises(error):
            fuzz_sasl.check(fuzz_sasl.seed("PLAIN", b"\x00a\x00b"))
