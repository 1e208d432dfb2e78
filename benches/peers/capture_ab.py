"""Two numprobe builds against each other on one workload, interleaved step by step.

On a shared host the speed of the machine drifts by tens of percent within minutes, more than
most changes to the capture path are worth; timing one build and then the other measures the
drift. Here each build (and a bare run) lives in a process of its own, set up and warmed up
once, and the driver hands them a few steps at a time in turn, round after round, so every
build sees the same stretch of machine time. Reported per build: the median and the minimum
of the per-step wall time (start() + the step + stop() + step(), statistics L1, extra_info
on), and each build over the bare median and minimum.

  python benches/peers/capture_ab.py --build base=/tmp/np-base/site --build new=/tmp/np-new/site \\
      [--workload llama] [--threads 1] [--rounds 30] [--steps 4]

A build is a directory holding the `numprobe` package (pip install --target DIR ./capture),
optionally followed by environment settings of its process: `--build noshim=DIR,NUMPROBE_TORCH_SHIM=0`
runs the same package without its torch reader (numprobe/pytorch/_torch_shim.py). A build
named `bare-…` runs the bare step with its settings (`--build
bare-active=DIR,OMP_WAIT_POLICY=ACTIVE`); the x bare columns stay against the plain bare run.
Workloads as in capture_per_api.py. A build made with `MATURIN_PEP517_ARGS="--features
calls-unrecorded"` runs every call of the native path unrecorded after counting it: beside a
bare run and a recording build it splits what recording adds into the mechanism (the
namespace wrappers, the native call, start/stop/step) and the recording itself.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(workload, threads, recorded):
    sys.path.insert(0, HERE)
    from capture_per_api import bench_step

    run = bench_step(workload, threads, recorded)
    for _ in range(10):
        run()
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        times = []
        for _ in range(n):
            a = time.perf_counter()
            run()
            times.append(time.perf_counter() - a)
        print(json.dumps(times), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", action="append", default=[],
                   help="NAME=DIR[,VAR=VALUE...] (twice or more)")
    p.add_argument("--workload", default="llama")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=4, help="steps per build per round")
    p.add_argument("--worker", choices=("bare", "recorded"))
    args = p.parse_args()
    if args.worker:
        return worker(args.workload, args.threads, args.worker == "recorded")
    builds = [b.split("=", 1) for b in args.build]
    if len(builds) < 1:
        sys.exit("give --build NAME=DIR at least once")
    procs = {}
    for name, spec in [("bare", builds[0][1].split(",")[0])] + builds:
        site, *settings = spec.split(",")
        env = dict(os.environ, PYTHONPATH=site)
        env.update(kv.split("=", 1) for kv in settings)
        role = "bare" if name == "bare" or name.startswith("bare-") else "recorded"
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", role,
               "--workload", args.workload, "--threads", str(args.threads)]
        procs[name] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, env=env)
    for name, pr in procs.items():
        if pr.stdout.readline().strip() != "ready":
            sys.exit(f"{name} did not start")
    times = {name: [] for name in procs}
    for _ in range(args.rounds):
        for name, pr in procs.items():
            pr.stdin.write(f"{args.steps}\n")
            pr.stdin.flush()
            times[name] += json.loads(pr.stdout.readline())
    for pr in procs.values():
        pr.stdin.close()
        pr.wait()
    bare_med = statistics.median(times["bare"])
    bare_min = min(times["bare"])
    print(f"{args.workload}, {args.threads} thread(s), {args.rounds} rounds x {args.steps} "
          "steps, ms per step (wall):")
    print(f"  {'build':10s} {'median':>8s} {'min':>8s} {'x bare med':>11s} {'x bare min':>11s}")
    for name, ts in times.items():
        med, lo = statistics.median(ts), min(ts)
        print(f"  {name:10s} {1e3 * med:8.2f} {1e3 * lo:8.2f} {med / bare_med:11.2f} "
              f"{lo / bare_min:11.2f}")


if __name__ == "__main__":
    main()
