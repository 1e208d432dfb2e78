"""The native path of a recorded API call (capture/py/src/api_call.rs) against the recorder's
Python path (``call_api``): the same script dumps the same bytes either way.

The native path is what the default L1 configuration takes (a session may take both: the
Python path while statistics-thread jobs are pending); ``call_api`` stays for the other
configurations (both walk the values through walk.rs, which hands some back to the recorder's
``value``). The script below mixes what the walk reads itself (scalars, lists, tuples,
contiguous CPU tensors) with what it hands back (a non-contiguous tensor, a tensor above the
cached size, dtypes, devices, a namedtuple output, tiny float32 tensors whose Mean/Norm come
from torch), in-place calls, a backward pass (with a dropout of probability 0, which gets no
backward entry) and a call that raises.
"""
import glob
import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys
import torch
from numprobe.pytorch import PrecisionDebugger


class Seen(torch.Tensor):
    # The torch functions that reach a tensor subclass: on either path only the script's own
    # calls, never numprobe's reads of its attributes.
    names = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        Seen.names.append(getattr(func, "__qualname__", None) or repr(func))
        return super().__torch_function__(func, types, args, kwargs)


torch.manual_seed(0)
torch.set_num_threads(1)
dump, path, summary = sys.argv[1], sys.argv[2], sys.argv[3]
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump, "rank": [], "step": [],
               "statistics": {"summary_mode": summary}}, f)
dbg = PrecisionDebugger(config_path=dump + ".json")
calls = dbg.recorder.native_calls
if path == "python":
    dbg.recorder.native_calls = None
assert (dbg.recorder.native_calls is None) == (path == "python")
lin = torch.nn.Linear(8, 8)
x = torch.randn(4, 8, requires_grad=True)
big = torch.randn(256, 128)
sv = torch.randn(4, requires_grad=True).as_subclass(Seen)
for step in range(2):
    dbg.start()
    y = torch.nn.functional.linear(x, lin.weight, lin.bias)
    y = torch.add(y, 1, alpha=0.5).relu()
    z = y.t().contiguous()
    m = torch.max(y, dim=1)
    c = torch.cat([y, y], dim=0)
    n = torch.where(y > 0, y, torch.zeros_like(y))
    i = torch.arange(6).reshape(2, 3).sum()
    h = torch.ones(3, dtype=torch.float16, device="cpu") * 2
    t3 = torch.tensor([1.0, 2.0]).mul(3.0)
    b = torch.mul(big, 0.5)
    b.add_(1.0)
    nc = big.t().sin()
    w = torch.full((2,), 7, dtype=torch.int64)
    for k in range(3):
        # One call site, recorded by both paths in one session under "mixed": its stack
        # group is the session's, whichever path met the site first.
        if path == "mixed":
            dbg.recorder.native_calls = calls if k % 2 else None
        r = torch.cos(y)
    if path == "mixed":
        dbg.recorder.native_calls = calls
    q = torch.nn.functional.gelu(y, approximate="tanh")
    d0 = torch.nn.functional.dropout(y, 0.0)  # no backward entry (msprobe records none)
    d1 = torch.nn.functional.dropout(y, p=0.25)
    s2 = torch.mul(sv, 2.0)  # a subclass in and out: the backward hook reads its grad_fn
    try:
        torch.matmul(torch.ones(2, 3), torch.ones(2, 3))
    except RuntimeError:
        pass
    (q.sum() + c.mean() + n.sum() + m.values.sum() + d0.sum() + d1.sum()
     + s2.sum()).backward()
    dbg.stop()
    dbg.step()
with open(dump + "_seen.json", "w") as f:
    json.dump(Seen.names, f)
