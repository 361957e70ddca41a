"""The binding crate's shape: one file per concept, each under 500 lines, lib.rs only
the module definition, and kernel errors mapped in one place (no per-call ``to_py``)."""

import pathlib
import re

SRC = pathlib.Path(__file__).resolve().parents[2] / "rust" / "kquota-py" / "src"
MAX_LINES = 500


def sources():
    files = sorted(SRC.rglob("*.rs"))
    assert files, f"no Rust sources under {SRC}"
    return files


def test_no_binding_file_over_500_lines():
    long = {str(p.relative_to(SRC)): n for p in sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_lib_rs_is_only_the_module_definition():
    lib = (SRC / "lib.rs").read_text()
    assert "#[pymodule]" in lib
    for marker in ("#[pyclass", "#[pymethods]", "#[pyfunction]", "impl "):
        assert marker not in lib, marker


def test_kernel_errors_are_mapped_in_one_place():
    # `?` through PyQuotaErr, never a per-call conversion or a hand-made QuotaError -> PyErr.
    for path in sources():
        text = path.read_text()
        assert not re.search(r"\bto_py\b", text), path
        if path.name != "errors.rs":
            assert "PyValueError::new_err" not in text, path
