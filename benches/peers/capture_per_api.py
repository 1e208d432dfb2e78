"""Where numprobe's per-API capture time goes (statistics L1), beside msprobe 26.2.

Workloads: `ops`, a loop of small ops (200 recorded APIs per step on 16-element tensors),
`inplace`, an optimizer's in-place updates (320 recorded APIs per step: `mul_` and `addcdiv_`
on eight triples of 256 KiB float32 tensors, as AdamW's single-tensor loop makes them), and
the tiny transformers models of capture/python_tests/hf_models.py (`llama`, `bert`, `gpt2`,
`vit`: forward, backward, AdamW). Each configuration runs in a fresh process (both debuggers
are per-process singletons):

  bare       no debugger
  dispatch   numprobe L1 with a `list` that matches nothing: wrappers, counters and filters
             run, nothing is recorded (hook dispatch)
  no_stack   numprobe L1, extra_info false: + argument walk, statistics and journal
  full       numprobe L1, extra_info true: + call stacks (with the torch reader when one is
             built for this torch: `python -m numprobe.pytorch build-torch-shim`)
  py_reads   as full, the torch reader switched off (NUMPROBE_TORCH_SHIM=0): every tensor read
             through Python
  msprobe    msprobe L1, extra_info true

Each step is timed in two parts, in CPU time of the process (time.process_time: what a
loaded machine inflates least) and in wall time: `body` = start() + the step's work, `fixed` =
stop() + step(), the per-step cost that does not grow with the APIs (the JSON files written
durably, the journal removed, the next step's session). Per recorded API = (median body -
median bare body) / entries per step (entries counted in the dump). Configurations are
interleaved round by round; the load average is printed with each round.

A workload NAME:HIDDEN:LAYERS:SEQ:BATCH builds the model at that shape (e.g. `llama:256:3:64:4`,
a step of tens of milliseconds); `--threads 0` keeps torch's default thread count.
`tinynet:D:LAYERS:SEQ:BATCH` is the attention model of the msprobe fixtures' scripts trained as
they train it (SGD with momentum), the kind of model the issue's ≤ 1.3x goal names (d = 256,
three blocks: `tinynet:256:3:64:8`, 240 entries in a step of about 70 ms).

usage: python benches/peers/capture_per_api.py [--steps 12] [--rounds 3]
           [--workloads ops,llama] [--threads 1]
           [--variants bare,dispatch,no_stack,full,py_reads,msprobe]
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
VARIANTS = ("bare", "dispatch", "no_stack", "full", "py_reads", "msprobe")
# A bench never starts a compiler beside what it times: it uses a torch reader already built
# (`python -m numprobe.pytorch build-torch-shim`) but does not build one. The scripts that
# drive their processes through this module (capture_ab, capture_profile, capture_stages)
# inherit it.
os.environ.setdefault("NUMPROBE_TORCH_SHIM", "1")


def build_step(workload, threads):
    """The step function of `workload` (see the module docs), torch at `threads` threads (0:
    torch's default, one per core). capture_stages.py runs the same workloads."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    if workload == "ops":
        xs = [torch.randn(16) for _ in range(4)]

        def step():
            x = xs[0]
            for _ in range(50):
                x = torch.add(x, xs[1])
                x = torch.mul(x, 0.5)
                x = x.sin()
                x = torch.sub(x, xs[2])
        return step
    if workload == "inplace":
        # Each write is a new version of a tensor whose record is cached (the record cache's
        # path: one miss for the written tensor, hits for the unchanged ones).
        n = 64 << 10
        triples = [(torch.randn(n), torch.randn(n), torch.rand(n) + 1) for _ in range(8)]

        def step():
            with torch.no_grad():
                for _ in range(20):
                    for p, m, d in triples:
                        m.mul_(0.9)
                        p.addcdiv_(m, d, value=-1e-3)
        return step
    if workload.startswith("tinynet:"):
        return _tinynet_step(workload)
    sys.path.insert(0, HF)
    import hf_models

    # NAME or NAME:HIDDEN:LAYERS:SEQ:BATCH (the models at other shapes).
    name, *shape = workload.split(":")
    model, batch = hf_models.build(name, *(int(x) for x in shape))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def _tinynet_step(workload):
    """`tinynet:D:LAYERS:SEQ:BATCH`: the transformer of the msprobe fixtures' scripts
    (testdata/fixtures/msprobe-26.2.0-cpu/scripts/models.py: a linear embedding, pre-norm
    attention blocks with a GELU MLP, mean pooling, an MLP head; D / 64 heads) trained as
    their pt_dump.py trains it (cross entropy, SGD with momentum): few entries a step, each on
    large tensors."""
    import torch
    import torch.nn.functional as F

    scripts = os.path.join(HERE, "..", "..", "testdata", "fixtures", "msprobe-26.2.0-cpu",
                           "scripts")
    sys.path.insert(0, scripts)
    import models

    d, layers, seq, batch = (int(x) for x in workload.split(":")[1:])
    torch.manual_seed(1234)
    model = models.TinyNet(d_in=64, d=d, n_heads=max(1, d // 64), n_layers=layers,
                           n_classes=64)
    g = torch.Generator().manual_seed(1235)
    x = torch.randn(batch, seq, 64, generator=g)
    y = torch.randint(0, 64, (batch,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def recording_debugger(dump, extra_info=True, select=(), peer="numprobe"):
    """A PrecisionDebugger (numprobe's, or msprobe's with `peer`) recording statistics L1 into
    `dump`, its config.json written beside it; `select`: the `list` filter. The other bench
    scripts of this directory record with it too."""
    cfg = {"task": "statistics", "dump_path": dump, "level": "L1", "rank": [], "step": [],
           "async_dump": False, "extra_info": extra_info,
           "statistics": {"scope": [], "list": list(select), "data_mode": ["all"],
                          "summary_mode": "statistics"}}
    path = dump + ".json"
    with open(path, "w") as f:
        json.dump(cfg, f)
    if peer == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        from numprobe.pytorch import PrecisionDebugger
    return PrecisionDebugger(config_path=path)


def bench_step(workload, threads, recorded):
    """One step of `workload` as a loop of steps runs it: bare, or recorded (start(), the step,
    stop(), step(): statistics L1, extra_info on, into a fresh temporary dump). The A/B and
    profiling scripts of this directory drive their processes with it."""
    step = build_step(workload, threads)
    if not recorded:
        return step
    dbg = recording_debugger(tempfile.mkdtemp())

    def run():
        dbg.start()
        step()
        dbg.stop()
        dbg.step()
    return run


def child(variant, workload, steps, dump, threads):
    step = build_step(workload, threads)
    dbg = None
    if variant != "bare":
        dbg = recording_debugger(dump, extra_info=variant != "no_stack",
                                 select=["__none__"] if variant == "dispatch" else [],
                                 peer="msprobe" if variant == "msprobe" else "numprobe")
    cpu, wall = time.process_time, time.perf_counter
    rows = []
    for _ in range(steps):
        c0, w0 = cpu(), wall()
        if dbg is not None:
            dbg.start()
        step()
        c1, w1 = cpu(), wall()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        rows.append((c1 - c0, w1 - w0, cpu() - c1, wall() - w1))
    rows = rows[1:]  # the first step warms up
    print(json.dumps([statistics.median(r[i] for r in rows) for i in range(4)]))


def entries(dump):
    files = sorted(glob.glob(os.path.join(dump, "step1", "*", "dump.json")))
    if not files:
        return 0
    with open(files[0]) as f:
        return len(json.load(f)["data"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workloads", default="ops,llama")
    p.add_argument("--threads", default="1",
                   help="torch thread counts, comma-separated (0: torch's default)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--child", nargs=4, metavar=("VARIANT", "WORKLOAD", "DUMP", "THREADS"))
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.steps, a.child[2], int(a.child[3]))
        return
    variants = a.variants.split(",")
    for threads in (int(t) for t in a.threads.split(",")):
        for workload in a.workloads.split(","):
            res = {v: [] for v in variants}
            n = {}
            with tempfile.TemporaryDirectory() as tmp:
                for r in range(a.rounds):
                    print(f"# {workload}, {threads} thread(s), round {r + 1}: load average "
                          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
                    for v in variants:
                        dump = os.path.join(tmp, f"{workload}_{v}_{r}")
                        cmd = [sys.executable, __file__, "--steps", str(a.steps), "--child", v,
                               workload, dump, str(threads)]
                        env = dict(os.environ)
                        if v == "py_reads":
                            env["NUMPROBE_TORCH_SHIM"] = "0"
                        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                        if out.returncode != 0:
                            raise SystemExit(out.stderr[-3000:])
                        res[v].append(json.loads(out.stdout.strip().splitlines()[-1]))
                        n[v] = entries(dump)
            med = {v: [statistics.median(x[i] for x in res[v]) for i in range(4)] for v in res}
            k = n.get("full") or n.get("no_stack") or n.get("msprobe") or 1
            bare = med.get("bare", [0.0] * 4)
            print(f"{workload}, {threads} thread(s): {k} entries per step; bare step "
                  f"{bare[0] * 1e3:.2f} ms CPU, {bare[1] * 1e3:.2f} ms wall")
            print(f"  {'variant':9s} {'body CPU':>9s} {'body wall':>9s} {'fixed CPU':>9s} "
                  f"{'fixed wall':>10s} {'x bare CPU':>10s} {'x bare wall':>11s} "
                  f"{'us/API CPU':>10s} {'us/API wall':>11s}")
            for v in variants:
                if v == "bare":
                    continue
                bc, bw, fc, fw = med[v]
                print(f"  {v:9s} {bc * 1e3:9.2f} {bw * 1e3:9.2f} {fc * 1e3:9.2f} {fw * 1e3:10.2f} "
                      f"{(bc + fc) / bare[0] if bare[0] else 0:10.2f} "
                      f"{(bw + fw) / bare[1] if bare[1] else 0:11.2f} "
                      f"{(bc - bare[0]) / k * 1e6:10.1f} {(bw - bare[1]) / k * 1e6:11.1f}")


if __name__ == "__main__":
    main()
