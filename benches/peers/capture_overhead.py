"""Step-time overhead of numprobe's PyTorch capture (and msprobe's, for reference) on the
fixture models: median training-step time with the tool / without it.

usage: python benches/peers/capture_overhead.py [--model tiny|big] [--steps 12] [--warmup 2]
       [--level L1] [--task statistics] [--msprobe] [--threads N]

Each configuration runs in its own process (msprobe and numprobe both patch torch). The issue's
goal: numprobe statistics L1 <= 1.3x (msprobe measured 26-30x on the tiny model).
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
SHARED = os.path.realpath(os.environ.get("NUMPROBE_SHARED") or os.path.join(REPO, "..", "shared"))
SCRIPTS = os.path.join(SHARED, "fixtures", "msprobe-26.2.0-cpu", "scripts")
DRIVER = os.path.join(REPO, "capture", "python_tests", "drive_model.py")


def run(cmd, cwd):
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def timed(kind, a, tmp):
    out = os.path.join(tmp, f"{kind}.json")
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump({"task": a.task, "level": a.level, "dump_path": os.path.join(tmp, kind),
                   a.task: {"summary_mode": "statistics"}}, f)
    common = ["--model", a.model, "--steps", str(a.steps + a.warmup)]
    if a.threads:
        common += ["--threads", str(a.threads)]
    if kind == "none":
        run([sys.executable, DRIVER, "--no-tool", "--times-out", out] + common, tmp)
        times = json.load(open(out))
    elif kind == "numprobe":
        run([sys.executable, DRIVER, "--config", cfg, "--times-out", out] + common, tmp)
        times = json.load(open(out))
    else:
        run([sys.executable, os.path.join(SCRIPTS, "pt_dump.py"), "--config", cfg, "--out", out]
            + common, tmp)
        times = json.load(open(out))["step_times_s"]
    return statistics.median(times[a.warmup:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--level", default="L1")
    p.add_argument("--task", default="statistics")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--msprobe", action="store_true", help="also time msprobe (slow)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = timed("none", a, tmp)
        res = {"model": a.model, "level": a.level, "task": a.task,
               "baseline_ms": base * 1e3}
        t = timed("numprobe", a, tmp)
        res["numprobe_ms"] = t * 1e3
        res["numprobe_x"] = t / base
        if a.msprobe:
            t = timed("msprobe", a, tmp)
            res["msprobe_ms"] = t * 1e3
            res["msprobe_x"] = t / base
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
