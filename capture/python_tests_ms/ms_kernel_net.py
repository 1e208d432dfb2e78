"""A level-L2 capture run: `python ms_kernel_net.py TOOL OUT MODE TASK` with TOOL msprobe or
numprobe, MODE graph (TrainOneStepCell, 2 steps in GRAPH_MODE) or jit (a PyNative
mindspore.jit function called in 2 steps), TASK tensor or statistics. Writes config.json into
OUT and dumps there; prints `done` at the end (msprobe's statistics task fails on the CPU)."""
import json
import os
import sys

import numpy as np


def main():
    tool, out, mode, task = sys.argv[1:5]
    lst = sys.argv[5].split(",") if len(sys.argv) > 5 else []
    cfg = {"task": task, "dump_path": out, "rank": [], "step": [], "level": "L2",
           "async_dump": False, task: {"list": lst, "data_mode": ["all"],
                                       "summary_mode": "statistics"}}
    os.makedirs(out, exist_ok=True)
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    import mindspore as ms
    from mindspore import nn, ops

    if tool == "msprobe":
        from msprobe.mindspore import PrecisionDebugger
    else:
        from numprobe.mindspore import PrecisionDebugger
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE,
                   device_target="CPU")
    ms.set_seed(0)
    debugger = PrecisionDebugger(config_path=cfg_path)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 3)

        def construct(self, x):
            return ops.relu(self.fc(x))

    net = Net()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                                nn.SGD(net.trainable_params(), learning_rate=0.1))
    x = ms.Tensor(np.random.RandomState(0).randn(2, 4).astype(np.float32))
    y = ms.Tensor(np.random.RandomState(1).randn(2, 3).astype(np.float32))

    @ms.jit
    def f(a):
        return ops.relu(a) * 2

    for _ in range(2):
        debugger.start()
        if mode == "graph":
            train(x, y)
        else:
            f(x)
        debugger.stop()
        debugger.step()
    print("done")


if __name__ == "__main__":
    main()
