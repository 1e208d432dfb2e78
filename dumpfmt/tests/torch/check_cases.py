"""Loads files numprobe wrote and checks them against raw bytes (bit-exact, NaN payloads included).

Usage: check_cases.py DIR. DIR/manifest.tsv lines: file <tab> dtype <tab> shape <tab> rawfile
[<tab> source torch dtype]. With the fifth column the raw file holds that dtype's bytes and the
file must hold torch's float32 conversion of them (bf16/float8 saved as float32 .npy).
.pt files are loaded with torch.load(weights_only=True, map_location="cpu"), .npy files with
np.load(allow_pickle=False). Prints `OK <count>` and exits 0, or prints one FAIL line per bad case
and exits 1.
"""
import os
import sys

import numpy as np
import torch

d = sys.argv[1]
fails = []
count = 0
for line in open(os.path.join(d, "manifest.tsv")):
    file, dtype, shape, rawfile, *conv = line.rstrip("\n").split("\t")
    shape = tuple(int(x) for x in shape.split(",") if x)
    want = open(os.path.join(d, rawfile), "rb").read()
    if conv and want:
        src_dtype = getattr(torch, conv[0].removeprefix("torch."))
        src = torch.frombuffer(bytearray(want), dtype=torch.uint8).view(src_dtype)
        want = src.float().view(torch.uint8).numpy().tobytes()
    path = os.path.join(d, file)
    count += 1
    try:
        if file.endswith(".pt"):
            t = torch.load(path, weights_only=True, map_location="cpu")
            got_dtype = str(t.dtype)
            got = b"" if t.numel() == 0 else t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            got_shape = tuple(t.shape)
        else:
            a = np.load(path, allow_pickle=False)
            got_dtype = a.dtype.str
            got = a.tobytes()
            got_shape = a.shape
        if got_dtype != dtype:
            fails.append(f"FAIL {file}: dtype {got_dtype} != {dtype}")
        elif got_shape != shape:
            fails.append(f"FAIL {file}: shape {got_shape} != {shape}")
        elif got != want:
            fails.append(f"FAIL {file}: bytes differ")
    except Exception as e:  # report every failure, not just the first
        fails.append(f"FAIL {file}: {type(e).__name__}: {e}")
for f in fails:
    print(f)
if fails:
    sys.exit(1)
print(f"OK {count}")
