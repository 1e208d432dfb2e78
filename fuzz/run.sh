#!/usr/bin/env bash
# Fuzzes each reader for a bounded time: `bash fuzz/run.sh [SECONDS_PER_TARGET]`.
# cargo-fuzz wants nightly flags; RUSTC_BOOTSTRAP lets the one stable toolchain here accept them.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-30}"
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz@0.13.2
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${NUMPROBE_FUZZ_TARGET:-/var/cache/numprobe/fuzz-target}"
for t in dump_json npy pt recover_journal compare_dumps; do
  mkdir -p "corpus/$t"
  # Seed from the real msprobe files in the repository's test data.
  seeds=../testdata/fixtures
  if [ -d "$seeds" ] && [ -z "$(ls -A "corpus/$t")" ]; then
    case $t in
      dump_json) mapfile -t files < <(find "$seeds" -name '*.json' -size -64k) ;;
      npy) mapfile -t files < <(find "$seeds" -name '*.npy' -size -16k) ;;
      pt) mapfile -t files < <(find "$seeds" -name '*.pt' -size -16k) ;;
      # No journals in the test data: libFuzzer starts from nothing (and the target also
      # reads each input after today's magic).
      recover_journal) files=() ;;
      # One dump.json per seed: with no NUL byte in the input, the target is compared with itself.
      compare_dumps) mapfile -t files < <(find "$seeds" -name 'dump.json' -size -64k) ;;
    esac
    for f in "${files[@]:0:200}"; do cp "$f" "corpus/$t/$(echo "$f" | md5sum | cut -c1-16)"; done
  fi
  echo "fuzzing $t for ${secs}s"
  cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536
done
