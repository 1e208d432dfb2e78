"""What judging costs on top of re-executing: numprobe's run_ut replay of one dump, timed
bare (inputs built, golden and device runs, backward, no metrics and no CSV) and in full
(the same plus the Rust metrics per output and the CSV records).

usage: python benches/peers/run_ut_overhead.py [--api-info DUMP.json] [--repeat 5] [--scale N]

Without --api-info it uses the fixture dump pt_tiny_f32_tensor_L1 (step0) from ../shared.
--scale N > 1 builds a statistics-mode copy of that dump with every dimension of size >= 8
multiplied by N (random inputs within Min/Max), to see the ratio when torch's kernels dominate.
Prints the times and the ratio full / bare (the goal: metrics add < 10%).
"""
import argparse
import glob
import json
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def default_dump():
    shared = os.environ.get("NUMPROBE_SHARED") or os.path.join(REPO, "..", "shared")
    pattern = os.path.join(shared, "fixtures", "msprobe-26.2.0-cpu", "pt_tiny_f32_tensor_L1", "dump", "step0",
                           "*", "dump.json")
    found = glob.glob(pattern)
    if not found:
        sys.exit(f"no dump at {pattern}; pass --api-info")
    return found[0]


def scaled_copy(path, factor, folder):
    """A statistics-mode copy of the dump with larger tensors (same Min/Max, no tensor files)."""
    with open(path) as f:
        dump = json.load(f)

    def walk(v):
        if isinstance(v, dict):
            if v.get("type") == "torch.Tensor" and isinstance(v.get("shape"), list):
                v = dict(v)
                v.pop("data_name", None)
                v["shape"] = [d * factor if d >= 8 else d for d in v["shape"]]
                return v
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    # Only APIs whose shapes stay consistent when every large dimension grows alike.
    keep = ("linear", "matmul", "layer_norm", "gelu", "softmax", "__add__", "__mul__", "relu")
    data = {k: walk(v) for k, v in dump["data"].items() if any(f".{a}." in k for a in keep)}
    dump.update(task="statistics", dump_data_dir=None, data=data)
    out = os.path.join(folder, "dump.json")
    with open(out, "w") as f:
        json.dump(dump, f)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api-info")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--scale", type=int, default=1)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1 keeps the figure steady on a shared machine)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)

    from numprobe.pytorch.run_ut import Job, Timer
    from numprobe.pytorch.run_ut.dump import load_api_info

    path = a.api_info or default_dump()
    tmp = tempfile.TemporaryDirectory()
    if a.scale > 1:
        path = scaled_copy(path, a.scale, tmp.name)
    forward, backward, tensor_dir = load_api_info(path)
    job = Job(forward, backward, tensor_dir, [], [])
    names = list(forward)

    def bare():
        timer = Timer()
        for n in names:
            job.run_one(n, timer=timer, judge=False)
        return timer

    def full():
        timer = Timer()
        for n in names:
            job.run_one(n, timer=timer).lines()
        return timer

    full()  # warm-up: imports, allocator, file cache
    # Process CPU time, not wall time: other processes on a shared machine then add little.
    bare_s, full_s, split = [], [], []
    for _ in range(a.repeat):
        t0 = time.process_time()
        bare()
        bare_s.append(time.process_time() - t0)
        t0 = time.process_time()
        tf = full()
        full_s.append(time.process_time() - t0)
        split.append(tf.judge / tf.execute)
    b, f = min(bare_s), min(full_s)
    print(f"dump: {path} ({len(names)} APIs, scale {a.scale}, torch threads {torch.get_num_threads()})")
    split.sort()
    print(f"bare re-execution : {b * 1e3:9.1f} ms CPU (min of {a.repeat})")
    print(f"full replay       : {f * 1e3:9.1f} ms CPU")
    print(f"ratio full / bare : {f / b:.3f}  (metrics and CSV add {100 * (f / b - 1):+.1f}%)")
    print(f"within the full runs, judging / executing each API: median {100 * split[len(split) // 2]:.1f}%")


if __name__ == "__main__":
    main()
