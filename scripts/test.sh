#!/usr/bin/env bash
# The README's test command and what .ci/run runs: every test, on a fresh install.
#
# 1. system packages: Debian's zookeeperd, chromium, kcat and stunnel4 (and python3-venv where Python lacks
#    ensurepip) are installed with apt-get if missing;
# 2. a fresh virtual environment in .venv-test/ (recreated on every run, never the machine's
#    site-packages) gets kquota (dev-profile native build) with exactly its `test` extra, so a
#    test that imports something the extra does not install fails here as it would anywhere;
# 3. a private ZooKeeper server on 127.0.0.1:$KQUOTA_ZK_PORT (default 21810; an existing value is
#    honoured) runs for the duration of the tests (with CI=true the ZooKeeper tests fail, not
#    skip, without it);
# 3b. Apache Kafka's broker (scripts/kafka.sh; the version pinned in scripts/kafka/pom.xml, its jars
#    fetched once with Maven and cached in ~/.m2 and ~/.cache/kquota) runs for the duration of the
#    tests on free loopback ports from $KQUOTA_KAFKA_PORT (default 19092); its state directory is
#    exported as KQUOTA_TEST_KAFKA_DIR for tests/support/kafka_broker.py (with CI=true the tests
#    that need it fail, not skip, without it); a three-broker cluster, started in the background
#    and awaited before the tests, as KQUOTA_TEST_KAFKA3_DIR;
# 4. static checks: ruff, cargo clippy (warnings are errors), mypy's stubtest of the
#    hand-written stub of the native module, and the documentation site (`mkdocs build --strict`
#    into a temporary directory, which tests/structure/test_docs_site.py then reads);
# 4b. fuzzing: scripts/fuzz.sh runs each fuzz target for a bounded time on its committed corpus;
# 5. the Rust kernel's own tests, then the Python suite on $KQUOTA_TEST_WORKERS pytest-xdist
#    workers (default 2): the tests marked `timing` or `heavy` one at a time on one worker, the
#    rest by module on the others (tests/support/scheduling.py).
# Extra pytest arguments are passed on: `bash scripts/test.sh tests/pipeline/test_cli.py -x`.
# The inner loop, `bash scripts/test.sh -m "not process"` (every test that starts no other
# process, a few minutes in all), skips ZooKeeper, Kafka and the fuzzing, which only those need.
# Cargo builds into $CARGO_TARGET_DIR (default ~/.cache/kquota/cargo-target), outside the clone,
# as Maven's repository caches the Kafka jars: a fresh clone on the same machine recompiles only
# what changed (cargo's fingerprints decide), not every dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
VENV="${KQUOTA_TEST_VENV:-.venv-test}"
SYSTEM_PYTHON="${KQUOTA_PYTHON:-python3}"
WORKERS="${KQUOTA_TEST_WORKERS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kquota/cargo-target}"
# `-m "not process"` (the inner loop): no test needs ZooKeeper, Kafka or the fuzzers.
inner=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-m" ] && [ "$a" = "not process" ]; then inner=1; fi
  prev="$a"
done

section() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

apt_install() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

# ------------------------------------------------------------------ 1. system packages
section "system packages"
missing=()
# (the package's own service, if it starts, listens on 2181: no clash with ours)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeperd)
# Apache Kafka's jars come from Maven Central (scripts/kafka/pom.xml); openssl makes its test
# certificates.
command -v mvn >/dev/null || missing+=(maven)
command -v openssl >/dev/null || missing+=(openssl)
# The HTML report is checked in a real browser (tests/pipeline/test_report_html.py).
command -v chromium >/dev/null || missing+=(chromium)
# A real librdkafka command-line client for the proxy tests (tests/proxy/test_proxy_*.py).
command -v kcat >/dev/null || missing+=(kcat)
# stunnel in front of tansu for benches/bench_proxy_tls.py only (tests/support/tls_support.py's
# TlsBroker); the TLS tests use Apache Kafka's own SSL listener.
command -v stunnel4 >/dev/null || missing+=(stunnel4)
# Spark (the pipeline tests) and ZooKeeper run on Java 17+.
command -v java >/dev/null || missing+=(default-jre-headless)
# Debian/Ubuntu split venv's pip bootstrap out of python3 (PEP 668 machines need a venv).
"$SYSTEM_PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
echo "ok: zookeeper jar, maven, openssl, chromium, kcat, stunnel4, java, $("$SYSTEM_PYTHON" --version) with venv"

# ------------------------------------------------------------------ 2. fresh virtual environment
section "virtual environment $VENV (fresh) with kquota[test]"
rm -rf "$VENV"
"$SYSTEM_PYTHON" -m venv "$VENV"
PY="$PWD/$VENV/bin/python"
MATURIN_PEP517_ARGS="--profile dev" "$PY" -m pip install -q -e ".[test]"
"$PY" -c 'import kquota; print("ok: kquota", kquota.__version__, "in", __import__("sys").prefix)'

