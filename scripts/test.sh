#!/usr/bin/env bash
# Installs kquota (dev-profile native build) with its test extras, then runs every test:
# the Rust kernel's own tests and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."
MATURIN_PEP517_ARGS="--profile dev" python3 -m pip install -q -e ".[test]"
cargo test --manifest-path rust/Cargo.toml
python3 -m pytest
