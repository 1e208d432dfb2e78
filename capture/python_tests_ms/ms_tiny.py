"""A tiny MindSpore PyNative training run (the fixtures' `scripts/ms_dump.py` model) under
numprobe's or msprobe's PrecisionDebugger, so both tools can dump the same steps.

usage: python ms_tiny.py --tool numprobe|msprobe|none --config CFG [--steps 2] [--model-api]
       [--kill-after N]   (SIGKILL itself after N recorded forward calls of numprobe)
"""
import argparse
import math
import os
import signal
import time

p = argparse.ArgumentParser()
p.add_argument("--tool", choices=["numprobe", "msprobe", "none"], required=True)
p.add_argument("--config", default=None)
p.add_argument("--steps", type=int, default=2)
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--model-api", action="store_true", help="train with mindspore.train.Model + MsprobeStep")
p.add_argument("--kill-after", type=int, default=0)
args = p.parse_args()

import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor

import ms_tool

tool = ms_tool.setup(args.tool)
debugger = None
if tool is not None:
    tool.seed_all(seed=args.seed)
    debugger = tool.PrecisionDebugger(config_path=args.config)
else:
    ms.set_seed(args.seed)


class MLP(nn.Cell):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.fc1 = nn.Dense(d_in, d_hidden)
        self.norm = nn.LayerNorm((d_hidden,))
        self.act = nn.ReLU()
        self.drop = nn.Dropout(p=0.1)
        self.fc2 = nn.Dense(d_hidden, d_out)

    def construct(self, x):
        return self.fc2(self.drop(self.act(self.norm(self.fc1(x)))))


class Attention(nn.Cell):
    def __init__(self, d, n_heads):
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Dense(d, 3 * d)
        self.proj = nn.Dense(d, d)
        self.drop = nn.Dropout(p=0.1)
        self.scale = 1.0 / math.sqrt(d // n_heads)

    def construct(self, x):
        b, t, c = x.shape
        h = self.h
        q, k, v = ops.split(self.qkv(x), c, axis=-1)
        q = q.reshape(b, t, h, c // h).transpose(0, 2, 1, 3)
        k = k.reshape(b, t, h, c // h).transpose(0, 2, 1, 3)
        v = v.reshape(b, t, h, c // h).transpose(0, 2, 1, 3)
        att = ops.matmul(q, k.transpose(0, 1, 3, 2)) * self.scale
        att = ops.softmax(att, axis=-1)
        att = self.drop(att)
        y = ops.matmul(att, v).transpose(0, 2, 1, 3).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Cell):
    def __init__(self, d, n_heads):
        super().__init__()
        self.ln1 = nn.LayerNorm((d,))
        self.attn = Attention(d, n_heads)
        self.ln2 = nn.LayerNorm((d,))
        self.fc_in = nn.Dense(d, 4 * d)
        self.gelu = nn.GELU(approximate=False)
        self.fc_out = nn.Dense(4 * d, d)

    def construct(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fc_out(self.gelu(self.fc_in(self.ln2(x))))
        return x


class TinyNet(nn.Cell):
    def __init__(self, d_in=16, d=32, n_heads=4, n_layers=2, n_classes=8):
        super().__init__()
        self.embed = nn.Dense(d_in, d)
        self.blocks = nn.CellList([Block(d, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm((d,))
        self.head = MLP(d, 2 * d, n_classes)

    def construct(self, x):
        h = self.embed(x)
        for blk in self.blocks:
            h = blk(h)
        h = self.ln_f(h).mean(axis=1)
        return self.head(h)


net = TinyNet()
rng = np.random.default_rng(args.seed + 1)
xs = [Tensor(rng.standard_normal((4, 8, 16)).astype(np.float32)) for _ in range(4)]
ys = [Tensor(rng.integers(0, 8, (4,)).astype(np.int32)) for _ in range(4)]
loss_fn = nn.CrossEntropyLoss()
opt = nn.SGD(net.trainable_params(), learning_rate=0.01, momentum=0.9)

if args.kill_after and args.tool == "numprobe":
    # Die abruptly in the middle of a step, after a fixed number of recorded API calls.
    from numprobe.mindspore import recorder as _rec

    _orig_run_api = _rec.Recorder.run_api
    _calls = [0]

    def _run_api_then_die(self, *a, **k):
        out = _orig_run_api(self, *a, **k)
        _calls[0] += 1
        if _calls[0] >= args.kill_after:
            print("KILLING", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    _rec.Recorder.run_api = _run_api_then_die

if args.model_api:
    import mindspore.dataset as ds

    data = ds.NumpySlicesDataset(
        {"x": np.stack([x.asnumpy() for x in xs[: args.steps]]),
         "y": np.stack([y.asnumpy() for y in ys[: args.steps]])},
        shuffle=False,
    )
    model = ms.train.Model(net, loss_fn=loss_fn, optimizer=opt)
    callbacks = [tool.MsprobeStep(debugger)] if debugger is not None else []
    model.train(1, data, callbacks=callbacks, dataset_sink_mode=False)
else:
    def forward_fn(x, y):
        logits = net(x)
        return loss_fn(logits.astype(ms.float32), y)

    grad_fn = ms.value_and_grad(forward_fn, None, opt.parameters)
    net.set_train(True)
    for step in range(args.steps):
        t0 = time.perf_counter()
        if debugger is not None:
            debugger.start(net)
        loss, grads = grad_fn(xs[step % 4], ys[step % 4])
        opt(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        loss_value = float(loss.asnumpy())
        print(f"step {step} loss {loss_value:.6f} time {1000 * (time.perf_counter() - t0):.1f} ms",
              flush=True)
