"""scripts/kafka.sh's KRaft cluster id (scripts/kafka/cluster_id.py): Kafka's Uuid.randomUuid
rule, never an id that starts with "-" (kafka-storage format -t would read it as an option and
fail; one random id in 64 did, failing a CI run)."""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kafka" / "cluster_id.py"


def _module():
    spec = importlib.util.spec_from_file_location("cluster_id", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_an_id_starting_with_a_dash_is_drawn_again():
    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))  # the first 6 bits 111110: "-" in URL-safe base64
    plain = uuid.UUID(bytes=bytes(range(16)))
    assert base64.urlsafe_b64encode(dash.bytes).decode().startswith("-")
    draws = iter([dash, dash, plain])
    got = _module().cluster_id(lambda: next(draws))
    assert got == base64.urlsafe_b64encode(plain.bytes).decode().rstrip("=")
    assert len(got) == 22


@pytest.mark.process
def test_the_script_prints_one_id():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True).stdout
    assert len(out.strip()) == 22 and not out.startswith("-")
