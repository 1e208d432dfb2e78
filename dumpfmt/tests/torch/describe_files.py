"""Prints, for every path read from stdin (one per line), what torch/numpy load from it:
path <tab> dtype <tab> shape <tab> CRC-32 of the C-contiguous bytes <tab> byte count.
.pt: torch.load(weights_only=True, map_location="cpu"); .npy: np.load(allow_pickle=False).
"""
import sys
import zlib

import numpy as np
import torch

for line in sys.stdin:
    path = line.rstrip("\n")
    if not path:
        continue
    if path.endswith(".pt"):
        t = torch.load(path, weights_only=True, map_location="cpu")
        dtype = str(t.dtype)
        data = b"" if t.numel() == 0 else t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        shape = tuple(t.shape)
    else:
        a = np.load(path, allow_pickle=False)
        dtype = a.dtype.str
        data = a.tobytes()
        shape = a.shape
    print(f"{path}\t{dtype}\t{','.join(map(str, shape))}\t{zlib.crc32(data):08x}\t{len(data)}")
