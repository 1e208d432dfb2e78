"""How much slower a bare step runs when something else came before it than when it follows
itself: the cost a recorded step's torch work pays for being spread over a longer time.

The bare baseline of capture_per_api.py is a run of back-to-back steps, each finding what the
last one left in the caches. A recorded step interleaves torch's work with the recorder's, so
the same work is spread over two to three times the wall time. On a machine whose caches or
cores are shared with others, data left alone for milliseconds is partly gone when the step
comes back to it, whatever ran meanwhile. This script measures that without numprobe (it is
not imported): after D ms of `sleep` (the core idle) or `spin` (a clock-reading loop that
touches almost nothing), one step is timed, then two more, and the first is compared with the
third. With `--recorded` a last row puts a numprobe-recorded step (statistics L1) before the
step: compared with a gap of the same length, what a recorded step leaves behind beyond the
time it took.

usage: python benches/peers/step_cooling.py [--workload llama] [--threads 1]
           [--gaps-ms 0,1,4,16] [--rounds 80] [--recorded]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from capture_per_api import build_step, recording_debugger  # noqa: E402  (the same workloads)


def gap(kind, seconds):
    if kind == "sleep":
        time.sleep(seconds)
        return
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def timed(step):
    a = time.perf_counter()
    step()
    return time.perf_counter() - a


def after(step, before, rounds):
    """Medians (ms) of the step right after `before()` and of the third step after it, and of
    `before` itself."""
    first, third, took = [], [], []
    for _ in range(rounds):
        took.append(timed(before))
        first.append(timed(step))
        step()
        third.append(timed(step))
    m = statistics.median
    return m(first) * 1e3, m(third) * 1e3, m(took) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="llama")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--gaps-ms", default="0,1,4,16")
    p.add_argument("--rounds", type=int, default=80)
    p.add_argument("--recorded", action="store_true",
                   help="also a numprobe-recorded step as the thing before")
    a = p.parse_args()
    step = build_step(a.workload, a.threads)
    befores = []
    for ms in (float(x) for x in a.gaps_ms.split(",")):
        for kind in ("spin", "sleep"):
            befores.append((f"{kind} {ms:g} ms", lambda k=kind, s=ms / 1e3: gap(k, s)))
    if a.recorded:
        # Made when its row comes, last: the debugger wraps torch's APIs for good, and the
        # rows before it time the step without numprobe.
        dbg = []

        def recorded():
            if not dbg:
                dbg.append(recording_debugger(tempfile.mkdtemp(prefix="numprobe-cooling-")))
            dbg[0].start()
            step()
            dbg[0].stop()
            dbg[0].step()
        befores.append(("recorded step", recorded))
    for _ in range(20):
        step()
    print(f"# {a.workload}, {a.threads} thread(s), {a.rounds} rounds, median ms")
    print(f"{'before the step':>16} {'took':>8} {'step after':>11} {'third step':>11} "
          f"{'difference':>11}")
    for label, before in befores:
        for _ in range(3):
            before()
            step()
        first, third, took = after(step, before, a.rounds)
        print(f"{label:>16} {took:8.3f} {first:11.3f} {third:11.3f} {first - third:+11.3f}")


if __name__ == "__main__":
    main()
