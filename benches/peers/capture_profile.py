"""Where a recorded step's time goes by sampled call stacks: `perf record` on a loop of bare
steps and on a loop of recorded ones (statistics L1, extra_info on), each in a process of its
own, then the recording thread's samples as microseconds a step, by library (bare, recorded,
added) and, with `--symbols`, the share of the thread's time spent under each named function.

Needs Linux `perf` (the kernel's clock sampling, `-e cpu-clock`: it works in guests without a
PMU). Whole call stacks (`--stacks`, needed for `--symbols`) are unwound from copies of the
stack (`--call-graph dwarf`): keep `--seconds` short, the data grows by tens of MB a second.

  python benches/peers/capture_profile.py [--workload llama] [--threads 1] [--seconds 6] \\
      [--stacks --symbols ApiCalls::call Walk::tensor write_json]

Workloads as in capture_per_api.py. The numprobe package the interpreter imports is profiled
(PYTHONPATH=DIR for a build made with `pip install --target DIR ./capture`).
"""
import argparse
import collections
import os
import select
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(workload, threads, recorded):
    sys.path.insert(0, HERE)
    from capture_per_api import bench_step

    run = bench_step(workload, threads, recorded)
    for _ in range(20):
        run()
    # The parent samples from here on; steps are counted until it says stop (stdin closes).
    print("ready", os.getpid(), flush=True)
    n = 0
    t0 = time.perf_counter()
    while not select.select([sys.stdin], [], [], 0)[0]:
        run()
        n += 1
    print("steps", n, time.perf_counter() - t0, flush=True)


def sample(args, recorded, out):
    """Samples one child for `args.seconds`; returns (ms a step, the recording thread's id)."""
    cmd = [sys.executable, __file__, "--child", args.workload, str(args.threads),
           "1" if recorded else "0"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    word, pid = p.stdout.readline().split()
    assert word == "ready", word
    graph = ["--call-graph", "dwarf,16384"] if args.stacks else ["-g"]
    freq = str(args.freq or (500 if args.stacks else 4000))
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", freq, *graph, "-p", pid,
                    "-o", out, "--", "sleep", str(args.seconds)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p.stdin.close()
    _, steps, secs = p.stdout.readline().split()
    p.wait()
    return 1e3 * float(secs) / int(steps), pid


def stacks(data, tid):
    """The recording thread's samples, each its frames innermost first as `symbol (library)`."""
    text = subprocess.run(["perf", "script", "--no-inline", "-i", data, "-F", "tid,ip,sym,dso"],
                          check=True, capture_output=True, text=True).stdout
    out, frames, cur = [], [], None
    for line in text.splitlines() + [""]:
        if not line.strip():
            if cur == tid and frames:
                out.append(frames)
            frames, cur = [], None
        elif not line.startswith("\t"):
            cur = line.split()[0]
        else:
            frames.append(line.strip().split(" ", 1)[-1])
    return out


def library(frame):
    return frame.rsplit("(", 1)[-1].rstrip(")").rsplit("/", 1)[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="llama")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--freq", type=int, default=0, help="samples a second (4000, 500 with --stacks)")
    ap.add_argument("--stacks", action="store_true", help="whole call stacks (dwarf unwinding)")
    ap.add_argument("--symbols", nargs="*", default=[],
                    help="share of the recording thread under each (substring of a frame)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2] == "1")
        return
    if args.symbols and not args.stacks:
        # Frame-pointer stacks break in every library built without them (libpython's too).
        ap.error("--symbols needs --stacks")
    tmp = tempfile.mkdtemp()
    per_lib = {}
    samples = {}
    for name, recorded in (("bare", False), ("recorded", True)):
        data = os.path.join(tmp, name + ".data")
        ms, tid = sample(args, recorded, data)
        samples[name] = stacks(data, tid)
        counts = collections.Counter(library(s[0]) for s in samples[name])
        total = sum(counts.values()) or 1
        per_lib[name] = {k: 1e3 * ms * v / total for k, v in counts.items()}
        print(f"{name}: {ms:.2f} ms a step, {total} samples of the recording thread")
    print(f"\n{'library':40s} {'bare':>8s} {'recorded':>9s} {'added':>8s}   (µs a step)")
    libs = set(per_lib["bare"]) | set(per_lib["recorded"])
    added = {k: per_lib["recorded"].get(k, 0) - per_lib["bare"].get(k, 0) for k in libs}
    for k in sorted(libs, key=lambda k: -added[k])[:12]:
        print(f"{k[:40]:40s} {per_lib['bare'].get(k, 0):8.0f} "
              f"{per_lib['recorded'].get(k, 0):9.0f} {added[k]:8.0f}")
    if args.symbols:
        rec = samples["recorded"]
        print("\nshare of the recording thread's time (recorded steps):")
        for sym in args.symbols:
            n = sum(1 for s in rec if any(sym in f for f in s))
            print(f"  {100 * n / max(len(rec), 1):5.1f}%  {sym}")


if __name__ == "__main__":
    main()
