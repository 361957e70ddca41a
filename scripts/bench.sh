#!/usr/bin/env bash
# Every benchmark, one command: release build, native report, criterion, the Python suites,
# then the combined summary. Results land in benches/results/ (summary.{md,json} + per suite).
#   KQ_BENCH_QUICK=1  smoke run: every row, about a minute after the builds; numbers not meant
#                     to be read.
#   KQ_BENCH_SKIP_BUILD=1  benchmark the kquota already installed (e.g. a release build you
#                     made yourself); the summary still reports which build it was.
# Other knobs: benches/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
KQ_BENCH_STARTED="$(date +%s)"
export KQ_BENCH_STARTED
quick="${KQ_BENCH_QUICK:-}"
[[ "$quick" == "0" ]] && quick=""

if [[ -z "${KQ_BENCH_SKIP_BUILD:-}" ]]; then
    MATURIN_PEP517_ARGS="--profile release" "$PY" -m pip install -q -e ".[bench,test]"
fi

echo "== native report" >&2
cargo run --release -q --manifest-path rust/Cargo.toml -p quota-core --example native_report

echo "== criterion" >&2
crit_args=()
if [[ -n "$quick" ]]; then
    crit_args=(--warm-up-time 0.2 --measurement-time 0.5 --sample-size 10)
fi
cargo bench -q --manifest-path rust/Cargo.toml -p quota-core --bench record -- "${crit_args[@]}"

echo "== python record path (pytest-benchmark)" >&2
"$PY" -m pytest benches -q -p no:cacheprovider

echo "== python keyed comparison with peers, latency" >&2
"$PY" benches/compare.py

echo "== metrics scrape, callback path, pipeline" >&2
"$PY" benches/bench_metrics.py
"$PY" benches/bench_callback.py
"$PY" benches/bench_pipeline.py

echo "== summary" >&2
"$PY" benches/summary.py