"""


def dump_files(root):
    out = {}
    for p in sorted(glob.glob(os.path.join(root, "step*", "*", "*.json"))):
        with open(p, "rb") as f:
            out[(p.split(os.sep)[-3], os.path.basename(p))] = f.read()
    return out


@pytest.mark.parametrize("summary", ["statistics", "md5"])
def test_native_and_python_paths_dump_the_same_bytes(tmp_path, summary):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    got, seen = {}, {}
    for path in ("native", "python", "mixed"):
        dump = str(tmp_path / f"dump_{path}")
        r = subprocess.run([sys.executable, str(script), dump, path, summary],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        got[path] = dump_files(dump)
        with open(dump + "_seen.json") as f:
            seen[path] = json.load(f)
    # The subclass saw the same torch functions either way (the native path turns them off
    # before its values reach the recorder, as the Python path does for the whole walk).
    assert seen["native"] == seen["python"]
    assert any("mul" in n for n in seen["native"]), seen["native"]
    assert got["native"] and set(got["native"]) == set(got["python"]) == set(got["mixed"])
    assert ("step1", "stack.json") in got["python"]
    for k in got["python"]:
        assert got["native"][k] == got["python"][k], k
        assert got["mixed"][k] == got["python"][k], k
    data = json.loads(got["native"][("step1", "dump.json")])["data"]
    # The calls above were recorded, the failing one with its inputs.
    for name in ("Functional.linear.0.forward", "Torch.max.0.forward", "Tensor.sin.0.forward",
                 "Tensor.add_.0.forward", "Torch.matmul.0.forward", "Functional.gelu.0.backward"):
        assert name in data, name
    assert "output" not in data["Torch.matmul.0.forward"]
    assert "Functional.dropout.1.backward" in data and "Functional.dropout.0.backward" not in data
    assert "Torch.max.0.backward" in data
    assert "Torch.mul.1.backward" in data


def test_stack_key_packs_each_frames_code_and_offset():
    """The call-site key the stack cache is keyed by: `skip`, then each frame's code object
    address and instruction offset (what ``f_lasti`` says), outwards to the last frame. Read
    through CPython's PyFrame_GetLasti where the interpreter has it, so checked against the
    frames' own attributes."""
    import struct
    from numprobe._native import stack_key

    def site():
        key = stack_key(sys._getframe(), 12345)
        # The callers are suspended at their calls, so their offsets are those the key saw.
        want, f = [], sys._getframe()
        while f is not None:
            want += [id(f.f_code), f.f_lasti]
            f = f.f_back
        return key, want

    key, want = site()
    words = list(struct.unpack(f"<{len(key) // 8}q", key))
    assert words[0] == 12345 and len(words) == 1 + len(want)
    assert words[1] == want[0] and 0 < words[2] < want[1]  # site() went on past the call
    assert words[3:] == want[2:]
    # Another call from the same line gives the same key, one from another line another.
    keys = [site()[0] for _ in range(2)]
    assert keys[0] == keys[1] and keys[0] != key


STRIDED = r"""
import json, sys
import torch
from numprobe.pytorch import PrecisionDebugger

torch.manual_seed(0)
dump = sys.argv[1]
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump, "rank": [], "step": [],
               "statistics": {"summary_mode": "statistics"}}, f)
dbg = PrecisionDebugger(config_path=dump + ".json")
base = torch.randn(6, 40, 24)
base[0, 1, 2] = float("nan")
base[1, 2, 3] = float("-inf")
base[2, 3, 4] = -0.0
def views(b):
    return [b.transpose(1, 2), b[:, ::3, 1:], b.permute(2, 0, 1)[3:],
            b[:1, :1].expand(5, 7, 24), b.narrow(2, 5, 9)]
cases = views(base)
for dt in (torch.bfloat16, torch.float16, torch.float64):
    cases += views(base.to(dt))[:3]
cases += [(base * 100).to(torch.int64)[:, ::2], (base > 0)[:, 1::2]]
# Large enough for torch to split its reductions between threads.
big = torch.randn(8, 96, 64) * 1e3
big[3, 4, 5] = -0.0
cases += [big.permute(2, 0, 1), big.transpose(0, 1)[:, 2:]]
want = []
dbg.start()
for c in cases:
    assert not c.is_contiguous()
    torch.add(c, 0)
    torch.add(c.contiguous(), 0)
    want.append([torch.mean(c).item(), torch.norm(c).item()] if c.dtype == torch.float32 else None)
dbg.stop()
with open(dump + ".want.json", "w") as f:
    json.dump(want, f)
"""


