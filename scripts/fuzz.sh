#!/usr/bin/env bash
# Fuzzes the readers of bytes a client (or a balancer, or a broker) sends, each for a bounded
# time on its committed corpus; any crash fails the run (scripts/test.sh calls this).
#
# Targets (docs/security.md, "Fuzzing"):
#   cargo fuzz (rust/kquota-proxy/fuzz/, libFuzzer): request_reader (size prefix, request header,
#     Produce's and Fetch's request fields), own_topics (the walk of a Produce's or Fetch's topics
#     for the proxy's own, and the answer refusing them), produce_response, fetch_response (the
#     layouts of the broker's answers), proxy_header (PROXY protocol v1/v2);
#   atheris (tests/fuzz/): codec (the Python codec's decode_body, every message and version),
#     sasl (the SASL name readers).
# The committed corpora (rust/kquota-proxy/fuzz/corpus/<target>/, tests/fuzz/corpus/<target>/)
# are read, never written: what a run discovers goes to a scratch directory. A crash leaves its
# input under $KQUOTA_FUZZ_ARTIFACTS/<target>/; fix it, then commit that input to the target's
# corpus (every run replays it) and a unit test beside the code it broke.
#
# Environment:
#   KQUOTA_FUZZ_SECONDS  fuzzing seconds per target (default 10: 7 targets, about 45 s in all on 2
#                        cores once built)
#   KQUOTA_FUZZ_JOBS     targets fuzzed at once (default: the number of cores)
#   KQUOTA_FUZZ_TARGETS  the targets to run (default: all seven, space-separated)
#   KQUOTA_FUZZ_ARTIFACTS where crashing inputs go (default: $TMPDIR/kquota-fuzz-artifacts)
#   KQUOTA_FUZZ_TARGET_DIR the fuzz build's target directory (default: ~/.cache/kquota/fuzz-target)
#   PY                   the Python with kquota (default: python3); atheris is installed into
#                        it with pip when missing (it is in the `test` extra on Linux x86-64)
# cargo-fuzz is installed with `cargo install --locked` when missing. It runs on a stable
# compiler: without a sanitizer (`-s none`; address sanitizing needs nightly) and with
# RUSTC_BOOTSTRAP=1 for the one unstable flag cargo-fuzz passes; overflow and debug assertions
# stay on, so an overflow or an out-of-bounds index is a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
SECONDS_EACH="${KQUOTA_FUZZ_SECONDS:-10}"
TARGETS="${KQUOTA_FUZZ_TARGETS:-request_reader own_topics produce_response fetch_response proxy_header codec sasl}"
PY="${PY:-python3}"
JOBS="${KQUOTA_FUZZ_JOBS:-$(nproc)}"
case "$JOBS" in
  ''|*[!0-9]*|0*) echo "fuzz.sh: KQUOTA_FUZZ_JOBS must be a whole number of at least 1, not '$JOBS'" >&2; exit 2 ;;
esac
CARGO_FUZZ_VERSION=0.13.2
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
ARTIFACTS="${KQUOTA_FUZZ_ARTIFACTS:-${TMPDIR:-/tmp}/kquota-fuzz-artifacts}"
# The fuzz build's own target directory, outside the clone so that a later run (a fresh clone
# on the same machine) rebuilds only what changed, as Maven's repository caches the Kafka jars.
FUZZ_TARGET_DIR="${KQUOTA_FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kquota/fuzz-target}"
# libFuzzer's flags for every target: the time bound, a per-input bound (a slow input is a
# finding: it would stall a connection), and bounded memory.
FLAGS=(-max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)

is_rust() { case "$1" in request_reader|own_topics|produce_response|fetch_response|proxy_header) return 0 ;; esac; return 1; }

rust=() python=()
for t in $TARGETS; do
  if is_rust "$t"; then rust+=("$t")
  elif [ "$t" = codec ] || [ "$t" = sasl ]; then python+=("$t")
  else echo "fuzz.sh: unknown target $t" >&2; exit 2
  fi
done

if [ ${#rust[@]} -gt 0 ]; then
  if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
    start=$(date +%s)
    cargo install --locked --quiet cargo-fuzz --version "$CARGO_FUZZ_VERSION"
    echo "installed cargo-fuzz $CARGO_FUZZ_VERSION in $(( $(date +%s) - start )) s"
  fi
  start=$(date +%s)
  (cd rust/kquota-proxy && RUSTC_BOOTSTRAP=1 cargo fuzz build -s none --target-dir "$FUZZ_TARGET_DIR" 2>&1 | tail -n 3) \
    || { echo "fuzz.sh: the cargo-fuzz targets do not build" >&2; exit 1; }
  echo "built the cargo-fuzz targets in $(( $(date +%s) - start )) s"
fi
if [ ${#python[@]} -gt 0 ] && ! "$PY" -c 'import atheris' 2>/dev/null; then
  start=$(date +%s)
  "$PY" -m pip install -q "atheris>=2.3"
  echo "installed atheris in $(( $(date +%s) - start )) s"
fi

# One target per core at a time (each libFuzzer run is one process on one core): every target
# still fuzzes its full time, the step takes about half as long on 2 cores.
fuzz_one() {
  local t="$1" start rc runs log="$WORK/$t.log"
  mkdir -p "$WORK/new/$t" "$ARTIFACTS/$t"
  start=$(date +%s)
  if is_rust "$t"; then
    (cd rust/kquota-proxy && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none --target-dir "$FUZZ_TARGET_DIR" "$t" \
      "$WORK/new/$t" "$ROOT/rust/kquota-proxy/fuzz/corpus/$t" -- "${FLAGS[@]}" -artifact_prefix="$ARTIFACTS/$t/") \
      >"$log" 2>&1 && rc=0 || rc=$?
  else
    PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" "$PY" "tests/fuzz/fuzz_$t.py" "${FLAGS[@]}" \
      -artifact_prefix="$ARTIFACTS/$t/" "$WORK/new/$t" "$ROOT/tests/fuzz/corpus/$t" >"$log" 2>&1 && rc=0 || rc=$?
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if [ "$rc" -ne 0 ]; then
    { echo "FAILED $t after $(( $(date +%s) - start )) s (exit $rc): crashing input in $ARTIFACTS/$t/"
      tail -n 40 "$log"; } >"$WORK/$t.result"
    return 1
  fi
  echo "ok: $t, $runs inputs in $(( $(date +%s) - start )) s" >"$WORK/$t.result"
}

all=("${rust[@]}" "${python[@]}")
failed=()
for ((i = 0; i < ${#all[@]}; i += JOBS)); do
  batch=("${all[@]:i:JOBS}")
  pids=()
  for t in "${batch[@]}"; do
    fuzz_one "$t" &
    pids+=("$!")
  done
  for k in "${!batch[@]}"; do
    wait "${pids[$k]}" || failed+=("${batch[$k]}")
    cat "$WORK/${batch[$k]}.result"
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in ${failed[*]}" >&2
  exit 1
fi