# ------------------------------------------------------------------ 3. ZooKeeper
cleanup=""
if [ -z "$inner" ]; then
section "ZooKeeper"
export KQUOTA_ZK_PORT="${KQUOTA_ZK_PORT:-21810}"
export KQUOTA_TEST_ZK="127.0.0.1:${KQUOTA_ZK_PORT}"
cleanup="bash scripts/zookeeper.sh stop"
trap 'eval "$cleanup"' EXIT
bash scripts/zookeeper.sh start

# ------------------------------------------------------------------ 3b. Apache Kafka
section "Apache Kafka"
bash scripts/kafka.sh fetch
export KQUOTA_KAFKA_DIR="${KQUOTA_KAFKA_DIR:-$(mktemp -u /tmp/kquota-kafka-test.XXXXXX)}"
export KQUOTA_TEST_KAFKA_DIR="$KQUOTA_KAFKA_DIR"
cleanup="bash scripts/kafka.sh stop; $cleanup"
kafka_started=$SECONDS
bash scripts/kafka.sh start
echo "ok: Apache Kafka up in $((SECONDS - kafka_started)) s, state in $KQUOTA_KAFKA_DIR"

# The three-broker cluster (one controller, three brokers) the cluster tests share, exported as
# KQUOTA_TEST_KAFKA3_DIR: started in the background now, while the static checks and the fuzzers
# run (the fuzzers' time is fixed), and awaited before the tests. Left to the tests' fixture,
# each pytest-xdist worker started its own when a test first needed one (50-75 s each, one of
# them in the serial group's critical path).
export KQUOTA_TEST_KAFKA3_DIR="$(mktemp -u /tmp/kquota-kafka3-test.XXXXXX)"
kafka3_log="$(mktemp)"
(started=$SECONDS
 KQUOTA_KAFKA_DIR="$KQUOTA_TEST_KAFKA3_DIR" bash scripts/kafka.sh start --brokers 3 >"$kafka3_log" 2>&1
 rc=$?
 echo "$((SECONDS - started))" >"$kafka3_log.seconds"
 exit $rc) &
kafka3_pid=$!
# Stopped once its start has ended (a stop during the start would leave its JVMs running).
cleanup="wait $kafka3_pid 2>/dev/null; KQUOTA_KAFKA_DIR=\"$KQUOTA_TEST_KAFKA3_DIR\" bash scripts/kafka.sh stop; rm -f \"$kafka3_log\" \"$kafka3_log.seconds\"; $cleanup"
trap 'eval "$cleanup"' EXIT
fi

# ------------------------------------------------------------------ 4. static checks
section "static checks: ruff, clippy, stubtest, docs"
"$PWD/$VENV/bin/ruff" check python tests benches examples scripts
cargo clippy --manifest-path rust/Cargo.toml --workspace --all-targets -q -- -D warnings
# The hand-written stub of the native module against the module itself.
"$PY" -m mypy.stubtest kquota._kquota
# The documentation site, built offline (no plugin fetches anything); any warning fails.
KQUOTA_DOCS_SITE="$(mktemp -d)"
export KQUOTA_DOCS_SITE
cleanup="rm -rf \"$KQUOTA_DOCS_SITE\"; $cleanup"
trap 'eval "$cleanup"' EXIT
NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict --site-dir "$KQUOTA_DOCS_SITE"

# ------------------------------------------------------------------ 4b. fuzzing
if [ -z "$inner" ]; then
section "fuzzing: the wire readers, each for a bounded time on its committed corpus"
PY="$PY" bash scripts/fuzz.sh
fi

# ------------------------------------------------------------------ 5. tests
section "Rust tests"
cargo test --manifest-path rust/Cargo.toml

section "Python tests"
if [ -n "${kafka3_pid:-}" ]; then
  if ! wait "$kafka3_pid"; then
    cat "$kafka3_log" >&2
    echo "test.sh: Apache Kafka's three-broker cluster did not start (state in $KQUOTA_TEST_KAFKA3_DIR)" >&2
    exit 1
  fi
  echo "ok: Apache Kafka's three-broker cluster up in $(cat "$kafka3_log.seconds") s (in the background), state in $KQUOTA_TEST_KAFKA3_DIR"
fi
# The venv's bin first: subprocesses of the tests (`kquota`, `python3`) use the fresh install.
PATH="$PWD/$VENV/bin:$PATH" VIRTUAL_ENV="$PWD/$VENV" "$PY" -m pytest -n "$WORKERS" --dist loadgroup "$@"
section "all tests passed"
