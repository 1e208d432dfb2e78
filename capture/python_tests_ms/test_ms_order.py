"""Mean and Norm of numprobe's MindSpore records against MindSpore's own CPU `mint.mean` and
`ops.norm` (what msprobe 26.2 records on the CPU), live: random float32 and float16 tensors of
many shapes and sizes, every value bit for bit; Max and Min exact. A separate process per thread
count (MindSpore fixes `runtime_num_threads` at its first kernel)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(r"""
    import json, sys
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor, mint, ops
    from numprobe import _native

    ms.set_context(mode=ms.PYNATIVE_MODE, runtime_num_threads=int(sys.argv[1]))
    ms.set_device("CPU")
    rng = np.random.default_rng(int(sys.argv[2]))
    shapes = [[n] for n in (1, 2, 3, 5, 8, 17, 24, 100, 1000, 5000)]
    shapes += [[2, 3], [96, 32], [24, 1], [512, 1, 1], [1, 300, 1], [3, 64, 1], [4, 5, 6, 7],
               [8, 1, 16], [130, 257]]
    s = _native.Session(sys.argv[3], "statistics", "L1", "mindspore", None, True,
                        "statistics", "low")
    wants, n = [], 0
    for dtype in ("float32", "float16"):
        for shape in shapes:
            for scale_exp in (0, 8):
                size = int(np.prod(shape))
                spread = rng.integers(-scale_exp, scale_exp + 1, size) if scale_exp else 0
                a = (rng.standard_normal(size) * 2.0 ** spread).astype(dtype).reshape(shape)
                if dtype == "float16":
                    a = np.clip(a, -200, 200).astype(dtype)
                t = Tensor(a)
                want = {"Max": mint.max(t).asnumpy().item(), "Min": mint.min(t).asnumpy().item(),
                        "Mean": mint.mean(t).asnumpy().item(), "Norm": ops.norm(t).asnumpy().item()}
                name = "Float32" if dtype == "float32" else "Float16"
                rec = s.tensor(a.ctypes.data, a.nbytes, name, list(a.shape), None, None)
                s.entry(f"T.{n}.forward", {"input_args": [rec]})
                wants.append((f"{dtype} {shape}", want))
                n += 1
    s.close()
    with open(sys.argv[3] + "/dump.json") as f:
        data = json.load(f)["data"]
    errs = []
    for i, (what, want) in enumerate(wants):
        got = data[f"T.{i}.forward"]["input_args"][0]
        for k, v in want.items():
            if got[k] != v:
                errs.append(f"{what} {k}: {got[k]!r} != {v!r}")
    json.dump({"cases": n, "errors": errs}, sys.stdout)
""")


@pytest.mark.parametrize("threads", [1, 3])
def test_mean_and_norm_are_mindspores_own_bit_for_bit(tmp_path, threads):
    r = subprocess.run([sys.executable, "-c", CHILD, str(threads), str(11 + threads),
                        str(tmp_path)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, GLOG_v="3"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["cases"] >= 70
    assert not out["errors"], "\n".join(out["errors"][:20])
