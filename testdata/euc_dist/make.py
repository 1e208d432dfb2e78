"""Regenerates euc_dist.json: msprobe's EucDist, np.linalg.norm(n - b, ord=2) on float64, for
float32 tensors of LCG values (reproduced bit for bit by compare/tests/euc_dist.rs), with
OpenBLAS on 1 and 2 threads.

Run with the peer venv's python (numpy 1.26.4, OpenBLAS 0.3.23, Haswell kernel) on a machine
with at least 2 CPUs: `OPENBLAS_NUM_THREADS=T python make.py T` for T in 1 and 2 merges T's cases
into euc_dist.json.
"""
import json
import os
import sys

import numpy as np

MASK = (1 << 64) - 1


def lcg_f32(seed, n, scale):
    s = seed & MASK
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) & MASK
        out[i] = np.float32(((s >> 11) / float(1 << 53) * 2.0 - 1.0) * scale)
    return out


def main():
    threads = int(sys.argv[1])
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "euc_dist.json")
    doc = {"numpy": np.__version__, "cases": []}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc["cases"] = [c for c in doc["cases"] if c["threads"] != threads]
    for n in [2, 7, 16, 17, 31, 100, 1000, 4097, 9999, 10000, 10001, 10017, 30003, 100000]:
        for seed in (1, 2):
            x = lcg_f32(seed, n, 3.0)
            y = lcg_f32(seed + 100, n, 3.0)
            # A few exact-zero differences and inf/nan at matching places, as msprobe zeroes.
            y[::7] = x[::7]
            if n > 20:
                x[5] = y[5] = np.inf
                x[9] = y[9] = np.nan
            xf, yf = x.astype(float), y.astype(float)
            bad = ~np.isfinite(xf)
            xf[bad] = 0
            yf[bad] = 0
            norm = np.linalg.norm(xf - yf, ord=2)
            doc["cases"].append(
                {"n": n, "seed": seed, "threads": threads, "euc_dist": float(norm).hex()}
            )
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


main()
