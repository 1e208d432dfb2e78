"""A level-L2 capture run: `python ms_kernel_net.py TOOL OUT MODE TASK [LIST] [SUMMARY_MODE]`
with TOOL msprobe or numprobe, MODE graph (TrainOneStepCell, 2 steps in GRAPH_MODE) or jit (a
PyNative mindspore.jit function called in 2 steps), model (GRAPH_MODE,
`Model(net, loss, opt).train(2, dataset, callbacks=[MsprobeStep(debugger)])` over a one-batch
NumpySlicesDataset: 2 steps), model2 (the same Model trained twice, 1 then 2 epochs, with one
MsprobeStep), TASK tensor or statistics, LIST kernel
names joined by `,` (empty: all), SUMMARY_MODE statistics (default) or md5. MODE late: graph,
but the net runs once before the debugger is created; MODE afterinit: graph, with the state
mindspore.communication.init() leaves (a lone CPU process cannot run init itself). Writes
config.json into OUT and dumps there; prints `done` at the end (msprobe's statistics task fails
on the CPU)."""
import json
import os
import sys

import numpy as np


def main():
    tool, out, mode, task = sys.argv[1:5]
    lst = [x for x in sys.argv[5].split(",") if x] if len(sys.argv) > 5 else []
    summary_mode = sys.argv[6] if len(sys.argv) > 6 else "statistics"
    cfg = {"task": task, "dump_path": out, "rank": [], "step": [], "level": "L2",
           "async_dump": False, task: {"list": lst, "data_mode": ["all"],
                                       "summary_mode": summary_mode}}
    os.makedirs(out, exist_ok=True)
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    import mindspore as ms
    from mindspore import nn, ops

    if tool == "msprobe":
        from msprobe.mindspore import MsprobeStep, PrecisionDebugger
    else:
        from numprobe.mindspore import MsprobeStep, PrecisionDebugger
    ms.set_context(mode=ms.PYNATIVE_MODE if mode == "jit" else ms.GRAPH_MODE,
                   device_target="CPU")
    ms.set_seed(0)
    if mode == "afterinit":
        from mindspore.communication._comm_helper import GlobalComm

        GlobalComm.INITED = True
    if mode != "late":
        debugger = PrecisionDebugger(config_path=cfg_path)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 3)

        def construct(self, x):
            return ops.relu(self.fc(x))

    net = Net()
    x = ms.Tensor(np.random.RandomState(0).randn(2, 4).astype(np.float32))
    y = ms.Tensor(np.random.RandomState(1).randn(2, 3).astype(np.float32))

    @ms.jit
    def f(a):
        return ops.relu(a) * 2

    if mode in ("model", "model2"):
        import mindspore.dataset as ds
        from mindspore.train import Model

        data = ds.NumpySlicesDataset({"x": x.asnumpy(), "y": y.asnumpy()}, shuffle=False).batch(2)
        model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=0.1))
        step_cb = MsprobeStep(debugger)
        if mode == "model2":
            model.train(1, data, callbacks=[step_cb])
        model.train(2, data, callbacks=[step_cb])
        print("done")
        return
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                                nn.SGD(net.trainable_params(), learning_rate=0.1))
    if mode == "late":
        train(x, y)
        debugger = PrecisionDebugger(config_path=cfg_path)
    for _ in range(2):
        debugger.start()
        if mode != "jit":
            train(x, y)
        else:
            f(x)
        debugger.stop()
        debugger.step()
    print("done")


if __name__ == "__main__":
    main()
