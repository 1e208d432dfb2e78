"""What recording one call costs by the kind of tensor it reads: µs per recorded
`torch.add(t, 1)` (its input and output records, statistics L1) against the bare call, for a
tensor of 3 elements, slices of a fused projection (`chunk`: views with gaps) from small to
large, and a transpose of such a slice. These take torch's own Mean/Norm (numprobe's pass does
not follow torch's order there), the rest of the capture's path is the common one.

  PYTHONPATH=DIR python benches/peers/capture_views.py [--threads 1] [--repeats 7]

Prints one JSON object: per tensor, [bare µs, recorded µs, recorded − bare], each the best of
`--repeats` loops of 200 calls (60 for the large slices).
"""
import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    sys.path.insert(0, HERE)
    import torch
    from capture_per_api import recording_debugger

    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    large = torch.randn(8, 64, 3 * 256, generator=g)
    cases = {
        "3 elements": torch.randn(3, generator=g),
        "chunk 2x8x64": torch.randn(2, 8, 3 * 64, generator=g).chunk(3, -1)[1],
        "chunk 8x64x128": torch.randn(8, 64, 3 * 128, generator=g).chunk(3, -1)[1],
        "chunk 8x64x256": large.chunk(3, -1)[1],
        "its transpose": large.chunk(3, -1)[1].view(8, 64, 4, 64).transpose(1, 2),
    }
    dbg = recording_debugger(tempfile.mkdtemp())

    def loop(t, n):
        a0 = time.perf_counter()
        for _ in range(n):
            torch.add(t, 1)
        return (time.perf_counter() - a0) / n * 1e6

    def recorded(t, n):
        dbg.start()
        us = loop(t, n)
        dbg.stop()
        dbg.step()
        return us

    out = {}
    for name, t in cases.items():
        n = 200 if t.numel() < 100_000 else 60
        bare = min(loop(t, n) for _ in range(a.repeats))
        rec = min(recorded(t, n) for _ in range(a.repeats))
        out[name] = [round(bare, 1), round(rec, 1), round(rec - bare, 1)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
