#!/usr/bin/env bash
# Records msprobe 26.2's graph-mode compare of the kernel-dump pairs here into
# msprobe-compare/{pair}/: the reference numprobe's kernel compare is checked against. It runs
# msprobe's own CLI, with real MindSpore, in the MindSpore venv .ci/setup builds (MindSpore 2.7.1
# CPU, msprobe 26.2, numpy 1.26.4, pandas 2.3.3):
#   bash testdata/kernel-dumps/make_msprobe_compare.sh
# (MSPROBE=/path/to/msprobe picks another msprobe executable). For each pair it runs
#   msprobe compare -tp TARGET -gp GOLDEN -o OUT --rank 0
# (`--rank` selects msprobe's graph-mode comparator; tensor mode from the .npy files, statistics
# mode from statistic.csv). The tables name files by absolute path and carry a timestamp in
# their names; the recorded copies name files relative to this folder and drop the timestamp.
# The l2norm cells of tensor mode come from numpy's BLAS dot product, whose summation order
# depends on the CPU's OpenBLAS kernel, so they may differ in the last bit between machines.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
msprobe="${MSPROBE:-/var/cache/numprobe/venv-ms/bin/msprobe}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for pair in "net_f32_noisy net_f32" "net_f16 net_f32" "stat_f32_noisy stat_f32" "stat_f16 stat_f32"; do
  set -- $pair
  out="$here/msprobe-compare/$1-vs-$2"
  rm -rf "$out" && mkdir -p "$out"
  # MindSpore 2.7.1's generated protobuf modules need the pure-Python protobuf runtime.
  if ! PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python "$msprobe" compare \
      -tp "$here/$1" -gp "$here/$2" -o "$out" --rank 0 >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
  n=0
  for f in "$out"/compare_result_*.csv; do
    [ -e "$f" ] || { cat "$log" >&2; echo "msprobe wrote no table for $1 vs $2" >&2; exit 1; }
    # compare_result_{rank}_{step}_{timestamp}.csv -> compare_result_{rank}_{step}.csv
    base="$(basename "$f" .csv)"
    sed "s#$here/##g" "$f" > "$out/${base%_*}.csv"
    rm "$f"
    n=$((n + 1))
  done
  echo "$1 vs $2: $n tables"
done
