#!/usr/bin/env bash
# Installs kquota (dev-profile native build) with its test extras, then runs every test: the
# Rust kernel's own tests and the Python suite. The ZooKeeper store tests need a real server:
# Debian's zookeeperd is installed if missing and a private server runs on 127.0.0.1:21810 for
# the duration of the tests (with CI=true those tests fail, not skip, without it).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

if [ ! -f /usr/share/java/zookeeper.jar ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  # (the package's own service, if it starts, listens on 2181: no clash with ours)
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends zookeeperd
fi
export KQUOTA_ZK_PORT="${KQUOTA_ZK_PORT:-21810}"
export KQUOTA_TEST_ZK="127.0.0.1:${KQUOTA_ZK_PORT}"
trap 'bash scripts/zookeeper.sh stop' EXIT
bash scripts/zookeeper.sh start

MATURIN_PEP517_ARGS="--profile dev" python3 -m pip install -q -e ".[test]"
cargo test --manifest-path rust/Cargo.toml
python3 -m pytest
