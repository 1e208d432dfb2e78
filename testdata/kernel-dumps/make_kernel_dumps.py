"""Regenerates the MindSpore kernel-level (L2) dumps in this folder.

Run with MindSpore 2.7.1 on CPU (e.g. /var/cache/numprobe/venv-ms/bin/python make_kernel_dumps.py).
Each case runs in its own process, because MindSpore reads MINDSPORE_DUMP_CONFIG once, before the
first graph compiles. The dump configuration is the one msprobe 26.2 writes for level L2, task
tensor (kernel_kbyk_dump.json). MindSpore's graphs/ folder (IR text with absolute paths) is dropped.

Cases:
  net_f32, net_f16, net_bf16
                     graph-mode TrainOneStepCell(WithLossCell(Dense 4->3 + ReLU, MSE), SGD), 2 steps;
                     the input is cast to float32 / float16 / bfloat16 and doubled (an Add in that dtype)
                     before the Dense, so the pair differs in one kernel and what follows it.
  net_f32_noisy      net_f32 with its input scaled by 1 + 1e-3 * sin(i): a float32 pair with
                     net_f32 whose every kernel differs a little (the compare tests' pair).
  jit_f32            a PyNative @mindspore.jit function (MatMul, ReLU, Mul), called twice.
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def dump_config(path):
    return {
        "common_dump_settings": {
            "dump_mode": 0, "path": path, "net_name": "Net", "iteration": "all",
            "saved_data": "tensor", "input_output": 0, "kernels": [],
            "support_device": [0, 1, 2, 3, 4, 5, 6, 7],
        },
        "e2e_dump_settings": {"enable": True, "trans_flag": True},
    }


def run_case(case, out):
    import numpy as np
    cfg_path = os.path.join(out, "kernel_kbyk_dump.json")
    with open(cfg_path, "w") as f:
        json.dump(dump_config(out), f)
    os.environ["MINDSPORE_DUMP_CONFIG"] = cfg_path
    import mindspore as ms
    from mindspore import nn, ops

    if case.startswith("net_"):
        ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
        ms.set_seed(0)
        dtype = {"net_f32": ms.float32, "net_f32_noisy": ms.float32, "net_f16": ms.float16,
                 "net_bf16": ms.bfloat16}[case]

        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.fc = nn.Dense(4, 3)
                self.relu = nn.ReLU()

            def construct(self, x):
                h = ops.cast(x, dtype)
                h = ops.cast(h + h, ms.float32)
                return self.relu(self.fc(h))

        net = Net()
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                                    nn.SGD(net.trainable_params(), learning_rate=0.1))
        x = np.random.RandomState(0).randn(2, 4).astype(np.float32)
        if case == "net_f32_noisy":
            x = (x * (1 + 1e-3 * np.sin(np.arange(8)).reshape(2, 4))).astype(np.float32)
        x = ms.Tensor(x)
        y = ms.Tensor(np.random.RandomState(1).randn(2, 3).astype(np.float32))
        for _ in range(2):
            train(x, y)
    elif case == "jit_f32":
        ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")

        @ms.jit
        def f(x, w):
            return ops.relu(ops.matmul(x, w)) * 2

        x = ms.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 7)
        w = ms.Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
        for _ in range(2):
            f(x, w)
    else:
        raise SystemExit(f"unknown case {case}")


def main():
    if len(sys.argv) == 3 and os.path.isabs(sys.argv[2]):
        run_case(sys.argv[1], sys.argv[2])
        return
    for case in sys.argv[1:] or ["net_f32", "net_f32_noisy", "net_f16", "net_bf16", "jit_f32"]:
        out = os.path.join(HERE, case)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        subprocess.run([sys.executable, __file__, case, out], check=True)
        shutil.rmtree(os.path.join(out, "rank_0", "graphs"), ignore_errors=True)
        # The configuration names the absolute output path; keep the recorded copy portable.
        for cfg in [os.path.join(out, "kernel_kbyk_dump.json"),
                    os.path.join(out, "rank_0", ".dump_metadata", "data_dump.json")]:
            with open(cfg) as f:
                data = json.load(f)
            data["common_dump_settings"]["path"] = case
            os.chmod(cfg, 0o644)
            with open(cfg, "w") as f:
                json.dump(data, f)
        for root, dirs, files in os.walk(out):
            for name in dirs + files:
                p = os.path.join(root, name)
                os.chmod(p, 0o755 if os.path.isdir(p) else 0o644)


if __name__ == "__main__":
    main()
