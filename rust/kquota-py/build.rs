// Exposes the interpreter's cfgs (e.g. `Py_GIL_DISABLED`) to this crate, as pyo3 itself sees them.
fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
