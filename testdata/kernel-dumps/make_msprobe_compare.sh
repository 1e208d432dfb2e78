#!/usr/bin/env bash
# Records msprobe 26.2's graph-mode compare (`msprobe compare --rank`) of the kernel-dump pairs
# here into msprobe-compare/{pair}/: the reference numprobe's kernel compare is checked against.
# Run with the MindSpore venv's msprobe (MindSpore 2.7.1, numpy 1.26, pandas 2.3):
#   MSPROBE=/var/cache/numprobe/venv-ms/bin/msprobe bash make_msprobe_compare.sh
# or, where MindSpore is not installed, with a Python holding msprobe 26.2 (numpy<2, pandas<3):
#   MSPROBE_PYTHON=/path/to/python bash make_msprobe_compare.sh
# which runs the same comparator through msprobe_graph_compare.py.
# The tables name files by absolute path; the recorded copies name them relative to this folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
msprobe="${MSPROBE:-/var/cache/numprobe/venv-ms/bin/msprobe}"
for pair in "net_f32_noisy net_f32" "net_f16 net_f32" "stat_f32_noisy stat_f32" "stat_f16 stat_f32"; do
  set -- $pair
  out="$here/msprobe-compare/$1-vs-$2"
  rm -rf "$out" && mkdir -p "$out"
  if [ -n "${MSPROBE_PYTHON:-}" ]; then
    "$MSPROBE_PYTHON" "$here/msprobe_graph_compare.py" "$here/$1" "$here/$2" "$out" 0 >/dev/null 2>&1
  else
    PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python "$msprobe" compare \
      -tp "$here/$1" -gp "$here/$2" -o "$out" --rank 0 >/dev/null 2>&1
  fi
  for f in "$out"/compare_result_*.csv; do
    # compare_result_{rank}_{step}_{timestamp}.csv -> compare_result_{rank}_{step}.csv
    base="$(basename "$f" .csv)"
    sed "s#$here/##g" "$f" > "$out/${base%_*}.csv"
    rm "$f"
  done
done
