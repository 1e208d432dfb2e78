"""Where a recorded training step's time goes, phase by phase: forward, backward, optimizer
(`step()` + `zero_grad()`), start() and stop()+step(), recorded (statistics L1, extra_info on)
against bare, in one process, round by round (bare steps run with the namespace wrappers set but
the debugger stopped, which costs nothing measurable: benches/RESULTS.md 2026-12-04). Per phase:
the bare and recorded medians, what recording adds, the entries the phase writes and the added
microseconds per entry. The entries come from the last step's dump.json, in recording order:
those before the first backward entry are the forward's, the backward entries the backward's,
the forward entries after them the optimizer's.

With a package built with the `stage-timers` feature (see capture_stages.py) each phase's stages
are printed too.

  python benches/peers/capture_phases.py [--workload llama] [--rounds 60] [--steps 4] [--threads 1]

Workloads: the tiny transformers models of capture/python_tests/hf_models.py (`llama`, `bert`,
`gpt2`, `vit`) or NAME:HIDDEN:LAYERS:SEQ:BATCH, as in capture_per_api.py.
"""
import argparse
import collections
import glob
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HF = os.path.join(HERE, "..", "..", "capture", "python_tests")
sys.path.insert(0, HERE)
from capture_per_api import recording_debugger  # noqa: E402  (the same debugger config)

PHASES = ("start", "forward", "backward", "optimizer", "stop+step")


def build(workload, threads):
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    sys.path.insert(0, HF)
    import hf_models

    name, *shape = workload.split(":")
    model, batch = hf_models.build(name, *(int(x) for x in shape))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, batch, opt


def entries_by_phase(dump):
    """Entries of the last step's dump.json per phase (see the module docs)."""
    steps = sorted(glob.glob(os.path.join(dump, "step*")),
                   key=lambda p: int(os.path.basename(p)[4:]))
    with open(glob.glob(os.path.join(steps[-1], "*", "dump.json"))[0]) as f:
        names = list(json.load(f)["data"])
    backward = [i for i, n in enumerate(names) if n.endswith(".backward")]
    if not backward:
        return {"forward": len(names), "backward": 0, "optimizer": 0}
    return {"forward": backward[0], "backward": len(backward),
            "optimizer": len(names) - backward[-1] - 1}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="llama")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    model, batch, opt = build(args.workload, args.threads)
    from numprobe import _native

    dump = tempfile.mkdtemp()
    dbg = recording_debugger(dump)
    clock = time.perf_counter

    def stages():
        return {n: ns for n, ns, _ in _native.stage_times()}

    times = {m: collections.defaultdict(list) for m in ("bare", "recorded")}
    stage_ms = collections.defaultdict(float)
    recorded_steps = 0
    for r in range(args.rounds + 1):
        for mode in ("bare", "recorded"):
            for i in range(args.steps):
                rec = mode == "recorded"
                t = [clock()]
                if rec:
                    dbg.start()
                s = [stages()]
                t.append(clock())
                loss = model(**batch).loss
                s.append(stages())
                t.append(clock())
                loss.backward()
                s.append(stages())
                t.append(clock())
                opt.step()
                opt.zero_grad()
                s.append(stages())
                t.append(clock())
                if rec:
                    dbg.stop()
                    dbg.step()
                t.append(clock())
                if r == 0 or i == 0:
                    continue  # warm-up round; the first step of a block follows the other mode
                for k, phase in enumerate(PHASES):
                    times[mode][phase].append(1e3 * (t[k + 1] - t[k]))
                if rec:
                    recorded_steps += 1
                    for k, phase in enumerate(PHASES[1:4]):
                        for n, ns in s[k + 1].items():
                            stage_ms[(phase, n)] += (ns - s[k].get(n, 0)) / 1e6
    entries = entries_by_phase(dump)
    print(f"{args.workload}, {args.threads} thread(s), {args.rounds} rounds x "
          f"{args.steps - 1} steps; median ms per step (wall)")
    print(f"  {'phase':10s} {'bare':>7s} {'recorded':>9s} {'added':>7s} {'entries':>8s} "
          f"{'us/entry':>9s}")
    total = [0.0, 0.0]
    for phase in PHASES:
        b = statistics.median(times["bare"][phase])
        rec = statistics.median(times["recorded"][phase])
        total[0] += b
        total[1] += rec
        n = entries.get(phase)
        per = f"{1e3 * (rec - b) / n:9.1f}" if n else f"{'':9s}"
        print(f"  {phase:10s} {b:7.3f} {rec:9.3f} {rec - b:7.3f} {n or '':>8} {per}")
    print(f"  {'sum':10s} {total[0]:7.3f} {total[1]:9.3f} {total[1] - total[0]:7.3f} "
          f"{sum(entries.values()):8d}   ({total[1] / total[0]:.2f}x)")
    if stage_ms:
        print("  stages per phase (ms per step):")
        for phase in PHASES[1:4]:
            row = [(n, ms / recorded_steps) for (ph, n), ms in sorted(stage_ms.items())
                   if ph == phase and ms > 0]
            print(f"    {phase:10s} " + ", ".join(f"{n} {ms:.3f}" for n, ms in row))


if __name__ == "__main__":
    main()
