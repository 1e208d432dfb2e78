"""Where numprobe's run_ut replay spends its time on one dump: starting Python, importing torch and
numprobe, reading dump.json, loading the saved `.pt` tensors, executing the APIs (golden, device,
backward), judging the outputs (Rust metrics) and writing the CSV records.

usage: python benches/peers/run_ut_breakdown.py [--api-info DUMP.json] [--repeat 5] [--threads 1]

Without --api-info it captures the tiny HuggingFace Llama tensor dump (capture/python_tests/
hf_model.py: hidden 64, 2 layers, one training step under numprobe) into a temporary folder.

Two parts, each repeated (min / median printed):
- processes: `python -c pass`, `python -c "import torch"`, `python -c "import numprobe.pytorch.
  run_ut.cli"` and the whole CLI `python -m numprobe.pytorch run_ut -api_info DUMP -o TMP`
  (wall time: what a user waits for). Run it once per package build (PYTHONPATH) to compare.
- in one process, the CLI's replay (run_all, metrics inline so the phases add up, records through
  its RecordWriter) with its phases timed; `.pt` files loaded by numprobe's reader (the default)
  and by torch.load(weights_only=True) (the replay before numprobe's reader), rounds interleaved.

Before/after a change of the package: `PYTHONPATH=AFTER python ... --before BEFORE` times the
process rows with both builds, alternating round by round.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def llama_dump(folder):
    subprocess.run([sys.executable, os.path.join(REPO, "capture", "python_tests", "hf_model.py"), "--family", "llama",
                    "--tool", "numprobe", "--task", "tensor", "--dump-path", os.path.join(folder, "dump")],
                   check=True, cwd=folder, capture_output=True)
    (path,) = glob.glob(os.path.join(folder, "dump", "step0", "*", "dump.json"))
    return path


def wall(cmd, env):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=False, capture_output=True, env=env)
    return time.perf_counter() - t0


def fmt(xs):
    xs = sorted(xs)
    return f"{xs[0] * 1e3:8.1f} / {xs[len(xs) // 2] * 1e3:8.1f} ms"


def processes(path, repeat, tmp, before):
    """Wall times of the process rows; with `before` (a PYTHONPATH) each row also runs with that
    package build, alternating with this one round by round."""
    py = sys.executable
    rows = [
        ("python -c pass", [py, "-c", "pass"]),
        ("import torch", [py, "-c", "import torch"]),
        ("import numprobe.pytorch.run_ut.cli", [py, "-c", "import numprobe.pytorch.run_ut.cli"]),
        ("run_ut CLI, whole dump", [py, "-m", "numprobe.pytorch", "run_ut", "-api_info", path, "-o",
                                    os.path.join(tmp, "cli")]),
    ]
    builds = {"this build": dict(os.environ)}
    if before:
        builds = {"before": dict(os.environ, PYTHONPATH=before), **builds}
    print(f"processes (wall, min / median of {repeat}):")
    # numprobe's own share of the imports, timed inside the process once torch is in.
    probe = ("import time, torch; t = time.perf_counter(); import numprobe.pytorch.run_ut.cli; "
             "print(time.perf_counter() - t)")
    own = {b: [] for b in builds}
    for _ in range(repeat):
        for b, env in builds.items():
            out = subprocess.run([py, "-c", probe], check=True, capture_output=True, text=True, env=env)
            own[b].append(float(out.stdout.split()[-1]))
    for b in builds:
        print(f"  {'numprobe imports after torch':<36} {b:<10}: {fmt(own[b])}")
    for label, cmd in rows:
        times = {b: [] for b in builds}
        for _ in range(repeat):
            for b, env in builds.items():
                times[b].append(wall(cmd, env))
        for b in builds:
            print(f"  {label:<36} {b:<10}: {fmt(times[b])}")


def replay(path, repeat, tmp):
    import torch

    from numprobe.pytorch.run_ut import Job, Timer, inputs, run_all
    from numprobe.pytorch.run_ut.cli import RecordWriter
    from numprobe.pytorch.run_ut.dump import load_api_info

    ours = inputs.read_pt

    def torch_load(p):
        return torch.load(p, map_location="cpu", weights_only=True)

    spent = {"load": 0.0, "write": 0.0}

    def timed_read(fn):
        def read(p):
            t0 = time.perf_counter()
            try:
                return fn(p)
            finally:
                spent["load"] += time.perf_counter() - t0
        return read

    def one(reader):
        inputs.read_pt = timed_read(reader)
        spent.update(load=0.0, write=0.0)
        t0 = time.perf_counter()
        forward, backward, tensor_dir = load_api_info(path)
        t_json = time.perf_counter() - t0
        job = Job(forward, backward, tensor_dir, [], [])
        timer = Timer()
        csv_path = os.path.join(tmp, "rows.csv")
        with open(csv_path, "w", encoding="utf-8", newline="") as rf, \
                open(csv_path + ".details", "w", encoding="utf-8", newline="") as df:
            out = RecordWriter(rf, df)

            def sink(name, lines, failed, tensors):
                t = time.perf_counter()
                out.add(*lines)
                spent["write"] += time.perf_counter() - t

            run_all(job, list(forward), sink, timer=timer, overlap=False, keep_tensors=False)
            t = time.perf_counter()
            out.flush()
            spent["write"] += time.perf_counter() - t
        total = time.perf_counter() - t0
        return {"dump.json": t_json, ".pt loading": spent["load"], "execution": timer.execute - spent["load"],
                "judging": timer.judge, "writing": spent["write"], "replay total": total}, len(forward)

    readers = {"numprobe reader": ours, "torch.load": torch_load}
    one(ours)  # warm-up: file cache, allocator, lazy imports
    runs = {k: [] for k in readers}
    for _ in range(repeat):
        for k, fn in readers.items():
            phases, n = one(fn)
            runs[k].append(phases)
    inputs.read_pt = ours
    files = len(glob.glob(os.path.join(os.path.dirname(path), "dump_tensor_data", "*.pt")))
    print(f"in-process replay of {n} APIs ({files} .pt files in the dump), torch threads "
          f"{torch.get_num_threads()}, metrics inline (min / median of {repeat}):")
    for k in readers:
        print(f"  .pt files read by {k}:")
        for phase in runs[k][0]:
            print(f"    {phase:<14}: {fmt([r[phase] for r in runs[k]])}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api-info")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps figures steady on a shared machine)")
    p.add_argument("--before", metavar="PYTHONPATH",
                   help="a package build to time the processes with too (alternating with this one)")
    p.add_argument("--processes-only", action="store_true",
                   help="only the process timings (for a package build without numprobe's .pt reader)")
    a = p.parse_args()
    tmp = tempfile.TemporaryDirectory()
    path = a.api_info or llama_dump(tmp.name)
    # The CLI subprocesses take the same thread count.
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch

    torch.set_num_threads(a.threads)
    print(f"dump: {path}; load average {os.getloadavg()[0]:.2f}")
    processes(path, a.repeat, tmp.name, a.before)
    if not a.processes_only:
        replay(path, a.repeat, tmp.name)


if __name__ == "__main__":
    main()
