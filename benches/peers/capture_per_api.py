"""Where numprobe's per-API capture time goes (statistics L1), beside msprobe 26.2.

Two workloads: a loop of small ops (200 recorded APIs per step on 16-element tensors) and the
tiny transformers Llama step of capture/python_tests/hf_models.py (forward, backward, AdamW).
Each configuration runs in a fresh process (both debuggers are per-process singletons):

  bare       no debugger
  dispatch   numprobe L1 with a `list` that matches nothing: wrappers, counters and filters
             run, nothing is recorded (hook dispatch)
  no_stack   numprobe L1, extra_info false: + argument walk, statistics and journal
  full       numprobe L1, extra_info true: + call stacks
  kept       full, with NUMPROBE_KEEP_JOURNAL=1: without the per-stop fsync of the JSON files
             that a clean stop pays before it removes the journal
  msprobe    msprobe L1, extra_info true

Per recorded API: (median step time - bare) / entries per step, entries counted in the dump.

usage: python benches/peers/capture_per_api.py [--steps 7]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HF = os.path.join(HERE, "..", "..", "capture", "python_tests")
VARIANTS = ("bare", "dispatch", "no_stack", "full", "kept", "msprobe")


def child(variant, workload, steps, dump):
    import torch

    torch.set_num_threads(1)
    if workload == "llama":
        sys.path.insert(0, HF)
        import hf_models

        model, batch = hf_models.build("llama")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            model(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
    else:
        xs = [torch.randn(16) for _ in range(4)]

        def step():
            x = xs[0]
            for i in range(50):
                x = torch.add(x, xs[1])
                x = torch.mul(x, 0.5)
                x = x.sin()
                x = torch.sub(x, xs[2])
    dbg = None
    if variant != "bare":
        cfg = {"task": "statistics", "dump_path": dump, "level": "L1", "rank": [], "step": [],
               "async_dump": False, "extra_info": variant != "no_stack",
               "statistics": {"scope": [], "list": ["__none__"] if variant == "dispatch" else [],
                              "data_mode": ["all"], "summary_mode": "statistics"}}
        path = dump + ".json"
        with open(path, "w") as f:
            json.dump(cfg, f)
        if variant == "msprobe":
            from msprobe.pytorch import PrecisionDebugger
        else:
            from numprobe.pytorch import PrecisionDebugger
        dbg = PrecisionDebugger(config_path=path)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        if dbg is not None:
            dbg.start()
        step()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"median_s": statistics.median(times[1:])}))


def entries(dump):
    files = sorted(glob.glob(os.path.join(dump, "step1", "*", "dump.json")))
    if not files:
        return 0
    with open(files[0]) as f:
        return len(json.load(f)["data"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--child", nargs=3, metavar=("VARIANT", "WORKLOAD", "DUMP"))
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.steps, a.child[2])
        return
    for workload in ("ops", "llama"):
        res = {}
        with tempfile.TemporaryDirectory() as tmp:
            for v in VARIANTS:
                dump = os.path.join(tmp, f"{workload}_{v}")
                env = dict(os.environ, NUMPROBE_KEEP_JOURNAL="1" if v == "kept" else "0")
                r = subprocess.run([sys.executable, __file__, "--steps", str(a.steps), "--child",
                                    v, workload, dump], capture_output=True, text=True, env=env)
                if r.returncode != 0:
                    raise SystemExit(r.stderr[-3000:])
                res[v] = (json.loads(r.stdout.strip().splitlines()[-1])["median_s"],
                          entries(dump))
        n = res["full"][1] or 1
        bare = res["bare"][0]
        print(f"{workload}: bare step {bare * 1e3:.2f} ms, {n} entries per step (msprobe "
              f"{res['msprobe'][1]})")
        for v in VARIANTS[1:]:
            t = res[v][0]
            print(f"  {v:9s} {t * 1e3:9.2f} ms  {t / bare:6.2f}x bare  "
                  f"{(t - bare) / n * 1e6:8.1f} us per recorded API")


if __name__ == "__main__":
    main()
