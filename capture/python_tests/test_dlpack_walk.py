"""The native walk reads a tensor's device, shape, strides and data address from torch's DLPack
export (capture/py/src/dlpack.rs) instead of five attribute reads. The records must not change:
the same script dumps the same bytes with the export and without it (the attribute path), over
tensors whose layout the export describes in its own way or refuses: views at a storage
offset, transposes, stepped slices, zero strides, size-one dimensions, empty and 0-d tensors,
negative and conjugate views (which the export ignores), tensors above the record cache's
size (contiguous and at an offset), meta and sparse tensors (refused), several dtypes.
"""
import json
import os
import subprocess
import sys

from test_native_call_path import dump_files

SCRIPT = r"""
import json, sys
import torch
import numprobe.pytorch._values as values
from numprobe.pytorch import PrecisionDebugger

dump, mode = sys.argv[1], sys.argv[2]
calls = [0]
if mode == "attributes":
    values.TO_DLPACK = None
else:
    export = values.TO_DLPACK
    assert export is not None, "this torch has no torch._C._to_dlpack"

    def counted(t):
        # The script's tensors only (not the one-element tensors that learn the dtypes).
        calls[0] += any(t is x for x in tensors)
        return export(t)
    values.TO_DLPACK = counted
torch.manual_seed(0)
torch.set_num_threads(1)
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump, "rank": [], "step": [],
               "statistics": {"summary_mode": sys.argv[3]}}, f)
dbg = PrecisionDebugger(config_path=dump + ".json")
base = torch.randn(6, 8)
big = torch.randn(300, 128)  # 150 KiB: the record cache's path
c = torch.randn(5, dtype=torch.complex64)
tensors = [
    base, base[2:], base[:, 3:], base.t(), base[1:, ::2], base[:, 2:3],
    torch.randn(1, 8).expand(6, 8), torch.randn(6, 1, 3)[:, :, 1:], torch.randn(1, 6).t(),
    torch.zeros(0, 3), torch.zeros(3, 0).t(), torch.tensor(2.5), torch.tensor(-0.0),
    torch._neg_view(base), c, c.conj(), torch._neg_view(c),
    base.to(torch.float16), base.to(torch.bfloat16), base.to(torch.float64),
    (base * 10).to(torch.int64), base > 0, torch.arange(7, dtype=torch.uint8),
    torch.randn(4, 3, requires_grad=True), torch.nn.Parameter(torch.randn(3, 4)),
    big, big[7:], big[:, :64], big.t(),
    torch.tensor([float("nan"), float("-inf"), 1e-45, -0.0, 3e38]),
    torch.empty(3, 4, device="meta"), torch.randn(4, 4).to_sparse(),
]
for step in range(2):
    dbg.start()
    for t in tensors:
        torch.mul(t, 1)
    dbg.stop()
    dbg.step()
print(json.dumps({"calls": calls[0]}))
"""


def test_export_and_attributes_give_the_same_records(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    for summary in ("statistics", "md5"):
        got, calls = {}, {}
        for mode in ("dlpack", "attributes"):
            dump = str(tmp_path / f"{summary}_{mode}")
            # The DLPack and attribute paths: the torch reader, when one is built, stays out.
            r = subprocess.run([sys.executable, str(script), dump, mode, summary],
                               env=dict(os.environ, NUMPROBE_TORCH_SHIM="0"),
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, r.stderr[-3000:]
            calls[mode] = json.loads(r.stdout.strip().splitlines()[-1])["calls"]
            got[mode] = dump_files(dump)
        # The export was taken (not everything fell back to the attributes).
        assert calls["dlpack"] >= 2 * 25, calls
        assert calls["attributes"] == 0
        assert got["dlpack"] and set(got["dlpack"]) == set(got["attributes"])
        for k in got["attributes"]:
            assert got["dlpack"][k] == got["attributes"][k], (summary, k)
        data = json.loads(got["dlpack"][("step1", "dump.json")])["data"]
        # Every tensor above was recorded, each as an input of torch.mul.
        assert sum(n.startswith("Torch.mul.") and n.endswith(".forward") for n in data) == 32
