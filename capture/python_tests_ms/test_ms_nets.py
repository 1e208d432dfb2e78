"""numprobe against msprobe 26.2.0 on nets built from MindSpore 2.7.1's own cells (`ms_nets.py`:
nn.TransformerEncoder with Adam, a Conv2d/BatchNorm2d/MaxPool2d/Dense net trained with SGD
momentum through TrainOneStepCell, 2-layer LSTM + GRU + Dense, Embedding with mint ops), two
PyNative steps on the CPU, each tool in its own process with the same config.json: the dumps
must be equal entry for entry (names, order, arguments and keyword arguments, statistics and
checksums bit for bit, construct.json, stacks without msprobe's wrapper frames, tensor files),
leaving out the two outputs MindSpore's CPU BatchNorm2d leaves uninitialised.

Three configurations per net keep the process count down: L1 statistics with CRC-32 (md5),
mix in tensor mode (files, statistics and CRC-32), and L0 statistics.
"""
import concurrent.futures
import glob
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ms_dump_diff  # noqa: E402

SCRIPT = os.path.join(HERE, "ms_nets.py")
NETS = ["transformer", "conv", "rnn", "embedding"]


def _config(task, level, summary_mode):
    sec = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}
    if task == "statistics":
        sec["tensor_list"] = []
    return {"task": task, "dump_path": "./dump", "level": level, "rank": [], "step": [],
            "async_dump": False, "extra_info": True, task: sec}


CONFIGS = {
    "L1_md5": _config("statistics", "L1", "md5"),
    "mix_tensor": _config("tensor", "mix", "md5"),
    "L0": _config("statistics", "L0", "statistics"),
}
# (net, config, extra arguments) of every run; each runs once per tool.
CASES = [(n, c, []) for n in NETS for c in CONFIGS] + [("transformer", "L1_md5", ["--late-debugger"])]


def _case_id(net, cfg, extra):
    return f"{net}-{cfg}" + ("-late" if extra else "")


def _run(base, tool, net, cfg, extra):
    d = os.path.join(base, f"{tool}-{_case_id(net, cfg, extra)}")
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIGS[cfg], f)
    env = dict(os.environ, GLOG_v="3", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, SCRIPT, "--tool", tool, "--net", net, "--config", "config.json"] + extra
    r = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=900)
    return d, r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="session")
def net_runs(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("ms_nets"))
    workers = int(os.environ.get("NUMPROBE_MS_JOBS", "3"))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futs = {(tool, _case_id(*c)): pool.submit(_run, base, tool, *c)
                for c in CASES for tool in ("msprobe", "numprobe")}
        return {k: f.result() for k, f in futs.items()}


def _dump(net_runs, tool, case):
    d, rc, log = net_runs[(tool, case)]
    assert rc == 0, f"{tool} {case} failed:\n{log[-4000:]}"
    return os.path.join(d, "dump")


def _losses(net_runs, tool, case):
    return [line for line in net_runs[(tool, case)][2].splitlines() if line.startswith("step ")]


@pytest.mark.parametrize("case", [_case_id(*c) for c in CASES])
def test_dumps_equal_msprobe(net_runs, case):
    theirs = _dump(net_runs, "msprobe", case)
    ours = _dump(net_runs, "numprobe", case)
    assert _losses(net_runs, "numprobe", case) == _losses(net_runs, "msprobe", case)
    assert len(glob.glob(os.path.join(ours, "step*", "*", "dump.json"))) == 2
    # Checksums of inputs a BatchNorm updates in place are judged against the tensors
    # themselves (numprobe's tensor run of the same net) where msprobe's raced the update.
    net, cfg = case.split("-")[:2]
    sec = CONFIGS[cfg][CONFIGS[cfg]["task"]]
    truth = (_dump(net_runs, "numprobe", f"{net}-mix_tensor")
             if sec["summary_mode"] == "md5" and not case.endswith("-late") else None)
    errs = ms_dump_diff.diff(theirs, ours, truth_root=truth)
    assert not errs, "\n".join(errs)


