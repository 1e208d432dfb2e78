"""A tensor-parallel-style model on torch.distributed (gloo, CPU), run under a dump tool.

    python dist_model.py TOOL CONFIG WORLD_SIZE PORT [--steps N] [--perturb-rank R]

TOOL is `numprobe` or `msprobe`. Spawns WORLD_SIZE processes with torch.multiprocessing; each
runs `steps` steps of a column-parallel linear (all_gather of the shards), a row-parallel linear
(all_reduce of the partial sums), a broadcast of a scale from rank 0 and a reduce_scatter of the
output (gloo on CPU has no reduce_scatter in torch's builds, so it is checked and, where
missing, done as all_reduce plus a local slice, so that both tools still see the same calls).
`--perturb-rank R` adds 1e-3 to rank R's input of the row-parallel linear (a divergence that
the all_reduce carries to every other rank).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HIDDEN = 8


def gloo_has_reduce_scatter(world):
    """Whether gloo implements reduce_scatter in this torch build: one call on the world group,
    made by every rank before the debugger starts (so it is not recorded)."""
    try:
        dist.reduce_scatter(torch.zeros(1), [torch.ones(1)] * world)
        return True
    except (RuntimeError, NotImplementedError, ValueError):
        return False


def worker(rank, world, tool, cfg, port, steps, perturb_rank):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        from numprobe.pytorch import PrecisionDebugger
    dbg = PrecisionDebugger(config_path=cfg)
    has_rs = gloo_has_reduce_scatter(world)
    # A tensor-parallel group spanning every rank, passed explicitly so that the dumps record it.
    tp = dist.new_group(list(range(world)))
    torch.manual_seed(1234)  # the same full weights on every rank; each takes its shard
    w1 = torch.randn(HIDDEN, HIDDEN)
    w2 = torch.randn(HIDDEN, HIDDEN)
    shard = HIDDEN // world
    col = w1[rank * shard:(rank + 1) * shard]        # column-parallel: rows of W1
    row = w2[:, rank * shard:(rank + 1) * shard]     # row-parallel: columns of W2
    for step in range(steps):
        dbg.start()
        torch.manual_seed(100 + step)
        x = torch.randn(4, HIDDEN)
        h = torch.matmul(x, col.t())                  # (4, shard)
        parts = [torch.empty_like(h) for _ in range(world)]
        dist.all_gather(parts, h, group=tp)
        full = torch.cat(parts, dim=1)                # (4, HIDDEN)
        act = torch.relu(full)
        # Every rank makes the same calls; only the perturbed rank's addend is not zero.
        mine = act[:, rank * shard:(rank + 1) * shard] + (1e-3 if rank == perturb_rank else 0.0)
        partial = torch.matmul(mine, row.t())         # (4, HIDDEN)
        dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=tp)
        scale = torch.tensor([2.0]) if rank == 0 else torch.zeros(1)
        dist.broadcast(scale, src=0, group=tp)
        y = torch.mul(partial, scale)
        flat = y.reshape(-1)
        out = torch.zeros(flat.numel() // world)
        chunks = list(flat.chunk(world))
        if has_rs:
            dist.reduce_scatter(out, chunks, op=dist.ReduceOp.SUM, group=tp)
        else:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            out = flat.chunk(world)[rank].clone()
        torch.sum(out)
        dbg.stop()
        dbg.step()
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tool", choices=["numprobe", "msprobe"])
    p.add_argument("config")
    p.add_argument("world", type=int)
    p.add_argument("port", type=int)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--perturb-rank", type=int, default=-1)
    a = p.parse_args()
    mp.spawn(worker, args=(a.world, a.tool, a.config, a.port, a.steps, a.perturb_rank),
             nprocs=a.world, join=True)


if __name__ == "__main__":
    sys.exit(main())
