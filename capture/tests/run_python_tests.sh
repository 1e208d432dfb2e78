#!/usr/bin/env bash
# Builds and installs the numprobe Python package (capture/) into a Python environment and runs
# the PyTorch capture tests (capture/python_tests/) with pytest.
#
#   NUMPROBE_PYTHON   interpreter to use (default /var/cache/numprobe/venv/bin/python)
#   CARGO_TARGET_DIR  reused by maturin, so repeated builds are incremental
#   NUMPROBE_TESTDATA test data folder (default: the repository's testdata/)
#   extra arguments are passed to pytest (e.g. -k L1 -x)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
capture="$(dirname "$here")"
py="${NUMPROBE_PYTHON:-/var/cache/numprobe/venv/bin/python}"
bindir="$(dirname "$py")"
export PATH="$bindir:$PATH"

"$py" -m pip --version >/dev/null
"$py" -c "import maturin" 2>/dev/null || "$py" -m pip install "maturin>=1.5,<2"
"$py" -c "import pytest" 2>/dev/null || "$py" -m pip install pytest
# No build isolation: reuse the environment's maturin and the cargo target cache.
"$py" -m pip install --no-build-isolation --force-reinstall --no-deps "$capture"
cd "$(mktemp -d)"
exec "$py" -m pytest -q "$capture/python_tests" "$@"
