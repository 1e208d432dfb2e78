"""Regenerates strided/: torch.save of strided views (broadcast, transposed, sliced, offset)
and strided/expected.json, torch's own statistics of each view (the values msprobe records:
torch.max, torch.min, torch.mean, torch.norm on the view itself) and the CRC-32 of its C-order
bytes (msprobe's md5 mode). numprobe's cli/tests/hostile_readers.rs reads both.

Run: /var/cache/numprobe/venv/bin/python testdata/hostile/make_strided.py (from the repository root).
"""
import json
import os
import zlib

import torch

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "strided")
os.makedirs(here, exist_ok=True)
g = torch.Generator().manual_seed(15)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)


views = {
    # Broadcast (stride 0) outer and inner dimensions.
    "expand_outer_f32": randn(7).expand(3001, 7),
    "expand_inner_f32": randn(5, 1).expand(5, 4099),
    "expand_middle_f16": randn(3, 1, 4, dtype=torch.float16).expand(3, 257, 4),
    # Integer-valued floats: every sum is exact in any order, so Mean/Norm must match exactly.
    "expand_exact_f32": torch.arange(-3.0, 5.0).expand(1000, 8),
    "transposed_exact_f32": torch.arange(-60.0, 60.0).reshape(10, 12).t(),
    "transposed_f32": randn(300, 200).t(),
    "transposed_i64": torch.arange(-50, 70).reshape(10, 12).t(),
    "sliced_f32": randn(100, 100)[::3, 1::2],
    "sliced_bf16": randn(64, 64, dtype=torch.bfloat16)[1::5, ::2],
    "offset_sliced_f64": randn(50, 60, dtype=torch.float64)[5:, 7:40],
}

expected = {}
for name, t in views.items():
    assert not t.is_contiguous(), name
    torch.save(t, os.path.join(here, name + ".pt"))
    rec = {
        "dtype": str(t.dtype),
        "shape": list(t.shape),
        "Max": t.max().item(),
        "Min": t.min().item(),
        "md5": "%08x" % zlib.crc32(t.contiguous().view(torch.uint8).numpy().tobytes()),
    }
    # msprobe (precision low) records no Mean/Norm for float64 and integer tensors.
    if t.is_floating_point() and t.dtype != torch.float64:
        rec["Mean"] = t.mean().item()
        rec["Norm"] = t.norm().item()
    expected[name] = rec

with open(os.path.join(here, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1, sort_keys=True)
    f.write("\n")
