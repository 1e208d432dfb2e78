"""Step-time overhead of numprobe's PyTorch capture beside msprobe's, on the fixture models:
median training-step time with each tool / without a tool, for statistics L1, statistics mix
and md5 L1 (the issue's three configurations), all in one run.

usage: python benches/peers/capture_overhead.py [--model tiny|big] [--steps 10] [--warmup 2]
       [--configs L1,mix,md5] [--no-msprobe] [--threads 1] [--rounds 1] [--json]

Each (tool, configuration) runs in its own process (msprobe and numprobe both patch torch);
with --rounds N the processes are interleaved N times and medians over all rounds are shown,
which evens out a machine whose load changes during the run. Also reported per tool: the
median CPU time per step of the whole process (all threads), and the CPU load average, since
wall-clock figures on a shared machine move with other work; "paired" is the median over
rounds of each round's ratio to that round's bare run (robust to a machine whose speed drifts
between rounds). The issue's goals: statistics L1
<= 1.3x, md5 <= 1.6x on the ~50M-parameter model (--model big).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TESTDATA = os.path.realpath(os.environ.get("NUMPROBE_TESTDATA") or os.path.join(REPO, "testdata"))
SCRIPTS = os.path.join(TESTDATA, "fixtures", "msprobe-26.2.0-cpu", "scripts")
DRIVER = os.path.join(REPO, "capture", "python_tests", "drive_model.py")

CONFIGS = {
    "L1": ("statistics", "L1", "statistics"),
    "mix": ("statistics", "mix", "statistics"),
    "md5": ("statistics", "L1", "md5"),
    "L0": ("statistics", "L0", "statistics"),
    "tensor": ("tensor", "L1", "statistics"),
}


def run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")


def timed(tool, conf, a, tmp):
    """Per-step wall and CPU seconds (after warm-up) of one process."""
    out = os.path.join(tmp, f"{tool}_{conf}.json")
    cfg = os.path.join(tmp, f"config_{conf}.json")
    task, level, summary = CONFIGS[conf]
    dump = os.path.join(tmp, f"dump_{tool}_{conf}")
    with open(cfg, "w") as f:
        json.dump({"task": task, "level": level, "dump_path": dump,
                   task: {"summary_mode": summary} if task == "statistics" else {}}, f)
    common = ["--model", a.model, "--steps", str(a.steps + a.warmup)]
    if a.threads:
        common += ["--threads", str(a.threads)]
    if tool == "none":
        run([sys.executable, DRIVER, "--no-tool", "--times-out", out] + common, tmp)
    elif tool == "numprobe":
        run([sys.executable, DRIVER, "--config", cfg, "--times-out", out] + common, tmp)
    else:
        run([sys.executable, os.path.join(SCRIPTS, "pt_dump.py"), "--config", cfg, "--out", out]
            + common, tmp)
    with open(out) as f:
        res = json.load(f)
    subprocess.run(["rm", "-rf", dump])
    if tool == "msprobe":
        return res["step_times_s"][a.warmup:], None
    return res["wall"][a.warmup:], res["cpu"][a.warmup:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--configs", default="L1,mix,md5")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--no-msprobe", action="store_true")
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    a = p.parse_args()
    confs = [c for c in a.configs.split(",") if c]
    for c in confs:
        if c not in CONFIGS:
            raise SystemExit(f"unknown configuration {c}; known: {', '.join(CONFIGS)}")
    tools = ["numprobe"] + ([] if a.no_msprobe else ["msprobe"])
    wall = {}
    cpu = {}
    load = []
    # Per round, each tool's median step over the same round's bare median: a machine whose
    # speed drifts between rounds moves both sides of these ratios alike.
    paired = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            jobs = [("none", "L1")] + [(t, c) for c in confs for t in tools]
            bare = None
            for tool, conf in jobs:
                key = "none" if tool == "none" else (tool, conf)
                w, c = timed(tool, conf, a, tmp)
                wall.setdefault(key, []).extend(w)
                if c is not None:
                    cpu.setdefault(key, []).extend(c)
                if tool == "none":
                    bare = statistics.median(w)
                else:
                    paired.setdefault(key, []).append(statistics.median(w) / bare)
                load.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in wall.items()}
    base = med["none"]
    base_cpu = statistics.median(cpu["none"])
    print(f"model {a.model}, torch threads {a.threads}, {a.steps} steps x {a.rounds} round(s); "
          f"load average during the run {min(load):.1f}-{max(load):.1f}")
    print(f"without tool: {base * 1e3:.1f} ms/step (CPU {base_cpu * 1e3:.1f} ms)")
    print("| config | numprobe ms | slowdown | paired | numprobe CPU ms | CPU ratio |"
          + ("" if a.no_msprobe else " msprobe ms | slowdown | paired |"))
    print("|---|---|---|---|---|---|" + ("" if a.no_msprobe else "---|---|---|"))
    res = {"model": a.model, "baseline_ms": base * 1e3, "baseline_cpu_ms": base_cpu * 1e3,
           "load": [min(load), max(load)], "configs": {}}
    for c in confs:
        n = med[("numprobe", c)]
        ncpu = statistics.median(cpu[("numprobe", c)])
        npair = statistics.median(paired[("numprobe", c)])
        row = {"numprobe_ms": n * 1e3, "numprobe_x": n / base, "numprobe_paired_x": npair,
               "numprobe_cpu_ms": ncpu * 1e3, "numprobe_cpu_x": ncpu / base_cpu}
        line = (f"| {c} | {n * 1e3:.1f} | {n / base:.2f}x | {npair:.2f}x | {ncpu * 1e3:.1f} | "
                f"{ncpu / base_cpu:.2f}x |")
        if not a.no_msprobe:
            m = med[("msprobe", c)]
            mpair = statistics.median(paired[("msprobe", c)])
            row.update(msprobe_ms=m * 1e3, msprobe_x=m / base, msprobe_paired_x=mpair)
            line += f" {m * 1e3:.1f} | {m / base:.2f}x | {mpair:.2f}x |"
        res["configs"][c] = row
        print(line)
    if a.json:
        print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
