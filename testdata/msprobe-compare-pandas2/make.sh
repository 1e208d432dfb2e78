#!/bin/sh
# Regenerates l1_statistics_self.csv: msprobe 26.2.0 (pandas 2.3.3, the peer venv of .ci/setup)
# comparing the H200 l1_statistics fixture with itself. Run from this folder.
set -e
venv=${VENV:-/var/cache/numprobe/venv}
dump=../fixtures/msprobe-26.2.0-torch-h200/l1_statistics/dump_path/step0/proc503/dump.json
out=$(mktemp -d)
"$venv/bin/msprobe" compare -tp "$dump" -gp "$dump" -o "$out"
mv "$out"/compare_result_*.csv l1_statistics_self.csv
rm -r "$out"
