"""What reading a tensor on the recording thread costs torch's other threads: AdamW's in-place
updates of 25 weight-sized float32 tensors (256 x 256) at two torch threads, each tensor read
before and after each update (as a capture's statistics read inputs and outputs), the read
done:

- none: not read (the bare loop);
- caller: whole, on the calling thread (numpy's max: one pass, as the statistics' one-thread
  pass was);
- caller-half / other-half: only the calling thread's chunk, or only the second thread's
  (torch's elementwise operators give each thread one half);
- torch-threads: whole, each half on the thread that wrote it (torch's own parallel max: what
  the statistics do through numprobe's torch reader).

Prints µs per update (median of rounds). A chunk read on the calling thread after the second
thread wrote it leaves the line shared between the cores: that thread's next in-place write
must take it back first.

    python benches/peers/chunk_owner.py [--rounds 5] [--steps 40]
"""
import argparse
import collections
import statistics
import time

import torch

N = 256 * 256
P = 25


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    ps = [torch.randn(N) for _ in range(P)]
    gs = [torch.randn(N) for _ in range(P)]
    m = [torch.zeros(N) for _ in range(P)]
    v = [torch.zeros(N) for _ in range(P)]
    half = N // 2
    reads = {
        "none": None,
        "caller": lambda t: t.numpy().max(),
        "caller-half": lambda t: t.numpy()[:half].max(),
        "other-half": lambda t: t.numpy()[half:].max(),
        "torch-threads": lambda t: t.max(),
    }

    def step(read, spent):
        def op(f, *ins):
            if read:
                for t in ins:
                    read(t)
            t0 = time.perf_counter()
            out = f()
            spent[0] += time.perf_counter() - t0
            spent[1] += 1
            if read:
                read(out)
            return out

        for p, g, ea, es in zip(ps, gs, m, v):
            op(lambda: p.mul_(0.999), p)
            op(lambda: ea.lerp_(g, 0.1), ea, g)
            op(lambda: es.mul_(0.999), es)
            op(lambda: es.addcmul_(g, g, value=0.001), es, g)
            d = op(lambda: es.sqrt(), es)
            d = op(lambda: d.div_(0.5), d)
            d = op(lambda: d.add_(1e-8), d)
            op(lambda: p.addcdiv_(ea, d, value=-0.001), p, ea, d)

    got = collections.defaultdict(list)
    for _ in range(args.rounds):
        for name, read in reads.items():  # interleaved: the host's drift hits all alike
            for _ in range(3):
                step(read, [0.0, 0])
            spent = [0.0, 0]
            for _ in range(args.steps):
                step(read, spent)
            got[name].append(1e6 * spent[0] / spent[1])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {P} tensors of {N} "
          f"float32, µs per in-place update (median of {args.rounds} rounds):")
    for name, xs in got.items():
        print(f"  {name:14s} {statistics.median(xs):7.2f}")


if __name__ == "__main__":
    main()