def test_batchnorm_checksums_are_the_crc32_of_the_tensors(net_runs):
    """numprobe's md5 of every BatchNorm input (the moving statistics too, which the op
    updates in place) is the CRC-32 of the tensor as the call received it: its tensor run's
    file of the same net, step by step."""
    ours = _dump(net_runs, "numprobe", "conv-L1_md5")
    truth_root = _dump(net_runs, "numprobe", "conv-mix_tensor")
    judged = 0
    for step in ("step0", "step1"):
        truth = ms_dump_diff.tensor_truth(truth_root, step)
        (rank,) = glob.glob(os.path.join(ours, step, "*"))
        with open(os.path.join(rank, "dump.json")) as f:
            data = json.load(f)["data"]
        for name, body in data.items():
            if "BatchNorm" not in name or not name.endswith("forward"):
                continue
            for i, rec in enumerate(body["input_args"]):
                if isinstance(rec, dict) and "md5" in rec:
                    assert rec["md5"] == truth(name, i), (step, name, i)
                    judged += 1
    assert judged >= 10, judged


def _data(net_runs, tool, case, step=0):
    (rank,) = glob.glob(os.path.join(_dump(net_runs, tool, case), f"step{step}", "*"))
    with open(os.path.join(rank, "dump.json")) as f:
        data = json.load(f)["data"]
    construct = {}
    if os.path.exists(os.path.join(rank, "construct.json")):
        with open(os.path.join(rank, "construct.json")) as f:
            construct = json.load(f)
    return data, construct


def test_function_stored_after_the_debugger_is_recorded(net_runs):
    # TransformerEncoderLayer keeps `self.activation = ops.relu` from construction.
    for step in (0, 1):
        data, _ = _data(net_runs, "numprobe", "transformer-L1_md5", step)
        for name in ("Functional.relu.0.forward", "Functional.relu.1.forward",
                     "Functional.relu.0.backward", "Functional.relu.1.backward"):
            assert name in data, name


def test_function_stored_before_the_debugger_is_not_recorded(net_runs):
    data, _ = _data(net_runs, "numprobe", "transformer-L1_md5-late")
    assert not [n for n in data if n.startswith("Functional.relu.")]
    assert [n for n in data if n.startswith("Functional.")]


def test_cell_keyword_arguments_are_recorded(net_runs):
    data, _ = _data(net_runs, "numprobe", "transformer-L0")
    kwargs = data["Cell.encoder.layers.0.self_attn.MultiheadAttention.forward.0"]["input_kwargs"]
    assert kwargs["need_weights"] == {"type": "bool", "value": False}
    assert "attn_mask" in kwargs and "key_padding_mask" in kwargs
    layer = data["Cell.encoder.layers.0.TransformerEncoderLayer.forward.0"]["input_kwargs"]
    assert "src_mask" in layer and "src_key_padding_mask" in layer


def test_parameter_gradients_follow_the_backward_that_made_them(net_runs):
    data, _ = _data(net_runs, "numprobe", "conv-mix_tensor")
    names = list(data)
    assert names.index("Cell.fc2.Dense.parameters_grad.0") > names.index("Primitive.matmul.MatMul.1.backward")
    data, _ = _data(net_runs, "numprobe", "rnn-L0")
    names = list(data)
    assert names.index("Cell.lstm.LSTM.parameters_grad.0") > names.index(
        "Cell.lstm.rnn._DynamicLSTMCPUGPU.backward.0")


def test_no_backward_cell_scope_stays_open(net_runs):
    _, construct = _data(net_runs, "numprobe", "transformer-mix_tensor")
    assert construct["Jit.Adam.0.forward"] is None
    _, construct = _data(net_runs, "numprobe", "transformer-mix_tensor", step=1)
    assert construct["Jit.Adam.0.forward"] is None


def test_nothing_is_recorded_outside_start_and_stop(net_runs):
    # ms_nets.py calls ops.abs before start() and after stop() of every step.
    for case in ("embedding-L1_md5", "transformer-mix_tensor"):
        for step in (0, 1):
            data, _ = _data(net_runs, "numprobe", case, step)
            assert not [n for n in data if n.startswith("Functional.abs.")], case


def test_numprobe_dumps_validate(net_runs):
    exe = os.environ.get("NUMPROBE_BIN")
    if not exe:
        pytest.skip("NUMPROBE_BIN (the numprobe CLI) is not set")
    for c in CASES:
        dump = _dump(net_runs, "numprobe", _case_id(*c))
        for rank in sorted(glob.glob(os.path.join(dump, "step*", "*"))):
            r = subprocess.run([exe, "validate", rank], capture_output=True, text=True)
            assert r.returncode == 0, f"{rank}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
