"""Whole-run compare throughput: `numprobe compare TARGET_ROOT GOLDEN_ROOT --workers N` on a
synthesised 8-rank run, statistics and tensor mode.

    python benches/peers/compare_ranks.py --numprobe BIN [--ranks 8] [--calls 2000]
        [--tensors 24] [--elems 1048576] [--workers 1,2] [--rounds 3] [--root DIR]

Each rank's dump has one step: `calls` API calls (statistics: two float32 inputs and one output
each, an all_reduce every 16 calls) and, in tensor mode, `tensors` calls whose three tensors of
`elems` float32 elements are .pt files (torch.save). The target is the golden run with relative
noise of 1e-6 on every value (every row has metrics to compute, none is bit-equal). Prints the
median wall time per worker count, bytes read per second (both sides' tensor files and dump.json)
and rows per second.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def record(t, data_name=None):
    r = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(t.shape),
         "Max": t.max().item(), "Min": t.min().item(), "Mean": t.mean().item(),
         "Norm": t.norm().item(), "requires_grad": False}
    if data_name:
        r["data_name"] = data_name
    return r


def make_rank(dir_, rank, calls, tensors, elems, noise, seed):
    os.makedirs(dir_, exist_ok=True)
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    tensor_mode = tensors > 0
    data_dir = os.path.join(dir_, "dump_tensor_data")
    if tensor_mode:
        os.makedirs(data_dir, exist_ok=True)
    data = {}
    n = tensors if tensor_mode else calls
    shape = (elems // 1024, 1024) if tensor_mode else (64, 64)
    for i in range(n):
        key = (f"Distributed.all_reduce.{i // 16}.forward" if i % 16 == 15
               else f"Torch.matmul.{i}.forward")
        ts = [torch.randn(*shape, generator=g) for _ in range(3)]
        if noise:
            ts = [t * (1 + noise * torch.randn(*shape, generator=g)) for t in ts]
        recs = []
        for j, t in enumerate(ts):
            part = "output.0" if j == 2 else f"input.{j}"
            name = f"{key}.{part}.pt" if tensor_mode else None
            if name:
                torch.save(t, os.path.join(data_dir, name))
            recs.append(record(t, name))
        data[key] = {"input_args": recs[:2], "input_kwargs": {}, "output": [recs[2]]}
    top = {"task": "tensor" if tensor_mode else "statistics", "level": "L1",
           "framework": "pytorch", "dump_data_dir": data_dir if tensor_mode else None,
           "data": data}
    with open(os.path.join(dir_, "dump.json"), "w") as f:
        json.dump(top, f)


def make_run(root, ranks, calls, tensors, elems, noise):
    for r in range(ranks):
        make_rank(os.path.join(root, "step0", f"rank{r}"), r, calls, tensors, elems, noise, 7)


def tree_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def time_compare(exe, tp, gp, out_root, workers, rounds):
    times = []
    for k in range(rounds):
        out = os.path.join(out_root, f"w{workers}_{k}")
        t0 = time.perf_counter()
        r = subprocess.run([exe, "compare", tp, gp, "--out", out, "--workers", str(workers),
                            "--exit-zero"], capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            sys.exit(f"compare failed ({r.returncode}): {r.stderr[-2000:]}")
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--numprobe", required=True)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--tensors", type=int, default=24)
    p.add_argument("--elems", type=int, default=1 << 20)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--root")
    a = p.parse_args()
    root = a.root or tempfile.mkdtemp(prefix="compare_ranks_")
    print(f"data under {root}")
    for mode, tensors in (("statistics", 0), ("tensor", a.tensors)):
        gp, tp = os.path.join(root, mode, "golden"), os.path.join(root, mode, "target")
        if not os.path.exists(gp):
            make_run(gp, a.ranks, a.calls, tensors, a.elems, 0.0)
            make_run(tp, a.ranks, a.calls, tensors, a.elems, 1e-6)
        nbytes = tree_bytes(gp) + tree_bytes(tp)
        rows = a.ranks * (tensors or a.calls) * 3
        for w in [int(x) for x in a.workers.split(",")]:
            ts = time_compare(a.numprobe, tp, gp, os.path.join(root, mode, "out"), w, a.rounds)
            med = statistics.median(ts)
            print(f"{mode}: {a.ranks} ranks, {nbytes / 1e6:.0f} MB, {rows} rows, workers {w}: "
                  f"{med:.2f} s (min {min(ts):.2f}, max {max(ts):.2f}), "
                  f"{nbytes / med / 1e6:.0f} MB/s, {rows / med:.0f} rows/s", flush=True)


if __name__ == "__main__":
    main()
