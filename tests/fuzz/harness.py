"""What the atheris targets (``fuzz_*.py`` beside this file) share: running one under libFuzzer."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from types import ModuleType


def fuzz(module: ModuleType, check: Callable[[bytes], None]) -> None:
    """Fuzzes ``check`` with the command line's libFuzzer flags and corpus directories, coverage
    for ``module``'s own functions only (instrumenting every loaded module costs tens of seconds
    at start). atheris is imported here, so that the targets' checks run without it (the corpus
    replay in test_fuzz_corpus.py)."""
    import atheris

    for value in vars(module).values():
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            atheris.instrument_func(value)
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()
