#!/usr/bin/env bash
# The wgpu statistics kernel and the (bench, device) pair kernel of the ULP and benchmark
# standards on a lent H200 (or any Vulkan GPU), in one run of under 5 minutes: GPU results
# checked against the CPU, a device-to-device copy as the bandwidth yardstick, and tables of
# GB/s, % of copy and % of the 4.8 TB/s datasheet: statistics for f32, f16 and bf16 at 1 GiB
# resident (kernel time from timestamp queries) plus tensors/second for batches of
# 4096-element tensors; the pair kernel for a 1 GiB float32 bench against f32, f16 and bf16
# device outputs (256 Mi elements, both inputs counted, resident, back-to-back dispatches).
#
#   benches/device/h200_stats.sh [--small] [PREBUILT_GPU_BANDWIDTH_BINARY] [extra gpu_bandwidth args...]
#
# --small: a few MiB and a debug build, for any adapter including lavapipe (checks the script
# and the kernels where no GPU is lent; its GB/s mean nothing).
#
# Without a binary argument it builds `gpu_bandwidth` (benches/examples) in release with cargo;
# without cargo on the machine, pre-build it elsewhere (same OS/glibc or older) and pass its path:
#   cargo build --release -p numprobe-benches --example gpu_bandwidth
#   -> $CARGO_TARGET_DIR/release/examples/gpu_bandwidth
# Output: stdout (the table), and the same in $OUT/h200_stats.txt when $OUT is set.
# Exit status: 0 all checks passed; 1 a check failed or the run broke; 2 no adapter.
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 1
small=0
if [[ "${1:-}" == "--small" ]]; then
    small=1
    shift
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
start=$(date +%s)
log() { echo "[h200_stats +$(( $(date +%s) - start ))s] $*" >&2; }

# 1. Vulkan loader and glvnd: without glvnd the NVIDIA ICD loads nothing and the adapter
#    request returns NotFound.
missing=()
for pkg in libvulkan1 libglvnd0 libglx0 libegl1; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive timeout 60 apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
        timeout 40 apt-get update >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive timeout 60 apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
            || log "WARNING: could not install ${missing[*]} (no package mirror?); trying anyway"
    fi
fi

# 2. The binary.
bin=""
if [[ $# -ge 1 && -f "$1" ]]; then
    bin="$1"
    shift
    chmod +x "$bin" 2>/dev/null || true
elif command -v cargo >/dev/null 2>&1; then
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
    if ((small)); then
        log "building gpu_bandwidth (debug)"
        profile=(); dir=debug
    else
        log "building gpu_bandwidth (release)"
        profile=(--release); dir=release
    fi
    if ! timeout 300 cargo build "${profile[@]}" -q -p numprobe-benches --example gpu_bandwidth; then
        log "cargo build failed or took too long; pass a prebuilt binary as \$1"
        exit 1
    fi
    bin="$CARGO_TARGET_DIR/$dir/examples/gpu_bandwidth"
else
    log "no cargo here and no prebuilt binary given: pass the path of a prebuilt gpu_bandwidth as \$1"
    exit 1
fi
log "binary: $bin"

# 3. An adapter: the loader's default search first, then the NVIDIA ICD where it hides.
probe() { timeout 60 "$bin" --probe; }
if ! probe; then
    for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
               /usr/share/vulkan/icd.d/nvidia_icd.json \
               /etc/vulkan/icd.d/nvidia_icd.json \
               $(timeout 20 find / -xdev -name 'nvidia_icd*.json' 2>/dev/null | head -5); do
        [[ -f "$icd" ]] || continue
        log "retrying with VK_DRIVER_FILES=$icd"
        export VK_DRIVER_FILES="$icd"
        probe && break
        unset VK_DRIVER_FILES
    done
    if [[ -z "${VK_DRIVER_FILES:-}" ]]; then
        log "no Vulkan adapter: is the NVIDIA driver's Vulkan ICD present? (nvidia-smi: $(nvidia-smi -L 2>&1 | head -1))"
        exit 2
    fi
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.memory --format=csv,noheader >&2

# 4. The measurement (about two minutes on an H200: 3 x 1 GiB of statistics data, 1 GiB of
#    bench with three device outputs, and their CPU references).
left=$(( 290 - ($(date +%s) - start) ))
(( left > 30 )) || left=30
log "running (limit ${left}s)"
out="${OUT:+$OUT/h200_stats.txt}"
if ((small)); then
    sizes=(--mib 8 --reps 3 --batch 64 --pair-mib 8)
else
    sizes=(--mib 1024 --reps 20 --batch 16384 --pair-mib 1024)
fi
if [[ -n "$out" ]]; then
    timeout "$left" "$bin" "${sizes[@]}" "$@" | tee "$out"
else
    timeout "$left" "$bin" "${sizes[@]}" "$@"
fi
status=${PIPESTATUS[0]}
log "done, status $status"
exit "$status"
