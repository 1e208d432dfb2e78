"""Nets built from MindSpore 2.7.1's own cells, trained two PyNative steps on the CPU under
numprobe's or msprobe's PrecisionDebugger (the same script for both tools), one net per
process and several dump configurations in turn: `--config` names config.json files, each
dumped into its own folder by a debugger created before the model (msprobe keeps one debugger
per process, so each configuration after the first starts a new process in the test).

usage: python ms_nets.py --tool numprobe|msprobe --net transformer|conv|rnn|embedding
       --config CFG [--steps 2]
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--tool", choices=["numprobe", "msprobe", "none"], required=True)
p.add_argument("--net", choices=["transformer", "conv", "rnn", "embedding"], required=True)
p.add_argument("--config", default=None)
p.add_argument("--steps", type=int, default=2)
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--late-debugger", action="store_true",
               help="create the debugger after the model (functions the model stored before "
                    "are then the originals, which msprobe does not see)")
args = p.parse_args()

import numpy as np
import mindspore as ms
from mindspore import Tensor, mint, nn, ops

import ms_tool

tool = ms_tool.setup(args.tool)
debugger = None


def make_debugger():
    global debugger
    if tool is not None:
        debugger = tool.PrecisionDebugger(config_path=args.config)


if tool is not None:
    tool.seed_all(seed=args.seed)
else:
    ms.set_seed(args.seed)
if not args.late_debugger:
    # Created before the model: attributes stored at construction (ops.relu) are the wrappers.
    make_debugger()
rng = np.random.default_rng(args.seed + 1)


class Transformer(nn.Cell):
    def __init__(self, d=32):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Dense(d, 4)

    def construct(self, x):
        return self.head(self.encoder(x).mean(axis=1))


class ConvNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, pad_mode="same", has_bias=True)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(8 * 4 * 4, 16)
        self.fc2 = nn.Dense(16, 4)

    def construct(self, x):
        h = self.pool(self.relu(self.bn(self.conv(x))))
        return self.fc2(self.relu(self.fc1(self.flatten(h))))


class RnnNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.gru = nn.GRU(16, 12, batch_first=True)
        self.fc = nn.Dense(12, 4)

    def construct(self, x):
        h, _ = self.lstm(x)
        h, _ = self.gru(h)
        return self.fc(h[:, -1, :])


class EmbeddingNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.fc = nn.Dense(16, 4)

    def construct(self, ids):
        h = self.embed(ids)
        h = mint.mul(mint.tanh(mint.add(h, 0.5)), h)
        return self.fc(mint.mean(h, dim=1))


if args.net == "transformer":
    net = Transformer()
    xs = [Tensor(rng.standard_normal((3, 6, 32)).astype(np.float32)) for _ in range(2)]
elif args.net == "conv":
    net = ConvNet()
    xs = [Tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32)) for _ in range(2)]
elif args.net == "rnn":
    net = RnnNet()
    xs = [Tensor(rng.standard_normal((2, 5, 8)).astype(np.float32)) for _ in range(2)]
else:
    net = EmbeddingNet()
    xs = [Tensor(rng.integers(0, 50, (3, 7)).astype(np.int32)) for _ in range(2)]
ys = [Tensor(rng.integers(0, 4, (x.shape[0],)).astype(np.int32)) for x in xs]
if args.late_debugger:
    make_debugger()
loss_fn = nn.CrossEntropyLoss()
net.set_train(True)

if args.net == "conv":
    opt = nn.SGD(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    step_fn = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
    step_fn.set_train(True)

    def train(x, y):
        return step_fn(x, y)
else:
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)

    def forward_fn(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward_fn, None, opt.parameters)

    def train(x, y):
        loss, grads = grad_fn(x, y)
        opt(grads)
        return loss

for step in range(args.steps):
    # Calls outside start()/stop() are never recorded (the nets use no `abs`).
    ops.abs(xs[step])
    if debugger is not None:
        debugger.start(net)
    loss = train(xs[step], ys[step])
    if debugger is not None:
        debugger.stop()
    ops.abs(xs[step])
    if debugger is not None:
        debugger.step()
    print(f"step {step} loss {float(loss.asnumpy()):.6f}", flush=True)
