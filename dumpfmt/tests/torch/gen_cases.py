"""Writes tensors with torch.save and np.save for numprobe's reader tests.

Usage: gen_cases.py OUTDIR. For every case NAME it writes NAME.pt and/or NAME.npy, NAME.raw (the
C-contiguous little-endian bytes the reader must return) and a line in OUTDIR/manifest.tsv:
NAME <tab> file <tab> dtype <tab> shape <tab> kind, where kind is `exact` when numprobe's writer
must reproduce the file byte for byte (a contiguous save), `view` for strided saves, `npyconv` for
an .npy of a bf16/float8 tensor converted to float32 (the Rust writer gets the original dtype's
bytes in NAME.src), `reject` for files the reader must refuse, `text` for numpy string arrays.
"""
import os
import sys

import numpy as np
import torch

out = sys.argv[1]
rng = np.random.default_rng(1234)
lines = []

DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8,
    torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
    torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
]
SHAPES = [(2, 3), (), (0,), (2, 0, 3), (5,), (3, 4, 5), (1, 1, 1, 1, 7), (300,)]


def raw(t):
    if t.numel() == 0:
        return b""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def random_tensor(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.from_numpy(rng.integers(0, 2, n).astype(np.bool_)).reshape(shape)
    size = torch.empty((), dtype=dtype).element_size()
    b = torch.from_numpy(np.frombuffer(rng.bytes(n * size), dtype=np.uint8).copy())
    return b.view(dtype).reshape(shape)


def shape_str(shape):
    return ",".join(str(d) for d in shape)


def emit(name, file, t, kind):
    lines.append(f"{name}\t{file}\t{str(t.dtype)}\t{shape_str(t.shape)}\t{kind}")


def save_pt(name, t, kind="exact"):
    torch.save(t, os.path.join(out, name + ".pt"))
    with open(os.path.join(out, name + ".raw"), "wb") as f:
        f.write(raw(t))
    emit(name, name + ".pt", t, kind)


for dt in DTYPES:
    dname = str(dt)[6:]
    for shape in SHAPES:
        t = random_tensor(dt, shape)
        name = f"{dname}_{'x'.join(map(str, shape)) or 'scalar'}"
        save_pt(name, t)
        npy = name + ".npy"
        if dt in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            np.save(os.path.join(out, npy), t.float().numpy())
            with open(os.path.join(out, name + ".src"), "wb") as f:
                f.write(raw(t))
            with open(os.path.join(out, name + ".nraw"), "wb") as f:
                f.write(raw(t.float()))
            lines.append(f"{name}\t{npy}\ttorch.float32\t{shape_str(shape)}\tnpyconv:{dt}")
        else:
            np.save(os.path.join(out, npy), t.numpy())
            with open(os.path.join(out, name + ".nraw"), "wb") as f:
                f.write(raw(t))
            emit(name, npy, t, "exact")

# Bigger than the map threshold: exercises the memory-mapped path and BININT sizes.
save_pt("f32_big", torch.randn(70000))
np.save(os.path.join(out, "f32_big.npy"), torch.randn(70000).numpy())
with open(os.path.join(out, "f32_big.nraw"), "wb") as f:
    f.write(np.load(os.path.join(out, "f32_big.npy")).tobytes())
lines.append("f32_big\tf32_big.npy\ttorch.float32\t70000\texact")

# Strided views: torch.save keeps the whole storage plus offset and stride.
base = random_tensor(torch.float32, (6, 8))
views = {
    "view_slice": base[1:4, ::2],
    "view_t": base.t(),
    "view_row": base[2],
    "view_col": base[:, 3],
    "view_expand": base[0].expand(3, 8),
    "view_scalar": base[1, 2],
    "view_empty": base[2:2],
    "view_bf16": random_tensor(torch.bfloat16, (5, 6))[1:, 1:5:3],
    "view_i64_t": random_tensor(torch.int64, (3, 4)).t(),
    "view_c128": random_tensor(torch.complex128, (4, 4))[::2, 1:],
    "view_u16": random_tensor(torch.uint16, (4, 5))[:, 1::2],
    "view_bool_3d": random_tensor(torch.bool, (3, 4, 5)).permute(2, 0, 1)[1:],
}
for name, v in views.items():
    save_pt(name, v, "view")

# Other npy versions and layouts.
a = rng.standard_normal((3, 4)).astype(np.float32)
for ver in [(2, 0), (3, 0)]:
    name = f"npy_v{ver[0]}"
    with open(os.path.join(out, name + ".npy"), "wb") as f:
        np.lib.format.write_array(f, a, version=ver)
    with open(os.path.join(out, name + ".nraw"), "wb") as f:
        f.write(a.tobytes())
    lines.append(f"{name}\t{name}.npy\ttorch.float32\t3,4\tread")
np.save(os.path.join(out, "npy_fortran.npy"), np.asfortranarray(a))
lines.append("npy_fortran\tnpy_fortran.npy\t-\t3,4\treject")
np.save(os.path.join(out, "npy_bigendian.npy"), a.astype(">f4"))
lines.append("npy_bigendian\tnpy_bigendian.npy\t-\t3,4\treject")
np.save(os.path.join(out, "npy_object.npy"), np.array([1, "a"], dtype=object), allow_pickle=True)
lines.append("npy_object\tnpy_object.npy\t-\t2\treject")
np.save(os.path.join(out, "npy_text.npy"), np.array(["ab", "cde"]))
lines.append("npy_text\tnpy_text.npy\t<U3\t2\ttext")
np.save(os.path.join(out, "npy_bytes.npy"), np.array([b"ab", b"c"]))
lines.append("npy_bytes\tnpy_bytes.npy\t|S2\t2\ttext")
# A legacy (non-zip) torch.save file.
torch.save(torch.zeros(3), os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
lines.append("legacy\tlegacy.pt\t-\t3\treject")
# A pickle with a global torch.load(weights_only=True) would refuse, inside a valid archive.
torch.save(torch.nn.Parameter(torch.zeros(2)), os.path.join(out, "param.pt"))
lines.append("param\tparam.pt\t-\t2\treject")
torch.save({"a": torch.zeros(2)}, os.path.join(out, "dict.pt"))
lines.append("dict\tdict.pt\t-\t2\treject")
torch.save(torch.zeros(2, dtype=torch.complex64).conj(), os.path.join(out, "conj.pt"))
lines.append("conj\tconj.pt\t-\t2\treject")

with open(os.path.join(out, "manifest.tsv"), "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"wrote {len(lines)} cases")
