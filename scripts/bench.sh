#!/usr/bin/env bash
# Release build, then every benchmark; results land in benches/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
MATURIN_PEP517_ARGS="--profile release" python3 -m pip install -q -e ".[bench,test]"
cargo run --release --manifest-path rust/Cargo.toml -p quota-core --example native_report
python3 -m pytest benches -q
python3 benches/bench_metrics.py
