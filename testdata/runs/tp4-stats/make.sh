#!/usr/bin/env bash
# Regenerates golden/ and target/: capture/python_tests/dist_model.py under msprobe 26.2.0 (the
# venv .ci/setup makes), 4 gloo processes, 2 steps, L1 statistics; target/ with rank 1's input
# of the row-parallel linear nudged (--perturb-rank 1), so the all_reduce carries the difference
# to ranks 0, 2 and 3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${NUMPROBE_VENV:-/var/cache/numprobe/venv}/bin/python"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for name in golden target; do
  pr=-1; [ "$name" = target ] && pr=1
  cat > "$tmp/$name.json" <<JSON
{"task": "statistics", "dump_path": "$tmp/$name", "rank": [], "step": [], "level": "L1",
 "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
JSON
  (cd "$tmp" && "$py" "$here/../../../capture/python_tests/dist_model.py" msprobe "$tmp/$name.json" 4 \
    $((29500 + RANDOM % 1000)) --perturb-rank "$pr")
  rm -rf "${here:?}/$name" && cp -r "$tmp/$name" "$here/$name"
done
