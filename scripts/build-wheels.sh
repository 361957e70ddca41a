#!/usr/bin/env bash
# The release build: manylinux wheels of kquota (one per supported CPython) and the sdist, in dist/.
#
#   bash scripts/build-wheels.sh                     # release profile, every supported Python
#   bash scripts/build-wheels.sh --profile dev --python 3.11 --out /tmp/w   # a quick one (tests)
#
# - One wheel per interpreter (cp39 ... cp313), not one abi3 wheel: the extension's fast paths
#   (rust/kquota-py/src/fast/, name_table.rs) use CPython API outside the limited API (the
#   PyASCIIObject hash, PyTuple_GET_SIZE, PyFloat_AS_DOUBLE, vectorcall before 3.12).
# - manylinux2014 (glibc 2.17, x86_64): linked with zig (the ziglang wheel) against glibc 2.17's
#   symbols, without docker; maturin refuses a wheel whose symbols exceed the tag, and
#   `auditwheel show` then confirms each wheel's tag independently.
# - The tools (maturin, ziglang, auditwheel) are the `release` extra's pins in pyproject.toml,
#   installed into a build venv ($KQUOTA_BUILD_VENV, default build/release-venv) when it lacks them.
# - The Rust build goes to its own target directory (default rust/target/wheels-<profile>, or
#   $CARGO_TARGET_DIR/wheels-<profile> when that is set), so it does not invalidate the
#   development build's cache (different linker and flags).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

SUPPORTED="3.9 3.10 3.11 3.12 3.13"  # requires-python >=3.9; PyO3 0.30 supports 3.9-3.14
PROFILE=release
PYTHONS=""
OUT=dist
TARGET_DIR=""
SDIST=1
COMPAT=manylinux2014
EXPECT_TAG=manylinux_2_17_x86_64

usage() {
  cat <<EOF
usage: bash scripts/build-wheels.sh [--profile release|dev] [--python "3.9 3.10 ..."] [--out DIR]
                                    [--target-dir DIR] [--no-sdist]
  --profile     Cargo profile of the extension: release (the default; what a release ships) or dev
                (unoptimized, for tests of the packaging only)
  --python      the CPython versions to build for, each found as pythonX.Y on PATH (default: all
                supported: $SUPPORTED; a missing one is an error)
  --out         where the wheels and the sdist go (default: dist)
  --target-dir  Cargo target directory (default: \${CARGO_TARGET_DIR:-rust/target}/wheels-<profile>)
  --no-sdist    wheels only
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE="${2:?--profile needs a value}"; shift 2 ;;
    --python) PYTHONS="${2:?--python needs a value}"; shift 2 ;;
    --out) OUT="${2:?--out needs a value}"; shift 2 ;;
    --target-dir) TARGET_DIR="${2:?--target-dir needs a value}"; shift 2 ;;
    --no-sdist) SDIST=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build-wheels.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
case "$PROFILE" in
  release|dev) ;;
  *) echo "build-wheels.sh: --profile must be release or dev, got $PROFILE" >&2; exit 2 ;;
esac
PYTHONS="${PYTHONS:-$SUPPORTED}"
TARGET_DIR="${TARGET_DIR:-${CARGO_TARGET_DIR:-rust/target}/wheels-$PROFILE}"

# Every interpreter first: a release lacking one of the supported Pythons fails before building.
interpreters=()
for v in $PYTHONS; do
  case " $SUPPORTED " in
    *" $v "*) ;;
    *) echo "build-wheels.sh: Python $v is not supported (supported: $SUPPORTED)" >&2; exit 2 ;;
  esac
  py="$(command -v "python$v" || true)"
  if [ -z "$py" ] || ! "$py" -c 'import sys' 2>/dev/null; then
    echo "build-wheels.sh: no working python$v on PATH (install it; with pyenv, make every version visible: pyenv global 3.11 3.9 3.10 3.12 3.13, or PYENV_VERSION=...; or pass --python)" >&2
    exit 1
  fi
  interpreters+=("$py")
done

# The build tools: the release extra's pins, read from pyproject.toml.
BUILD_VENV="${KQUOTA_BUILD_VENV:-build/release-venv}"
SYSTEM_PYTHON="${KQUOTA_PYTHON:-python3}"
mapfile -t TOOLS < <("$SYSTEM_PYTHON" - <<'EOF'
import re
text = open("pyproject.toml", encoding="utf-8").read()
block = re.search(r'^release = \[(.*?)\]', text, re.M | re.S).group(1)
print("\n".join(re.findall(r'"([^"]+)"', block)))
EOF
)
[ -x "$BUILD_VENV/bin/python" ] || "$SYSTEM_PYTHON" -m venv "$BUILD_VENV"
BUILD_VENV="$(cd "$BUILD_VENV" && pwd)"
BPY="$BUILD_VENV/bin/python"
if ! "$BPY" - "${TOOLS[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for pin in sys.argv[1:]:
    name, _, want = pin.partition("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
then
  echo "== installing the build tools into $BUILD_VENV: ${TOOLS[*]}"
  "$BPY" -m pip install -q "${TOOLS[@]}"
fi

profile_args=(--release)
[ "$PROFILE" = release ] || profile_args=(--profile "$PROFILE")
mkdir -p "$OUT"
marker="$(mktemp)"  # wheels newer than this one are this run's
trap 'rm -f "$marker"' EXIT

echo "== wheels: $PROFILE profile, $COMPAT (zig), CPython $PYTHONS -> $OUT"
start=$(date +%s)
# maturin runs zig as `python -m ziglang` from its own environment: the build venv's bin first.
PATH="$BUILD_VENV/bin:$PATH" "$BPY" -m maturin build "${profile_args[@]}" --zig --compatibility "$COMPAT" \
  --auditwheel check --target-dir "$TARGET_DIR" --out "$OUT" -i "${interpreters[@]}"
echo "== built in $(( $(date +%s) - start )) s"
if [ "$SDIST" = 1 ]; then
  "$BPY" -m maturin sdist --out "$OUT"
fi

# Each new wheel: its tag, checked again by auditwheel itself.
status=0
while IFS= read -r whl; do
  report="$("$BUILD_VENV/bin/auditwheel" show "$whl" 2>&1)"
  if grep -q "consistent with the following platform tag: \"$EXPECT_TAG\"" <<<"$(tr -s ' \n' ' ' <<<"$report")"; then
    echo "ok: $(basename "$whl") ($EXPECT_TAG per auditwheel)"
  else
    echo "FAIL: $(basename "$whl"): auditwheel says:" >&2
    echo "$report" >&2
    status=1
  fi
done < <(find "$OUT" -maxdepth 1 -name '*.whl' -newer "$marker" | sort)
exit $status
