"""numprobe's capture overhead with bare and captured training steps interleaved in one
process: blocks of `--block` steps without the tool alternate with blocks under
PrecisionDebugger, on the same model, optimizer and data, and the first step of each block is
not counted (a captured run records every step, so its statistics cache starts each step warm;
after a bare block it would not). A machine whose speed drifts (a shared VM) moves both kinds
of block alike, which separate processes (capture_overhead.py) cannot guarantee.

usage: python benches/peers/capture_interleaved.py [--model big|tiny] [--pairs 8] [--block 3]
       [--warmup 1] [--config L1|mix|md5] [--threads 1]

Prints the median bare and captured step (wall and process CPU time) and the median over pairs
of blocks of the captured/bare ratio. After captured blocks the recorder's namespace wrappers
are removed, so bare steps run plain torch.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TESTDATA = os.path.realpath(os.environ.get("NUMPROBE_TESTDATA") or os.path.join(REPO, "testdata"))
SCRIPTS = os.path.join(TESTDATA, "fixtures", "msprobe-26.2.0-cpu", "scripts")

CONFIGS = {
    "L1": ("L1", "statistics"),
    "mix": ("mix", "statistics"),
    "md5": ("L1", "md5"),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="big")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--block", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--config", default="L1", choices=sorted(CONFIGS))
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    sys.path.insert(0, SCRIPTS)
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    from numprobe.pytorch import PrecisionDebugger, recorder, seed_all

    import models

    level, summary = CONFIGS[a.config]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump({"task": "statistics", "level": level, "dump_path": os.path.join(tmp, "d"),
                       "statistics": {"summary_mode": summary}}, f)
        seed_all(seed=1234)
        debugger = PrecisionDebugger(config_path=cfg)
        model, xs, ys = models.build(a.model, torch.float32, seed=1234)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step(i, captured):
            t0, c0 = time.perf_counter(), time.process_time()
            if captured:
                debugger.start(model=model)
            out = model(xs[i % len(xs)])
            loss = F.cross_entropy(out, ys[i % len(ys)])
            loss.backward()
            opt.step()
            opt.zero_grad()
            if captured:
                debugger.stop()
                debugger.step()
                # Bare steps run plain torch: the wrappers go back in at the next start().
                recorder._unpatch_namespaces()
            return time.perf_counter() - t0, time.process_time() - c0

        bare, cap, ratios = [], [], []
        i = 0
        for k in range(a.warmup + a.pairs):
            blocks = []
            for captured in (False, True):
                times = []
                for _ in range(a.block):
                    times.append(step(i, captured))
                    i += 1
                blocks.append(times[1:])
            if k >= a.warmup:
                bare += blocks[0]
                cap += blocks[1]
                ratios.append(statistics.median(t[0] for t in blocks[1])
                              / statistics.median(t[0] for t in blocks[0]))
    med = lambda xs, j: statistics.median(x[j] for x in xs)  # noqa: E731
    print(f"model {a.model}, config {a.config}, torch threads {a.threads}, {a.pairs} pairs of "
          f"{a.block}-step blocks; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"bare step {med(bare, 0) * 1e3:.1f} ms (CPU {med(bare, 1) * 1e3:.1f}), captured "
          f"{med(cap, 0) * 1e3:.1f} ms (CPU {med(cap, 1) * 1e3:.1f}); slowdown: median of block "
          f"ratios {statistics.median(ratios):.2f}x, ratio of medians "
          f"{med(cap, 0) / med(bare, 0):.2f}x, CPU {med(cap, 1) / med(bare, 1):.2f}x")


if __name__ == "__main__":
    main()
