"""scripts/fuzz.sh's settings: a bad one is refused in one line before anything is built or run
(a zero or non-numeric KQUOTA_FUZZ_JOBS would otherwise loop forever over its batches)."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.process

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _fuzz(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/fuzz.sh"], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=30, check=False)


@pytest.mark.parametrize("jobs", ["0", "abc", "-1", "2x", "08"])
def test_a_bad_jobs_count_is_refused_in_one_line(jobs):
    r = _fuzz(KQUOTA_FUZZ_JOBS=jobs)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"fuzz.sh: KQUOTA_FUZZ_JOBS must be a whole number of at least 1, not '{jobs}'"], r.stderr


def test_an_unknown_target_is_refused_in_one_line():
    r = _fuzz(KQUOTA_FUZZ_TARGETS="request_reader nosuch", KQUOTA_FUZZ_JOBS="2")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["fuzz.sh: unknown target nosuch"], r.stderr
