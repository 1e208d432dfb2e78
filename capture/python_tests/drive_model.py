"""Runs the fixture's tiny model for N training steps under numprobe's PrecisionDebugger, the
same way testdata/fixtures/msprobe-26.2.0-cpu/scripts/pt_dump.py runs it under msprobe.

usage: python drive_model.py --config cfg.json --dump-path DIR [--steps 2] [--dtype float32]
       [--no-tool] [--model tiny|big] [--threads N] [--times-out FILE]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def testdata_dir():
    return os.path.realpath(os.environ.get("NUMPROBE_TESTDATA") or os.path.join(HERE, "..", "..", "testdata"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    p.add_argument("--dump-path")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--model", default="tiny")
    p.add_argument("--no-tool", action="store_true")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--times-out")
    a = p.parse_args()

    sys.path.insert(0, os.path.join(testdata_dir(), "fixtures", "msprobe-26.2.0-cpu", "scripts"))
    import torch
    import torch.nn.functional as F

    if a.threads:
        torch.set_num_threads(a.threads)
    debugger = None
    if not a.no_tool:
        from numprobe.pytorch import PrecisionDebugger, seed_all

        seed_all(seed=a.seed)
        debugger = PrecisionDebugger(config_path=a.config, dump_path=a.dump_path)
    else:
        torch.manual_seed(a.seed)
    import models

    model, xs, ys = models.build(a.model, getattr(torch, a.dtype), seed=a.seed)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times, cpu = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        c0 = time.process_time()
        if debugger is not None:
            debugger.start(model=model)
        out = model(xs[step % len(xs)])
        loss = F.cross_entropy(out, ys[step % len(ys)])
        loss.backward()
        opt.step()
        opt.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        print(f"step {step} loss {float(loss):.6f}", flush=True)
    if a.times_out:
        with open(a.times_out, "w") as f:
            # Wall and CPU (all threads of the process) seconds per step.
            json.dump({"wall": times, "cpu": cpu}, f)


if __name__ == "__main__":
    main()
