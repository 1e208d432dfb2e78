"""Where a recorded step's time goes, stage by stage of numprobe's native call path (statistics
L1, extra_info on): the per-step milliseconds of each stage of a recorded API call, of the
backward hooks, of start() and stop()+step(), and what is left outside them (the namespace
wrappers, torch's dunder slots reaching them, autograd calling the hooks).

Needs the package built with the `stage-timers` feature, which times each stage with two clock
reads (≈ 40 ns a stage, so a few percent on the recorded step):

  CARGO_TARGET_DIR=... MATURIN_PEP517_ARGS="--features stage-timers" \\
      pip install --no-deps --no-build-isolation --target /tmp/np-stages ./capture
  PYTHONPATH=/tmp/np-stages python benches/peers/capture_stages.py [--workload llama] \\
      [--steps 100] [--threads 1]

Workloads as in capture_per_api.py: `ops` (200 small ops), `inplace` (an optimizer's in-place
updates of 256 KiB tensors), `llama`/`bert`/`gpt2`/`vit` (the tiny transformers models of
capture/python_tests/hf_models.py, forward, backward, AdamW) or NAME:HIDDEN:LAYERS:SEQ:BATCH.
The bare step is timed in a process of its own first.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from capture_per_api import build_step, recording_debugger  # noqa: E402  (the same workloads)

LABELS = {
    "head": "counter, entry name, call-site key",
    "input_walk": "inputs walked, records written (statistics included)",
    "input_commit": "input entry journaled, merged",
    "stack_record": "new call site's frames; device readback",
    "run": "the API itself",
    "output_walk": "outputs walked, records written (statistics included)",
    "output_commit": "output entry journaled, merged",
    "hook_register": "grad_fn looked up, backward hook registered",
    "backward_hook": "backward hooks (gradients walked, committed)",
    "statistics": "of which statistics and records (inside the walks)",
}


def bare(args):
    step = build_step(args.workload, args.threads)
    for _ in range(10):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    print(json.dumps({"bare_ms": 1e3 * (time.perf_counter() - t0) / args.steps}))


def recorded(args):
    step = build_step(args.workload, args.threads)
    from numprobe import _native

    dbg = recording_debugger(tempfile.mkdtemp())
    for _ in range(10):
        dbg.start()
        step()
        dbg.stop()
        dbg.step()
    if not _native.stage_times():
        sys.exit("numprobe was built without the stage-timers feature (see this script's usage)")
    parts = [0.0, 0.0, 0.0]
    for _ in range(args.steps):
        a = time.perf_counter()
        dbg.start()
        b = time.perf_counter()
        step()
        c = time.perf_counter()
        dbg.stop()
        dbg.step()
        d = time.perf_counter()
        parts[0] += b - a
        parts[1] += c - b
        parts[2] += d - c
    stages = {n: (ns, laps) for n, ns, laps in _native.stage_times()}
    print(json.dumps({"start_ms": 1e3 * parts[0] / args.steps,
                      "body_ms": 1e3 * parts[1] / args.steps,
                      "stop_step_ms": 1e3 * parts[2] / args.steps, "stages": stages}))


def child(args, role):
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--workload",
           args.workload, "--steps", str(args.steps), "--threads", str(args.threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{role} run failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="llama")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--role", choices=("main", "bare", "recorded"), default="main")
    args = p.parse_args()
    if args.role == "bare":
        return bare(args)
    if args.role == "recorded":
        return recorded(args)
    b = child(args, "bare")
    r = child(args, "recorded")
    n = args.steps
    per_step = {k: ns / n / 1e6 for k, (ns, _) in r["stages"].items()}
    calls = r["stages"]["run"][1] / n
    print(f"{args.workload}, {args.threads} thread(s): bare step {b['bare_ms']:.2f} ms; "
          f"recorded: start {r['start_ms']:.2f}, body {r['body_ms']:.2f}, "
          f"stop+step {r['stop_step_ms']:.2f} ms; {calls:.0f} recorded calls per step")
    print(f"  {'stage':15s} {'ms/step':>8s} {'us/lap':>8s}  what")
    for k, label in LABELS.items():
        ns, laps = r["stages"][k]
        us = ns / laps / 1e3 if laps else 0.0
        print(f"  {k:15s} {per_step[k]:8.3f} {us:8.2f}  {label}")
    ours = sum(v for k, v in per_step.items() if k not in ("run", "statistics"))
    # The originals take the same time recorded or not, so the rest of the body over the bare
    # step is the path into the recorder outside the stages.
    outside = r["body_ms"] - ours - b["bare_ms"]
    print(f"  {'in the stages':15s} {ours:8.3f}           numprobe's own work in the calls and hooks")
    print(f"  {'outside':15s} {outside:8.3f}           body - stages - the bare step's work "
          "(wrappers, dunder slots, autograd calling the hooks)")
    print(f"  {'fixed':15s} {r['start_ms'] + r['stop_step_ms']:8.3f}           "
          "start() + stop() + step()")


if __name__ == "__main__":
    main()
