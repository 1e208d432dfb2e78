"""Records torch's own CPU `torch.mean` and `torch.norm` (the calls msprobe 26.2 makes) of
deterministic bfloat16 and float16 tensors into torch-2.15-cpu.json, for stats-gpu's
`torch_order_vectors` test (stats-gpu/tests/torch_order_vectors.rs).

    /var/cache/numprobe/venv/bin/python testdata/torch_order/gen_torch_order.py

Each tensor's bits come from `bits()`, a 64-bit LCG the Rust test repeats (no rounding on
either side). Two kinds of case, each at 1 and 2 torch threads (a process per count):
`sweep`, lengths around the kernels' vector widths, grain and thread split; and `order`,
tensors found by search among many seeds where torch's result differs from the float64 sums
rounded once and from the float32 kernel's order applied to the values (the cases that pin
down each dtype's own order: they sit next to a rounding tie).
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "torch-2.15-cpu.json")
THREADS = [1, 2]
MUL = np.uint64(6364136223846793005)
ADD = np.uint64(1442695040888963407)
# (mantissa bits, exponent bias) of the 16-bit float formats.
FORMATS = {"bfloat16": (7, 127), "float16": (10, 15)}


def bits(seeds, n, dtype, spread):
    """uint16 bit patterns, one row of n per seed: a random sign and mantissa, the exponent
    within spread/2 binades of 1.0."""
    mbits, bias = FORMATS[dtype]
    state = np.array(seeds, dtype=np.uint64)
    out = np.empty((len(state), n), dtype=np.uint16)
    with np.errstate(over="ignore"):
        for i in range(n):
            state = state * MUL + ADD
            r = state >> np.uint64(40)
            state = state * MUL + ADD
            e = (state >> np.uint64(40)) % np.uint64(spread + 1)
            sign = (r & np.uint64(1)) << np.uint64(15)
            mant = (r >> np.uint64(1)) & np.uint64((1 << mbits) - 1)
            exp = (e.astype(np.int64) - spread // 2 + bias).astype(np.uint64) << np.uint64(mbits)
            out[:, i] = (sign | exp | mant).astype(np.uint16)
    return out


def sweep_cases():
    out = []
    seed = 1
    for dtype in FORMATS:
        spreads = (0, 6) if dtype == "float16" else (0, 20)
        for n in list(range(8, 41)) + [63, 64, 65, 127, 255, 1000, 4097, 32768, 40000,
                                       65536, 65536 + 24, 100003]:
            for spread in spreads:
                out.append({"dtype": dtype, "n": n, "seed": seed, "spread": spread,
                            "kind": "sweep"})
                seed += 1
    return out


def run_case(torch, dtype, n, seed, spread):
    b = bits([seed], n, dtype, spread)[0]
    t = torch.from_numpy(b.view(np.int16).copy()).view(getattr(torch, dtype))
    f32 = lambda x: int(np.float32(x.float().item()).view(np.uint32))
    return f32(t.mean()), f32(t.norm())


def old_guesses(torch, t):
    """What numprobe computed before each dtype's own order (the float64 sums rounded once;
    the float32 kernel's order on the float32 values): the bits as float32 of the result."""
    f = t.float()
    d = f.double()
    dt = t.dtype
    as_bits = lambda v: int(np.float32(torch.tensor(float(v), dtype=torch.float32).to(dt)
                                         .float().item()).view(np.uint32))
    wide = (as_bits(np.float32(d.sum().item() / t.numel())),
            as_bits(np.float32(np.sqrt((d * d).sum().item()))))
    f32_order = (as_bits(f.mean().item()), as_bits(f.norm().item()))
    return {wide, f32_order}


def to_bfloat16(x):
    """float32 values rounded to bfloat16 (to nearest even), as float32."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def lanes_norm(sq, lanes_end):
    """Rows of float32 squares added as a norm kernel does: 8 float32 lanes over the first
    lanes_end, the lanes in order, then the rest one by one."""
    acc = np.zeros((len(sq), 8), np.float32)
    if lanes_end:
        acc = np.cumsum(sq[:, :lanes_end].reshape(len(sq), -1, 8), axis=1,
                        dtype=np.float32)[:, -1, :]
    total = acc[:, 0].copy()
    for j in range(1, 8):
        total = (total + acc[:, j]).astype(np.float32)
    for k in range(lanes_end, sq.shape[1]):
        total = (total + sq[:, k]).astype(np.float32)
    return np.sqrt(total).astype(np.float32)


def likely_rows(rows, dtype):
    """Rows whose norm may tell the bfloat16 kernel's order from the float32 kernel's: the
    two orders, simulated, round to different bfloat16 values (found many times faster than
    asking torch row by row; torch then has the last word)."""
    if dtype != "bfloat16":
        return range(len(rows))
    x = (rows.astype(np.uint32) << 16).view(np.float32)
    sq = (x * x).astype(np.float32)
    n = x.shape[1]
    own = to_bfloat16(lanes_norm(sq, n - n % 16))
    f32_order = to_bfloat16(lanes_norm(sq, n - n % 8))
    return np.nonzero(own != f32_order)[0]


def search(torch, dtype, want, sizes, spread, first_seed, batch=400):
    """Seeds whose tensors torch reduces to something other than every old guess."""
    found = []
    seed = first_seed
    while len(found) < want:
        n = sizes[(seed // batch) % len(sizes)]
        rows = bits(range(seed, seed + batch), n, dtype, spread)
        for i in map(int, likely_rows(rows, dtype)):
            row = rows[i]
            t = torch.from_numpy(row.view(np.int16).copy()).view(getattr(torch, dtype))
            got = run_case(torch, dtype, n, seed + i, spread)
            if got not in old_guesses(torch, t):
                found.append({"dtype": dtype, "n": n, "seed": seed + i, "spread": spread,
                              "kind": "order"})
                if len(found) == want:
                    break
        seed += batch
    return found


def child(threads):
    import torch
    torch.set_num_threads(threads)
    cases = json.load(sys.stdin)
    if threads == THREADS[0]:
        # Found at one thread; the two-thread run records them too.
        cases += search(torch, "bfloat16", 8, [24, 56, 88, 120, 248], 20, 10**6, batch=8000)
        cases += search(torch, "float16", 6, [2000, 5000], 6, 2 * 10**6, batch=100)
        cases += search(torch, "float16", 6, [70000, 150000], 6, 3 * 10**6, batch=20)
    for c in cases:
        c.setdefault("mean_norm_bits", {})[str(threads)] = list(
            run_case(torch, c["dtype"], c["n"], c["seed"], c["spread"]))
    json.dump(cases, sys.stdout)


def main():
    if len(sys.argv) > 1:
        child(int(sys.argv[1]))
        return
    import torch
    cases = sweep_cases()
    for threads in THREADS:
        r = subprocess.run([sys.executable, __file__, str(threads)], input=json.dumps(cases),
                           capture_output=True, text=True, check=True)
        cases = json.loads(r.stdout)
    doc = {"torch": torch.__version__,
           "note": "torch.mean/torch.norm of LCG bfloat16/float16 tensors (gen_torch_order.py);"
                   " mean_norm_bits: the results as float32 bits, by torch thread count",
           "cases": cases}
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=0)
        f.write("\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
