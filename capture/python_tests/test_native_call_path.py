"""The native path of a recorded API call (capture/py/src/api_call.rs) against the recorder's
Python path (``call_api``): the same script dumps the same bytes either way.

The native path is what the default L1 configuration takes; ``call_api`` stays for the other
configurations (both walk the values through walk.rs, which hands some back to the recorder's
``value``). The script below mixes what the walk reads itself (scalars, lists, tuples,
contiguous CPU tensors) with what it hands back (a non-contiguous tensor, a tensor above the
cached size, dtypes, devices, a namedtuple output, tiny float32 tensors whose Mean/Norm come
from torch), in-place calls, a backward pass and a call that raises.
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

torch.manual_seed(0)
torch.set_num_threads(1)
dump, path, summary = sys.argv[1], sys.argv[2], sys.argv[3]
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump, "rank": [], "step": [],
               "statistics": {"summary_mode": summary}}, f)
dbg = PrecisionDebugger(config_path=dump + ".json")
if path == "python":
    dbg.recorder.native_calls = None
assert (dbg.recorder.native_calls is None) == (path == "python")
lin = torch.nn.Linear(8, 8)
x = torch.randn(4, 8, requires_grad=True)
big = torch.randn(256, 128)
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
    q = torch.nn.functional.gelu(y, approximate="tanh")
    try:
        torch.matmul(torch.ones(2, 3), torch.ones(2, 3))
    except RuntimeError:
        pass
    (q.sum() + c.mean() + n.sum() + m.values.sum()).backward()
    dbg.stop()
    dbg.step()
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
    got = {}
    for path in ("native", "python"):
        dump = str(tmp_path / f"dump_{path}")
        r = subprocess.run([sys.executable, str(script), dump, path, summary],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        got[path] = dump_files(dump)
    assert got["native"] and set(got["native"]) == set(got["python"])
    for k in got["python"]:
        assert got["native"][k] == got["python"][k], k
    data = json.loads(got["native"][("step1", "dump.json")])["data"]
    # The calls above were recorded, the failing one with its inputs.
    for name in ("Functional.linear.0.forward", "Torch.max.0.forward", "Tensor.sin.0.forward",
                 "Tensor.add_.0.forward", "Torch.matmul.0.forward", "Functional.gelu.0.backward"):
        assert name in data, name
    assert "output" not in data["Torch.matmul.0.forward"]
