#!/usr/bin/env python3
"""msprobe's own numpy accuracy metrics against numprobe's fused pass, on the same arrays.

For each device dtype the script builds a benchmark/device pair the way run_ut does (fp32
device -> float64 benchmark; fp16/bf16 device -> float32 benchmark), times msprobe 26.2.0's
BenchmarkCompare + UlpCompare (the numpy code of acc_check's benchmark and ULP standards),
writes the arrays raw, runs the Rust example `ulp_peer` on them (in-process time of
`ulp::all_metrics`, which computes every standard at once, best of its repeats) and prints the
ratio, plus both sides' metric texts so the results can be compared.

Usage (msprobe installed in the venv; numpy<2):
  cargo build --release -p ulp --example ulp_peer
  python benches/peers/ulp_msprobe.py --mi 64 --example $CARGO_TARGET_DIR/release/examples/ulp_peer
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from msprobe.pytorch.api_accuracy_checker.compare.compare_column import CompareColumn
from msprobe.pytorch.api_accuracy_checker.compare.compare_input import CompareInput
from msprobe.pytorch.api_accuracy_checker.precision_standard.benchmark_compare import BenchmarkCompare
from msprobe.pytorch.api_accuracy_checker.precision_standard.ulp_compare import UlpCompare

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def msprobe_metrics(bench, device, dtype):
    col = CompareColumn()
    inp = CompareInput(bench, device, col, TORCH[dtype])
    BenchmarkCompare(inp).compare()
    UlpCompare(inp).compare()
    return col


def make(dtype, n, rng):
    """(bench, device) as numpy arrays, in the dtypes run_ut hands to its metrics."""
    x = rng.standard_normal(n)
    noise = rng.standard_normal(n) * 1e-3
    if dtype == "float32":
        bench = x
        device = (x * (1 + noise)).astype(np.float32)
    elif dtype == "float16":
        bench = x.astype(np.float32)
        device = (x * (1 + noise)).astype(np.float16)
    else:  # bfloat16 values carried as float32
        bench = x.astype(np.float32)
        d = torch.from_numpy((x * (1 + noise)).astype(np.float32)).to(torch.bfloat16)
        device = d.to(torch.float32).numpy()
    return bench, device


def best_of(fn, repeats):
    """(best wall seconds, mean CPU seconds) over the repeats."""
    best = float("inf")
    cpu0 = time.process_time()
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best, (time.process_time() - cpu0) / repeats


def default_example():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "target")
    return os.path.join(target, "release", "examples", "ulp_peer")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mi", type=int, default=64, help="elements in Mi (default 64)")
    ap.add_argument("--dtypes", default="float32,float16,bfloat16")
    ap.add_argument("--example", default=default_example(), help="path of the ulp_peer binary")
    ap.add_argument("--repeats", type=int, default=1, help="msprobe repeats (default 1)")
    ap.add_argument("--rust-repeats", type=int, default=5, help="numprobe repeats (default 5)")
    args = ap.parse_args()
    if not os.path.exists(args.example):
        sys.exit(f"{args.example} not found; build it with `cargo build --release -p ulp --example ulp_peer`")
    np.seterr(all="ignore")
    rng = np.random.default_rng(0)
    n = args.mi * (1 << 20)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes.split(","):
            bench, device = make(dtype, n, rng)
            col = None

            def run_msprobe():
                nonlocal col
                col = msprobe_metrics(bench, device, dtype)

            ms_s, ms_cpu = best_of(run_msprobe, args.repeats)
            bpath, dpath = os.path.join(tmp, "bench.raw"), os.path.join(tmp, "device.raw")
            bench.tofile(bpath)
            device.tofile(dpath)
            out = subprocess.run([args.example, bpath, str(bench.dtype), dpath, dtype, str(args.rust_repeats)],
                                 check=True, capture_output=True, text=True)
            rs = json.loads(out.stdout.strip().splitlines()[-1])
            ms = {k: getattr(col, k) for k in
                  ("small_value_err_ratio", "max_rel_error", "mean_rel_error", "rmse", "eb",
                   "max_ulp_error", "mean_ulp_error", "ulp_error_proportion")}
            rows.append({"dtype": dtype, "n": n, "msprobe_s": ms_s, "msprobe_cpu_s": ms_cpu, "numprobe": rs,
                         "msprobe": {k: float(v) for k, v in ms.items()}})
            del bench, device

    print(f"{'device':9} {'elements':>10} {'msprobe wall':>13} {'numprobe wall':>14} {'x (wall)':>9} "
          f"{'msprobe cpu':>12} {'numprobe cpu':>13} {'x (cpu)':>8}  threads")
    for r in rows:
        rs = r["numprobe"]
        ratio = r["msprobe_s"] / rs["fused_s"]
        cpu = rs.get("fused_cpu_s") or float("nan")
        cpu_ratio = r["msprobe_cpu_s"] / cpu if cpu > 0 else float("nan")
        print(f"{r['dtype']:9} {r['n']:10d} {r['msprobe_s']:12.3f}s {rs['fused_s']:13.4f}s {ratio:8.1f}x "
              f"{r['msprobe_cpu_s']:11.3f}s {cpu:12.4f}s {cpu_ratio:7.1f}x  {rs['threads']}")
        for k, v in r["msprobe"].items():
            got = float(rs[k]) if k in rs else float("nan")
            same = got == v or (abs(got - v) <= 1e-6 * abs(v)) or (got != got and v != v)
            print(f"    {k:22} msprobe {v!r:>24}  numprobe {rs.get(k, '-'):>24}{'' if same else '   <- differs'}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
