"""Records MindSpore's own CPU `mint.mean` and `ops.norm` (the calls msprobe 26.2 makes, with
its `ops.norm` fallback on the CPU) of deterministic tensors into mindspore-2.7.1-cpu.json,
for stats-gpu's `ms_order` test (stats-gpu/tests/ms_order_vectors.rs).

    /var/cache/numprobe/venv-ms/bin/python testdata/ms_order/gen_ms_order.py

Each thread count runs in its own process (MindSpore fixes `runtime_num_threads` at its first
kernel). The inputs come from `values()`, a 64-bit LCG the Rust test repeats, spread over a wide
range of magnitudes so that the summation order shows in the rounded results.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "mindspore-2.7.1-cpu.json")
THREADS = [1, 2, 4]
MASK = (1 << 64) - 1


def values(seed, n, spread):
    """n floats: (2u - 1) * 2^(e - spread/2), u and e from the LCG (as float64; the test
    rounds them to the case's dtype)."""
    state = seed & MASK
    out = []
    for _ in range(n):
        state = (state * 6364136223846793005 + 1442695040888963407) & MASK
        u = (state >> 40) / float(1 << 24)
        state = (state * 6364136223846793005 + 1442695040888963407) & MASK
        e = (state >> 40) % (spread + 1)
        out.append((2.0 * u - 1.0) * 2.0 ** (e - spread // 2))
    return out


def cases():
    out = []
    seed = 1
    for dtype in ("float32", "float16"):
        spreads = (0, 12, 40) if dtype == "float32" else (0, 6)
        sizes = list(range(1, 41)) + [63, 64, 65, 127, 255, 1000, 4097]
        if dtype == "float32":
            sizes += [65536, 199999]
        for n in sizes:
            for spread in spreads:
                out.append({"dtype": dtype, "shape": [n], "seed": seed, "spread": spread})
                seed += 1
        for shape in ([2, 3], [4, 6], [3, 5, 7], [24, 32], [96, 32], [2, 1, 50], [8, 513],
                      [3, 100000], [5, 1], [64, 1], [512, 1, 1], [1, 512, 1], [3, 64, 1],
                      [1000, 1, 1, 1], [1, 1, 700], [2, 1], [4, 1, 1]):
            if dtype == "float16" and shape == [3, 100000]:
                continue
            for spread in spreads:
                out.append({"dtype": dtype, "shape": shape, "seed": seed, "spread": spread})
                seed += 1
    return out


def run_child(threads):
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor, mint, ops

    ms.set_context(mode=ms.PYNATIVE_MODE, runtime_num_threads=threads)
    ms.set_device("CPU")
    res = []
    for c in cases():
        n = int(np.prod(c["shape"]))
        arr = np.array(values(c["seed"], n, c["spread"]), dtype=c["dtype"]).reshape(c["shape"])
        t = Tensor(arr)
        mean = mint.mean(t).asnumpy()
        norm = ops.norm(t).asnumpy()
        bits = np.uint32 if c["dtype"] == "float32" else np.uint16
        res.append([int(mean.view(bits)), int(norm.view(bits))])
    json.dump(res, sys.stdout)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        run_child(int(sys.argv[2]))
        return
    env = dict(os.environ, GLOG_v="3")
    per_threads = {}
    for t in THREADS:
        r = subprocess.run([sys.executable, __file__, "--child", str(t)], env=env,
                           capture_output=True, text=True, check=True)
        per_threads[str(t)] = json.loads(r.stdout)
    import mindspore

    out = {"mindspore": mindspore.__version__, "ops": "mint.mean, ops.norm (CPU, PyNative)",
           "lcg": "state = state * 6364136223846793005 + 1442695040888963407 (mod 2^64)",
           "cases": []}
    for i, c in enumerate(cases()):
        c = dict(c)
        c["mean_norm_bits"] = {t: per_threads[t][i] for t in per_threads}
        out["cases"].append(c)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
