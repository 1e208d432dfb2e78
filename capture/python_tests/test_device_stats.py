"""Device-side statistics (numprobe/pytorch/_device_stats.py), tested on CPU tensors with the
path forced on (``NUMPROBE_DEVICE_STATS=force``): the statistics are computed with torch ops
on the tensor's device, kept there and read back once per step.

On the CPU the forced path must give the host path's dump byte for byte: both record what
msprobe records (torch.max/min/mean/norm on the tensor, which the host path reproduces in
Rust). This file is also the driver the tests run in a subprocess (``python FILE drive ...``).
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.realpath(os.environ.get("NUMPROBE_TESTDATA")
                            or os.path.join(HERE, "..", "..", "testdata"))
FIX = os.path.join(TESTDATA, "fixtures", "msprobe-26.2.0-cpu")
SEED = 1234


def drive(argv):
    """Runs the fixture's tiny model for some steps under numprobe (as drive_model.py does) and
    prints, as JSON, the readbacks and the host transfers the recorder made in each step."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--config")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--kill", action="store_true",
                   help="SIGKILL the process after the first backward, with statistics pending")
    p.add_argument("--device", default="cpu")
    p.add_argument("--sync-debug", action="store_true",
                   help="CUDA: make any host sync between start() and stop() an error")
    a = p.parse_args(argv)
    sys.path.insert(0, os.path.join(FIX, "scripts"))
    import torch
    import torch.nn.functional as F
    from numprobe.pytorch import PrecisionDebugger, seed_all

    seed_all(seed=SEED)
    debugger = PrecisionDebugger(config_path=a.config)
    rec = debugger.recorder
    import models

    model, xs, ys = models.build("tiny", getattr(torch, a.dtype), seed=SEED)
    model.to(a.device)
    xs, ys = [x.to(a.device) for x in xs], [y.to(a.device) for y in ys]
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    # Count the calls that move tensor data to the host (each is a sync on a device).
    transfers = [0]

    def counting(orig):
        def wrapper(*args, **kwargs):
            transfers[0] += 1
            return orig(*args, **kwargs)
        return wrapper

    saved = {n: getattr(torch.Tensor, n) for n in ("cpu", "item", "numpy")}
    readbacks, moved = [], []
    for step in range(a.steps):
        r0 = rec.device_readbacks
        for n, f in saved.items():
            setattr(torch.Tensor, n, counting(f))
        transfers[0] = 0
        debugger.start(model=model)
        if a.sync_debug:
            torch.cuda.set_sync_debug_mode("error")
        out = model(xs[step % len(xs)])
        loss = F.cross_entropy(out, ys[step % len(ys)])
        loss.backward()
        if a.sync_debug:
            torch.cuda.set_sync_debug_mode(0)
        if a.kill:
            # Make sure some statistics are still on the "device" (not read back).
            while rec._dev_count == 0:
                torch.abs(xs[0])
            print(json.dumps({"pending": rec.session.pending_count()}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        opt.step()
        opt.zero_grad()
        debugger.stop()
        debugger.step()
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)
        readbacks.append(rec.device_readbacks - r0)
        moved.append(transfers[0])
    print(json.dumps({"readbacks": readbacks, "transfers": moved}), flush=True)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "drive":
    drive(sys.argv[2:])
    sys.exit(0)

import pytest  # noqa: E402


# The capture tests' own helpers (this folder is on sys.path under pytest).
from test_pytorch_capture import fixture_dtype, write_config  # noqa: E402


def run(tmp, fixture, mode, steps=2, bound=None, kill=False, extra=()):
    """Drives the model under `fixture`'s config; returns (dump root, the driver's JSON)."""
    os.makedirs(tmp, exist_ok=True)
    cfg = write_config(tmp, fixture)
    env = dict(os.environ, NUMPROBE_DEVICE_STATS=mode)
    env.pop("NUMPROBE_DEVICE_STATS_BOUND", None)
    if bound is not None:
        env["NUMPROBE_DEVICE_STATS_BOUND"] = str(bound)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "drive", "--config", cfg,
                        "--steps", str(steps), "--dtype", fixture_dtype(fixture)]
                       + (["--kill"] if kill else []) + list(extra),
                       cwd=tmp, capture_output=True, text=True, env=env)
    if kill:
        assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    else:
        assert p.returncode == 0, p.stderr[-3000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return os.path.join(tmp, "dump"), json.loads(lines[-1])


def rank_dir(root, step):
    dirs = glob.glob(os.path.join(root, f"step{step}", "*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def read(root, step, name):
    with open(os.path.join(rank_dir(root, step), name), "rb") as f:
        return f.read()


def load(root, step):
    return json.loads(read(root, step, "dump.json"))


def tensor_records(v):
    if isinstance(v, dict):
        if "dtype" in v and "shape" in v:
            yield v
        else:
            for x in v.values():
                yield from tensor_records(x)
    elif isinstance(v, list):
        for x in v:
            yield from tensor_records(x)


STATS = ("Max", "Min", "Mean", "Norm")


@pytest.mark.parametrize("fixture,steps", [
    ("pt_tiny_f32_stat_L1", 2), ("pt_tiny_f32_stat_mix", 2), ("pt_tiny_bf16_stat_L1", 2),
    ("pt_tiny_f16_stat_L1", 1), ("pt_tiny_f32_md5_L1", 1), ("pt_tiny_f32_tensor_L1", 1),
])
def test_device_path_dump_equals_host_path(tmp_path, fixture, steps):
    host_root, host = run(str(tmp_path / "host"), fixture, "auto", steps)
    dev_root, dev = run(str(tmp_path / "dev"), fixture, "force", steps)
    # CPU tensors take the host path unless forced.
    assert host["readbacks"] == [0] * steps
    # One readback per step, and no other transfer to the host by the recorder (md5 and
    # tensor modes copy every tensor for its checksum or file: on the CPU a no-op, uncounted).
    assert dev["readbacks"] == [1] * steps, dev
    assert dev["transfers"] == [1] * steps, dev
    for step in range(steps):
        a, b = load(dev_root, step), load(host_root, step)
        assert list(a["data"]) == list(b["data"])
        assert len(list(tensor_records(a["data"]))) > 50
        # Byte-identical files: same keys in the same order, same values (dump_data_dir
        # names each run's own folder).
        for name in ("dump.json", "stack.json", "construct.json"):
            if os.path.exists(os.path.join(rank_dir(host_root, step), name)):
                mine, theirs = (re.sub(rb'"dump_data_dir": "[^"]*"', b"", read(r, step, name))
                                for r in (dev_root, host_root))
                assert mine == theirs, (step, name)
    if fixture.endswith("_tensor_L1"):
        # Saved tensors: the same files from the host copy the device path makes for them.
        d_dev = os.path.join(rank_dir(dev_root, 0), "dump_tensor_data")
        d_host = os.path.join(rank_dir(host_root, 0), "dump_tensor_data")
        files = sorted(os.listdir(d_host))
        assert files and sorted(os.listdir(d_dev)) == files
        import torch

        def raw(t):
            return t.dtype, t.shape, t.contiguous().reshape(-1).view(torch.uint8).tolist()

        for f in files:
            # (Each .pt holds a random serialization id: compare the tensors.)
            a = torch.load(os.path.join(d_dev, f))
            b = torch.load(os.path.join(d_host, f))
            assert raw(a) == raw(b), f


def test_bound_reads_back_mid_step_with_the_same_dump(tmp_path):
    host_root, _ = run(str(tmp_path / "host"), "pt_tiny_f32_stat_mix", "auto", 1)
    dev_root, dev = run(str(tmp_path / "dev"), "pt_tiny_f32_stat_mix", "force", 1, bound=8)
    n = len(list(tensor_records(load(dev_root, 0)["data"])))
    # At most one readback per 8 pending tensors (flushes wait for their entry to be written).
    assert 1 < dev["readbacks"][0] <= n // 8 + 1, (dev, n)
    assert dev["transfers"] == dev["readbacks"]
    for name in ("dump.json", "stack.json", "construct.json"):
        assert read(dev_root, 0, name) == read(host_root, 0, name), name


def test_sigkill_keeps_filled_entries_and_nulls_the_pending_ones(tmp_path):
    from numprobe import recover

    fixture = "pt_tiny_f32_stat_L1"
    full_root, _ = run(str(tmp_path / "full"), fixture, "auto", 1)
    full = load(full_root, 0)["data"]
    dead_root, dead = run(str(tmp_path / "dead"), fixture, "force", 1, bound=16, kill=True)
    pending = dead["pending"]
    assert pending > 0
    rd = rank_dir(dead_root, 0)
    for f in ("dump.json", "stack.json", "construct.json"):
        if os.path.exists(os.path.join(rd, f)):
            os.remove(os.path.join(rd, f))
    (got_dir, entries, torn, unfilled), = recover(dead_root)
    assert os.path.samefile(got_dir, rd)
    assert torn == 0
    assert unfilled == pending
    text = read(dead_root, 0, "dump.json")
    assert b"numprobe_pending" not in text
    got = json.loads(text)["data"]
    assert len(got) == entries
    filled = nulls = 0
    for name, body in got.items():
        if name not in full:
            # The driver's extra calls after the backward, made to leave statistics pending.
            assert name.startswith("Torch.abs."), name
            nulls += sum(all(r[k] is None for k in STATS) for r in tensor_records(body))
            continue
        want = full[name]
        assert list(body) == list(want), name
        mine, theirs = list(tensor_records(body)), list(tensor_records(want))
        assert len(mine) == len(theirs), name
        for r, w in zip(mine, theirs):
            assert list(r) == list(w), name
            if all(r[k] is None for k in STATS) and not all(w[k] is None for k in STATS):
                # Never read back: identity intact, statistics null.
                nulls += 1
                assert {k: v for k, v in r.items() if k not in STATS} == \
                    {k: v for k, v in w.items() if k not in STATS}, name
            else:
                filled += 1
                assert json.dumps(r) == json.dumps(w), name
    assert nulls == unfilled
    assert filled > 10 * nulls


def _record_in_process(root, tensors, mode, precision, summary_mode):
    """Records `tensors` as the inputs of one entry through a Recorder (no model, no hooks)
    and returns (dump.json bytes, readbacks)."""
    from numprobe.config import DumpConfig
    from numprobe.pytorch.recorder import Recorder

    cfg = DumpConfig({"precision": precision, "statistics": {"summary_mode": summary_mode}},
                     dump_path=root)
    rec = Recorder(cfg)
    rec.device_stats = mode
    assert rec.ensure_session()
    name = "Tensor.probe.0.forward"
    rec._entry(name, {"input_args": [rec.tensor(t, name, ("input", i))
                                     for i, t in enumerate(tensors)]})
    rec.end_step()
    return read(root, 0, "dump.json"), rec.device_readbacks


def _dtype_cases():
    import torch

    g = torch.Generator().manual_seed(5)
    base = torch.tensor([[1.5, -2.25, 3.0], [0.1, 0.2, -0.3]])
    inf, nan = float("inf"), float("nan")
    return [
        base, base.bfloat16(), base.half(), base.double(),
        torch.tensor([1.0, nan, inf, -inf, -2.0]), torch.tensor([inf, 1.0, 2.0]),
        torch.tensor([-inf, inf, 1.0]), torch.tensor([-inf, 1.0]).half(),
        torch.tensor([-0.0, -0.0]), torch.tensor([65504.0, 65504.0]).half(),
        torch.tensor(2.5), torch.tensor(-1.25).half(), torch.tensor(0.1).bfloat16(),
        torch.tensor(0.1, dtype=torch.float64), torch.tensor(nan),
        torch.tensor([[40, -20], [3, 4]]), torch.tensor([5, -128], dtype=torch.int8),
        torch.tensor([0, 255], dtype=torch.uint8), torch.tensor([7, -9], dtype=torch.int16),
        torch.tensor(-7, dtype=torch.int32), torch.tensor(2**62 + 1),
        torch.tensor([2**62 + 1, -(2**63)]),
        torch.tensor([True, False]), torch.tensor([True, True]), torch.tensor(False),
        torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.bool),
        torch.randn(64, 33, generator=g).t(), torch.randn(100003, generator=g) * 3 + 1,
        (torch.randn(4097, generator=g) * 100).bfloat16(),
        torch.tensor([1 + 1j, -3 + 4j], dtype=torch.complex64),
        torch.randn(5, generator=g).requires_grad_(),
    ]


@pytest.mark.parametrize("precision,summary_mode", [("low", "statistics"), ("high", "statistics"),
                                                    ("low", "md5")])
def test_dtype_rules_match_host_path(tmp_path, precision, summary_mode):
    """bool, integers (beyond 2**53 too), float16/bfloat16/float32/float64, 0-dim, empty,
    NaN/inf, strided and complex tensors: the device path's records equal the host path's."""
    cases = _dtype_cases()
    host, n_host = _record_in_process(str(tmp_path / "host"), cases, "auto", precision,
                                      summary_mode)
    dev, n_dev = _record_in_process(str(tmp_path / "dev"), cases, "force", precision,
                                    summary_mode)
    assert (n_host, n_dev) == (0, 1)
    assert dev == host
    recs = json.loads(dev)["data"]["Tensor.probe.0.forward"]["input_args"]
    assert len(recs) == len(cases)
    # Spot checks of msprobe's rules (spec section 3.1) in what both paths wrote.
    assert recs[20]["Max"] == 2**62 + 1 and recs[20]["Norm"] == 2**62 + 1
    assert recs[21]["Min"] == -(2**63) and recs[21]["Mean"] is None
    assert (recs[22]["Max"], recs[22]["Min"], recs[22]["Mean"]) == (True, False, None)
    assert recs[25]["Max"] is None and recs[25]["shape"] == [0, 3]
    if precision == "high":
        assert recs[0]["Mean"] is None and recs[10]["Mean"] == 2.5
    else:
        assert recs[1]["Norm"] == 4.0625 and recs[2]["Norm"] == 4.0546875


def _have_cuda():
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _have_cuda(), reason="needs a CUDA device")
@pytest.mark.parametrize("fixture", ["pt_tiny_f32_stat_mix", "pt_tiny_bf16_stat_L1"])
def test_cuda_step_syncs_once(tmp_path, fixture):
    """On a real GPU (default mode): no host sync while the step records (CUDA's sync debug
    mode raises on any), one readback per step, and the dump has the CPU run's entries and
    keys with msprobe's statistic types."""
    cpu_root, _ = run(str(tmp_path / "cpu"), fixture, "auto", 2)
    gpu_root, gpu = run(str(tmp_path / "gpu"), fixture, "auto", 2,
                        extra=["--device", "cuda", "--sync-debug"])
    assert gpu["readbacks"] == [1, 1], gpu
    for step in (0, 1):
        a, b = load(gpu_root, step)["data"], load(cpu_root, step)["data"]
        assert list(a) == list(b)
        for name in b:
            mine, theirs = list(tensor_records(a[name])), list(tensor_records(b[name]))
            assert [list(r) for r in mine] == [list(r) for r in theirs], name
            for r, w in zip(mine, theirs):
                assert (r["dtype"], r["shape"]) == (w["dtype"], w["shape"]), name
                assert [type(r[k]) for k in STATS] == [type(w[k]) for k in STATS], name


def test_pt_files_name_the_device_the_tensor_lived_on(tmp_path):
    """msprobe saves a device tensor from its device, so torch.save writes that device as the
    storage location; numprobe's .pt files say the same (and load with map_location)."""
    import zipfile

    import torch
    from numprobe._native import Session
    from numprobe.pytorch.recorder import _location

    assert _location(torch.device("cpu")) == "cpu"
    assert _location(torch.device("cuda", 1)) == "cuda:1"
    assert _location(torch.device("meta")) == "meta"
    s = Session(str(tmp_path / "d"), "tensor", "L1", "pytorch", str(tmp_path / "d" / "t"), False,
                "statistics")
    os.makedirs(tmp_path / "d" / "t")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for name, loc in (("a.pt", "cpu"), ("b.pt", "cuda:0"), ("c.pt", "npu:3")):
        s.save_tensor(str(tmp_path / "d" / "t" / name), t.data_ptr(), 48, "torch.float32",
                      [3, 4], loc)
    s.close()
    for name, loc in (("a.pt", "cpu"), ("b.pt", "cuda:0"), ("c.pt", "npu:3")):
        path = str(tmp_path / "d" / "t" / name)
        with zipfile.ZipFile(path) as z:
            pkl = z.read([n for n in z.namelist() if n.endswith("data.pkl")][0])
        assert loc.encode() in pkl, (name, pkl)
        got = torch.load(path, map_location="cpu", weights_only=True)
        assert torch.equal(got, t)
