#!/usr/bin/env python3
"""Two builds of numprobe side by side, in one run: the figures a refactoring must keep.

Times, for a BEFORE and an AFTER build (interleaved round by round, so a machine whose load
drifts moves both alike):

* stats CLI: the whole process `numprobe stats FILE` on a float32 and a float16 `.npy` and a
  bfloat16 `.pt` (written here; the `.pt` needs torch in the Python running this script);
* fused metrics pass: `fused_speed time` (ns per element, one thread, benchmark standard);
* compare: `bigpair GB DIR` (tensor-mode compare of a generated pair, GB/s);
* capture: `capture_overhead.py --configs L1 --no-msprobe` with each build's Python
  environment (step-time slowdown over the bare step, paired per round).

Each target directory is a cargo target dir with release builds of the binary and examples:

    CARGO_TARGET_DIR=T cargo build --release -p numprobe --bin numprobe \\
        -p ulp --example fused_speed -p compare --example bigpair

usage: before_after.py --before T1 --after T2 [--before-python P1 --after-python P2]
                       [--after-stats-args "--exactness rounded"] [--measures stats,capture]
                       [--rounds 3] [--mib 256] [--bigpair-gb 2] [--model tiny]

--after-stats-args: arguments the AFTER build's `stats` needs to compute what BEFORE computed
(when a default changed); its own default is then timed too, in a row of its own.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def best_wall(cmd, repeats, env=None):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        best = min(best, time.perf_counter() - t)
    return best


def stats_inputs(tmp, mib):
    n = mib * (1 << 20) // 4
    rng = np.random.default_rng(7)
    x = rng.standard_normal(n, dtype=np.float32)
    files = {}
    files["f32"] = os.path.join(tmp, "f32.npy")
    np.save(files["f32"], x)
    files["f16"] = os.path.join(tmp, "f16.npy")
    np.save(files["f16"], x.astype(np.float16))
    try:
        import torch

        files["bf16"] = os.path.join(tmp, "bf16.pt")
        torch.save(torch.from_numpy(x).to(torch.bfloat16), files["bf16"])
    except ImportError:
        print("torch not importable here: no bfloat16 row", file=sys.stderr)
    return files


def fused_ns(target):
    env = dict(os.environ, FUSED_SPEED_THREADS="1")
    out = subprocess.run([os.path.join(target, "release/examples/fused_speed"), "time", "4", "5"],
                         check=True, capture_output=True, text=True, env=env).stdout
    for line in out.splitlines():
        if "Benchmark" in line:
            vals = re.findall(r"(fp32|fp16|bf16) ([0-9.]+)", line)
            return {k: float(v) for k, v in vals}
    raise RuntimeError(f"no Benchmark line in fused_speed output:\n{out}")


def bigpair_gbs(target, gb, tmp):
    d = tempfile.mkdtemp(dir=tmp)
    out = subprocess.run([os.path.join(target, "release/examples/bigpair"), str(gb), d],
                         check=True, capture_output=True, text=True).stdout
    subprocess.run(["rm", "-rf", d], check=True)
    m = re.search(r"in ([0-9.]+)s: ([0-9.]+) GB/s", out)
    if not m:
        raise RuntimeError(f"unexpected bigpair output:\n{out}")
    return float(m.group(2))


def capture_x(python, model):
    out = subprocess.run([python, os.path.join(HERE, "capture_overhead.py"), "--model", model,
                          "--configs", "L1", "--no-msprobe", "--json"],
                         check=True, capture_output=True, text=True).stdout
    res = json.loads(out[out.index("{"):])
    return res["configs"]["L1"]["numprobe_paired_x"], res["baseline_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--before-python")
    ap.add_argument("--after-python")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=256, help="size of the float32 input")
    ap.add_argument("--bigpair-gb", type=int, default=2)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--measures", default="stats,fused,bigpair,capture",
                    help="which measures to take (comma-separated subset)")
    ap.add_argument("--after-stats-args", default="",
                    help="extra `stats` arguments for AFTER to match BEFORE's computation")
    a = ap.parse_args()
    measures = set(a.measures.split(","))
    builds = {"before": a.before, "after": a.after}
    pythons = {"before": a.before_python, "after": a.after_python}
    res = {}

    def add(key, build, value):
        res.setdefault(key, {}).setdefault(build, []).append(value)

    load = []
    with tempfile.TemporaryDirectory() as tmp:
        files = stats_inputs(tmp, a.mib) if "stats" in measures else {}
        for r in range(a.rounds):
            # Alternate which build goes first, so neither always runs on a warmer cache.
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for b in order:
                bin_ = os.path.join(builds[b], "release/numprobe")
                extra = a.after_stats_args.split() if b == "after" else []
                for dt, f in files.items() if "stats" in measures else []:
                    add(f"stats CLI {dt}, {a.mib // 4} Mi elements (s)", b,
                        best_wall([bin_, "stats", f, *extra], 3))
                    if extra:
                        add(f"stats CLI {dt}, {a.mib // 4} Mi elements, AFTER's default (s)",
                            b, best_wall([bin_, "stats", f], 3))
                for dt, ns in fused_ns(builds[b]).items() if "fused" in measures else []:
                    add(f"fused metrics {dt} device (ns/elem, 1 thread)", b, ns)
                if "bigpair" in measures:
                    add(f"compare bigpair {a.bigpair_gb} GB (GB/s)", b,
                        bigpair_gbs(builds[b], a.bigpair_gb, tmp))
                if pythons[b] and "capture" in measures:
                    x, _ = capture_x(pythons[b], a.model)
                    add(f"capture L1 {a.model} model (slowdown, paired)", b, x)
                load.append(os.getloadavg()[0])
    print(f"{a.rounds} rounds, load average {min(load):.1f}-{max(load):.1f}; medians (min-max)")
    print("| measure | before | after | after/before |")
    print("|---|---|---|---|")
    span = lambda v: f"{statistics.median(v):.3g} ({min(v):.3g}-{max(v):.3g})"  # noqa: E731
    for key, by in res.items():
        if "before" not in by:
            print(f"| {key} | — | {span(by['after'])} | — |")
            continue
        mb, ma = statistics.median(by["before"]), statistics.median(by["after"])
        print(f"| {key} | {span(by['before'])} | {span(by['after'])} | {ma / mb:.3f} |")


if __name__ == "__main__":
    main()
