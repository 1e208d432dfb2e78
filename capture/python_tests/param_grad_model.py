"""A small model whose `gated` module owns two parameters used at different times of its
forward (one before its child Linear, one after), run under numprobe's or msprobe's
PrecisionDebugger. In the backward the two gradients arrive on either side of the child's
backward, so a scope that closes at that child sees one gradient inside and one outside.

usage: python param_grad_model.py numprobe|msprobe CONFIG STEPS
"""
import sys, json
tool, cfg_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
import torch
import torch.nn as nn
import torch.nn.functional as F
if tool == "msprobe":
    from msprobe.pytorch import PrecisionDebugger, seed_all
else:
    from numprobe.pytorch import PrecisionDebugger, seed_all
seed_all(seed=1234)
dbg = PrecisionDebugger(config_path=cfg_path)

class Gated(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.scale_in = nn.Parameter(torch.linspace(0.5, 1.5, d))
        self.inner = nn.Linear(d, d)
        self.scale_out = nn.Parameter(torch.linspace(1.5, 0.5, d))
    def forward(self, x):
        return self.inner(x * self.scale_in) * self.scale_out

class Net(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.pre = nn.Linear(d, d)
        self.gated = Gated(d)
        self.head = nn.Linear(d, 4)
    def forward(self, x):
        return self.head(self.gated(self.pre(x)))

net = Net()
g = torch.Generator().manual_seed(5)
xs = [torch.randn(3, 8, generator=g) for _ in range(2)]
ys = [torch.randint(0, 4, (3,), generator=g) for _ in range(2)]
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for step in range(steps):
    dbg.start(model=net)
    loss = F.cross_entropy(net(xs[step % 2]), ys[step % 2])
    loss.backward()
    opt.step(); opt.zero_grad()
    dbg.stop(); dbg.step()