def test_strided_tensors_are_recorded_as_their_contiguous_copies(tmp_path):
    """A non-contiguous tensor (transposed, sliced with steps, permuted, expanded with zero
    strides, at a storage offset; float and integer dtypes, NaN, -inf, -0.0; sizes torch
    reduces on several threads) is recorded as its contiguous copy, but for float32's Mean
    and Norm, which are torch's own over the strided tensor (msprobe's: torch reduces it in
    an order its strides set; a transpose's memory is read in place for them)."""
    script = tmp_path / "strided.py"
    script.write_text(STRIDED)
    dump = str(tmp_path / "dump")
    r = subprocess.run([sys.executable, str(script), dump], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(open(glob.glob(os.path.join(dump, "step0", "*", "dump.json"))[0]).read())
    data = data["data"]
    with open(dump + ".want.json") as f:
        want = json.load(f)
    assert len(want) == 18
    for i, mean_norm in enumerate(want):
        strided = data[f"Torch.add.{2 * i}.forward"]["input_args"][0]
        copy = data[f"Torch.add.{2 * i + 1}.forward"]["input_args"][0]
        # Compared as JSON text: NaN equals NaN there, and -0.0 differs from 0.0.
        if mean_norm is None:
            assert json.dumps(strided) == json.dumps(copy), i
        else:
            for k in ("type", "dtype", "shape", "Max", "Min", "requires_grad"):
                assert json.dumps(strided[k]) == json.dumps(copy[k]), (i, k)
            got = [strided["Mean"], strided["Norm"]]
            assert json.dumps(got) == json.dumps(mean_norm), (i, got, mean_norm)


CACHE = r"""
import json, sys
import torch
import numprobe.pytorch._values as values
from numprobe.pytorch import PrecisionDebugger

torch.manual_seed(0)
torch.set_num_threads(1)
dump, cached = sys.argv[1], sys.argv[2] == "1"
if not cached:
    values._CACHE_MIN_BYTES = 1 << 62  # every tensor summarised afresh
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump, "rank": [], "step": [],
               "statistics": {"summary_mode": "statistics"}}, f)
dbg = PrecisionDebugger(config_path=dump + ".json")
dbg.start()
a = torch.randn(128, 256)                # 128 KiB: above the cached size
torch.abs(a); torch.abs(a)               # unchanged: the second record is the first's
a.data.mul_(2.0)                         # a write that bypasses a's version counter
torch.abs(a)
a.numpy()[:] = 3.0                       # a write through a numpy alias
torch.abs(a)
a.add_(1.0)                              # in place: the version counter moves
torch.abs(a)
a.requires_grad_(True)
torch.abs(a)
v = a.detach().view(256, 128)            # same memory, another shape
torch.abs(v)
for i in range(4):                       # freed and allocated again (often at one address)
    b = torch.full((128, 256), float(i))
    torch.abs(b)
    del b
h = torch.randn(64, 512, dtype=torch.float16) * 100
torch.abs(h); h[3, 4] = float("nan"); torch.abs(h)
print(len(dbg.recorder.stats_cache))
dbg.stop()
"""


def test_record_cache_never_serves_a_changed_tensor(tmp_path):
    """Large tensors' records are reused while their memory is unchanged (the walk's cache,
    shared with the recorder's): writes through ``.data``, a numpy alias, in-place ops, a
    changed requires_grad or shape, and memory freed and reused all give the records a run
    without the cache writes. (A write that bypasses the version counter and changes none of
    the 64 sampled words, one element through a numpy alias, is what the cache cannot see.)"""
    script = tmp_path / "cache.py"
    script.write_text(CACHE)
    got, sizes = {}, {}
    for cached in ("1", "0"):
        dump = str(tmp_path / f"dump{cached}")
        r = subprocess.run([sys.executable, str(script), dump, cached], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        sizes[cached] = int(r.stdout.strip().splitlines()[-1])
        got[cached] = dump_files(dump)
    assert got["1"] and got["1"] == got["0"]
    # The cache was used (and not when turned off).
    assert sizes["1"] > 0 and sizes["0"] == 0
    data = json.loads(got["1"][("step0", "dump.json")])["data"]
    maxes = [data[f"Torch.abs.{i}.forward"]["output"][0]["Max"] for i in range(6)]
    assert maxes[0] == maxes[1] and maxes[3] == 3.0 and maxes[4] == maxes[5] == 4.0


def _run_and_load(tmp_path, script_text, *args):
    """Runs a script that dumps step 0 into argv[1] (`args` after it) and prints what torch
    says as its last line; returns (that, the dump's data)."""
    script = tmp_path / "script.py"
    script.write_text(script_text)
    dump = str(tmp_path / "dump")
    r = subprocess.run([sys.executable, str(script), dump, *args], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = glob.glob(os.path.join(dump, "step0", "*", "dump.json"))
    with open(path) as f:
        return json.loads(r.stdout.strip().splitlines()[-1]), json.load(f)["data"]


OVERFLOW_SCRIPT = r"""
import json, sys
import torch
from numprobe.pytorch import PrecisionDebugger

dump = sys.argv[1]
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump, "rank": [], "step": [],
               "statistics": {"summary_mode": "statistics"}}, f)
dbg = PrecisionDebugger(config_path=dump + ".json")
torch.manual_seed(0)
# An attention mask as T5 and BART build it: torch's float32 sum of it overflows.
causal = torch.tril(torch.ones(8, 8, dtype=torch.bool))
x = torch.randn(2, 4, 8, 8) * 0.1
big = torch.full((2, 3), 1e20)
dbg.start()
masked = torch.where(causal, x, torch.finfo(torch.float32).min)
squares = torch.mul(big, 1.0)  # its squares overflow, its sum does not
# bfloat16, which torch sums in float32.
masked16 = torch.where(causal, x.bfloat16(), torch.finfo(torch.bfloat16).min)
dbg.stop()
dbg.step()
print(json.dumps({"Torch.where.0.forward": [masked.mean().item(), masked.norm().item()],
                  "Torch.mul.0.forward": [squares.mean().item(), squares.norm().item()],
                  "Torch.where.1.forward": [masked16.mean().item(), masked16.norm().item()]}))
"""


def test_float32_sums_that_overflow_are_recorded_as_torch_computes_them(tmp_path):
    """msprobe records torch.mean/torch.norm, whose float32 sums overflow to ±inf on data a
    wider sum keeps finite (a mask filled with float32's minimum): the dump must say -inf
    where torch does, not the finite mean of the exact sum."""
    torch_says, data = _run_and_load(tmp_path, OVERFLOW_SCRIPT)
    assert torch_says["Torch.where.0.forward"][0] == float("-inf")
    assert torch_says["Torch.where.1.forward"][0] == float("-inf")
    for name, (mean, norm) in torch_says.items():
        out = data[name]["output"][0]
        assert (out["Mean"], out["Norm"]) == (mean, norm), name


# Records `torch.mul(t, 1.0)` of each of `tensors` (step 0) and prints torch's own Mean and
# Norm of the outputs: the end of the scripts below.
MUL_EACH_AND_SAY = r"""
dbg = PrecisionDebugger(config_path=dump + ".json")
dbg.start()
outs = [torch.mul(t, 1.0) for t in tensors]
dbg.stop()
dbg.step()
print(json.dumps([[o.mean().item(), o.norm().item()] for o in outs]))
"""


BF16_SCRIPT = r"""
import json, sys
import torch
from numprobe.pytorch import PrecisionDebugger

dump = sys.argv[1]
torch.set_num_threads(1)
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump, "rank": [], "step": [],
               "statistics": {"summary_mode": "statistics"}}, f)
tensors = []
# Values whose squares fall below float32's normal range (AdamW's second moments of tiny
# gradients): torch's float32 norm loses bits there, a wider sum does not.
for seed in (144, 157, 167):
    g = torch.Generator().manual_seed(seed)
    tensors.append((torch.rand(64, generator=g) * 1e-21).bfloat16())
g = torch.Generator().manual_seed(0)
for n in (8, 9, 100, 4096, 40000):
    tensors.append((torch.randn(n, generator=g) * torch.rand(n, generator=g) * 10).bfloat16())
""" + MUL_EACH_AND_SAY


def test_bfloat16_mean_and_norm_are_torchs_to_the_last_bit(tmp_path):
    """torch reduces bfloat16 as float32 (its values converted, summed in float32's order,
    then rounded to bfloat16): the dump's Mean and Norm are those bits, also where float32
    accumulation loses precision and a wider sum would round to the next bfloat16."""
    torch_says, data = _run_and_load(tmp_path, BF16_SCRIPT)
    got = [[data[f"Torch.mul.{i}.forward"]["output"][0][k] for k in ("Mean", "Norm")]
           for i in range(len(torch_says))]
    assert got == torch_says


REDUCED_ORDER_SCRIPT = r"""
import importlib.util, json, os, sys
import numpy as np
import torch
from numprobe.pytorch import PrecisionDebugger

dump, testdata, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
spec = importlib.util.spec_from_file_location(
    "gen", os.path.join(testdata, "torch_order", "gen_torch_order.py"))
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
with open(os.path.join(testdata, "torch_order", "torch-2.15-cpu.json")) as f:
    cases = [c for c in json.load(f)["cases"] if c["kind"] == "order"]
tensors = []
for c in cases:
    row = gen.bits([c["seed"]], c["n"], c["dtype"], c["spread"])[0]
    tensors.append(torch.from_numpy(row.view(np.int16).copy()).view(getattr(torch, c["dtype"])))
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump, "rank": [], "step": [],
               "statistics": {"summary_mode": "statistics"}}, f)
""" + MUL_EACH_AND_SAY


@pytest.mark.parametrize("threads", [1, 2])
def test_bfloat16_and_float16_norms_follow_their_own_kernels(tmp_path, threads):
    """torch's norm adds a bfloat16 tensor's squares in 16-element vectors and a float16
    tensor's one by one, unlike float32's 8-element vectors: on the recorded tensors whose
    results sit next to a rounding tie (testdata/torch_order), the dump's Mean and Norm are
    live torch's to the last bit."""
    testdata = os.path.realpath(os.environ.get("NUMPROBE_TESTDATA")
                                or os.path.join(os.path.dirname(__file__), "..", "..", "testdata"))
    torch_says, data = _run_and_load(tmp_path, REDUCED_ORDER_SCRIPT, testdata, str(threads))
    assert len(torch_says) >= 12
    got = [[data[f"Torch.mul.{i}.forward"]["output"][0][k] for k in ("Mean", "Norm")]
           for i in range(len(torch_says))]
    assert got == torch_says
