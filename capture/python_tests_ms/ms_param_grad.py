"""A small MindSpore PyNative net whose `gated` Cell owns two parameters used at different
times of its forward (one before its child Dense, one after), run under numprobe's or msprobe's
PrecisionDebugger. In the backward the two gradients arrive on either side of the child's
backward, so a scope that closes at that child sees one gradient inside and one outside.

usage: python ms_param_grad.py --tool numprobe|msprobe --config CFG [--steps 1]
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--tool", choices=["numprobe", "msprobe"], required=True)
p.add_argument("--config", required=True)
p.add_argument("--steps", type=int, default=1)
args = p.parse_args()

import numpy as np
import mindspore as ms
from mindspore import nn, Parameter, Tensor

import ms_tool

tool = ms_tool.setup(args.tool)
tool.seed_all(seed=1234)
debugger = tool.PrecisionDebugger(config_path=args.config)


class Gated(nn.Cell):
    def __init__(self, d):
        super().__init__()
        self.scale_in = Parameter(Tensor(np.linspace(0.5, 1.5, d).astype(np.float32)), name="scale_in")
        self.inner = nn.Dense(d, d)
        self.scale_out = Parameter(Tensor(np.linspace(1.5, 0.5, d).astype(np.float32)), name="scale_out")

    def construct(self, x):
        return self.inner(x * self.scale_in) * self.scale_out


class Net(nn.Cell):
    def __init__(self, d=8):
        super().__init__()
        self.pre = nn.Dense(d, d)
        self.gated = Gated(d)
        self.head = nn.Dense(d, 4)

    def construct(self, x):
        return self.head(self.gated(self.pre(x)))


net = Net()
rng = np.random.default_rng(5)
xs = [Tensor(rng.standard_normal((3, 8)).astype(np.float32)) for _ in range(2)]
ys = [Tensor(rng.integers(0, 4, (3,)).astype(np.int32)) for _ in range(2)]
loss_fn = nn.CrossEntropyLoss()
opt = nn.SGD(net.trainable_params(), learning_rate=0.01)


def forward_fn(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward_fn, None, opt.parameters)
net.set_train(True)
for step in range(args.steps):
    debugger.start(net)
    loss, grads = grad_fn(xs[step % 2], ys[step % 2])
    opt(grads)
    debugger.stop()
    debugger.step()
    print(f"step {step} loss {float(loss.asnumpy()):.6f}", flush=True)
