#!/usr/bin/env bash
# Regenerates msprobe-stat_mix_bf16_vs_f32.json: msprobe 26.2.0's `graph_visualize` on the
# fixtures pt_tiny_bf16_stat_mix (target) vs pt_tiny_f32_stat_mix (golden), step 0, dumped
# canonically by canon.py. Needs the venv .ci/setup makes (mindstudio-probe 26.2.0).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${NUMPROBE_VENV:-/var/cache/numprobe/venv}"
fx="$here/../fixtures/msprobe-26.2.0-cpu"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$venv/bin/msprobe" graph_visualize \
  -tp "$fx/pt_tiny_bf16_stat_mix/dump/step0/proc28387" \
  -gp "$fx/pt_tiny_f32_stat_mix/dump/step0/$(ls "$fx/pt_tiny_f32_stat_mix/dump/step0")" \
  -o "$out" >/dev/null 2>&1
"$venv/bin/python" "$here/canon.py" "$out"/compare_*.vis.db > "$here/msprobe-stat_mix_bf16_vs_f32.json"
