#!/usr/bin/env bash
# Builds and installs the numprobe Python package (capture/) into the MindSpore environment and
# runs the MindSpore capture tests (capture/python_tests_ms/) with pytest; msprobe in the same
# environment is the peer.
#
#   NUMPROBE_MS_PYTHON  interpreter to use (default /var/cache/numprobe/venv-ms/bin/python)
#   CARGO_TARGET_DIR    reused by maturin and cargo, so repeated builds are incremental
#   NUMPROBE_BIN        the numprobe CLI (default: built here with `cargo build -p numprobe`)
#   NUMPROBE_TESTDATA   test data folder (default: the repository's testdata/)
#   NUMPROBE_MS_JOBS    MindSpore runs started at once (default 3)
#   extra arguments are passed to pytest (e.g. -k mix -x)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
capture="$(dirname "$here")"
repo="$(dirname "$capture")"
py="${NUMPROBE_MS_PYTHON:-/var/cache/numprobe/venv-ms/bin/python}"
bindir="$(dirname "$py")"
export PATH="$bindir:$PATH"

"$py" -m pip --version >/dev/null
"$py" -c "import mindspore, msprobe" >/dev/null 2>&1 || {
  echo "error: $py cannot import mindspore and msprobe (run .ci/setup-mindspore)" >&2; exit 1; }
"$py" -c "import maturin" 2>/dev/null || "$py" -m pip install "maturin>=1.5,<2"
"$py" -c "import pytest" 2>/dev/null || "$py" -m pip install pytest
# No build isolation: reuse the environment's maturin and the cargo target cache.
"$py" -m pip install -q --no-build-isolation --force-reinstall --no-deps "$capture"
if [ -z "${NUMPROBE_BIN:-}" ]; then
  (cd "$repo" && cargo build -q -p numprobe)
  NUMPROBE_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/numprobe"
fi
export NUMPROBE_BIN
cd "$(mktemp -d)"
exec "$py" -m pytest -q "$capture/python_tests_ms" "$@"
