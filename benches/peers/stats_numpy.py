#!/usr/bin/env python3
"""numpy's four statistics calls against numprobe's fused CPU pass, in one run.

For each dtype (float32, float16, bfloat16) the script makes the same kind of data in numpy,
writes it raw to a temporary file, times np.max, np.min, np.mean and np.linalg.norm (the four
calls msprobe's numpy path makes), then runs the Rust example `stats_throughput` on the file
(in-process time of stats_gpu::fast, best of its repeats) and prints a ratio table.

bfloat16 needs ml_dtypes (numpy has no bf16); without it that row is skipped.
If `--numprobe BIN` is given and `BIN stats FILE` works, the whole process is timed as well,
against np.load + the four calls.

Usage:
  cargo build --release -p numprobe-benches --example stats_throughput
  python benches/peers/stats_numpy.py --mib 256 \
      --example $CARGO_TARGET_DIR/release/examples/stats_throughput
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np


def best_of(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def four_calls(a):
    return (np.max(a), np.min(a), np.mean(a), np.linalg.norm(a))


def make(dtype_name, n, rng):
    x = rng.standard_normal(n, dtype=np.float32)
    if dtype_name == "f32":
        return x
    if dtype_name == "f16":
        return x.astype(np.float16)
    import ml_dtypes  # noqa: PLC0415 (optional dependency)

    return x.astype(ml_dtypes.bfloat16)


def default_example():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "target"
    )
    return os.path.join(target, "release", "examples", "stats_throughput")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256, help="tensor size in MiB (default 256)")
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--example", default=default_example(), help="path of the stats_throughput binary")
    ap.add_argument("--numprobe", default=None, help="numprobe binary, to time `numprobe stats FILE`")
    ap.add_argument("--repeats", type=int, default=3, help="numpy repeats for float32 (half types: 1)")
    args = ap.parse_args()

    if not os.path.exists(args.example):
        sys.exit(f"{args.example} not found; build it with "
                 "`cargo build --release -p numprobe-benches --example stats_throughput`")
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.dtypes.split(","):
            itemsize = 4 if name == "f32" else 2
            n = args.mib * (1 << 20) // itemsize
            try:
                a = make(name, n, rng)
            except ImportError:
                print(f"skipping {name}: ml_dtypes is not installed", file=sys.stderr)
                continue
            path = os.path.join(tmp, f"{name}.bin")
            a.tofile(path)
            reps = args.repeats if name == "f32" else 1
            np_s = best_of(lambda: four_calls(a), reps)
            out = subprocess.run([args.example, name, path, "5"], check=True, capture_output=True, text=True)
            rs = json.loads(out.stdout.strip().splitlines()[-1])
            row = {"dtype": name, "mib": args.mib, "numpy_four_calls_s": np_s, **rs}
            if args.numprobe and (shutil.which(args.numprobe) or os.path.exists(args.numprobe)):
                npy = os.path.join(tmp, f"{name}.npy")
                if name != "bf16":
                    np.save(npy, a)
                    row["numpy_load_and_four_s"] = best_of(lambda: four_calls(np.load(npy)), reps)
                    row["numprobe_process_s"] = best_of(
                        lambda: subprocess.run([args.numprobe, "stats", npy], check=True, capture_output=True), 3)
            rows.append(row)
            del a

    print(f"{'dtype':5} {'MiB':>5} {'numpy 4 calls':>14} {'fast':>10} {'fast GB/s':>10} "
          f"{'1-core read':>12} {'x numpy':>8} {'% read bw':>9} {'ref GB/s':>9}")
    for r in rows:
        ratio = r["numpy_four_calls_s"] / r["fast_s"]
        bw = 100.0 * r["fast_gbps"] / r["read_1core_gbps"]
        print(f"{r['dtype']:5} {r['mib']:5} {r['numpy_four_calls_s']:13.4f}s {r['fast_s']:9.4f}s "
              f"{r['fast_gbps']:10.2f} {r['read_1core_gbps']:10.2f}GB/s {ratio:7.1f}x {bw:8.0f}% "
              f"{r['reference_gbps']:9.2f}")
        if "numprobe_process_s" in r:
            print(f"      whole process: numprobe stats {r['numprobe_process_s']:.4f}s vs np.load+4 calls "
                  f"{r['numpy_load_and_four_s']:.4f}s ({r['numpy_load_and_four_s'] / r['numprobe_process_s']:.1f}x)")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
