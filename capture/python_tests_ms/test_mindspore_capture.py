"""numprobe's MindSpore adapter against msprobe 26.2.0 on the same MindSpore 2.7.1 run.

Every run trains the fixtures' tiny MindSpore model (`ms_tiny.py`, PyNative on CPU) in a fresh
process. msprobe runs as the live peer on the same machine (with the `ops.norm` fallback its
CPU statistics need); numprobe must record every entry msprobe records, under the same name and
in the same order, with statistics within float32 rounding and identical CRC-32 checksums.
The runs are started once per session, a few at a time, since each costs a MindSpore start-up.
"""
import concurrent.futures
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ms_tiny.py")
DTYPES_SCRIPT = os.path.join(HERE, "ms_dtypes.py")
TESTDATA = os.path.realpath(
    os.environ.get("NUMPROBE_TESTDATA") or os.path.join(HERE, "..", "..", "testdata"))
FIXTURES = os.path.join(TESTDATA, "fixtures", "msprobe-26.2.0-cpu")

# Tolerance of Mean/Norm relative to the tensor's magnitude (float32 reductions in different
# orders); Max, Min, checksums, shapes and non-tensor values must be equal.
REL_TOL = 2e-6


def _config(task="statistics", level="L1", summary_mode="statistics", step=None, scope=None,
            names=None, async_dump=False, data_mode=None):
    sec = {"scope": scope or [], "list": names or [], "data_mode": data_mode or ["all"],
           "summary_mode": summary_mode}
    if task == "statistics":
        sec["tensor_list"] = []
    return {"task": task, "dump_path": "./dump", "level": level, "rank": [],
            "step": step or [], "async_dump": async_dump, "extra_info": True, task: sec}


# A Cell range: opens inside blocks.0 (so Block.0 ends in range with its output only) and
# closes at blocks.1's qkv (whose input is kept, its output not).
SCOPE_CELLS = ["Cell.blocks.0.attn.Attention.forward.0", "Cell.blocks.1.attn.qkv.Dense.forward.0"]
# An API range over two steps (it reopens in step 1; the end API keeps its input only).
SCOPE_APIS = ["Functional.split.0.forward", "Functional.softmax.1.forward"]
# A Cell name in `list` (mix keeps everything inside that Cell, forward and backward).
LIST_MIX = ["Cell.head.norm", "Functional.split"]
# A range that closes in the backward pass: opens at the head's forward, stays open through the
# loss and the backward of the head and of blocks.1 (Cell backward pre-hooks and hooks).
SCOPE_BACKWARD = ["Cell.head.MLP.forward.0", "Cell.blocks.1.Block.backward.0"]
SCOPE_L0 = ["Cell.blocks.0.ln2.LayerNorm.forward.0", "Cell.head.fc1.Dense.forward.0"]


# name -> (tool, config, steps, extra args)
RUNS = {
    "np_L1": ("numprobe", _config(), 2, []),
    # msprobe's peer for L1 runs in md5 mode, so one run serves the statistics and md5 checks.
    "ms_L1": ("msprobe", _config(summary_mode="md5"), 2, []),
    "np_mix": ("numprobe", _config(level="mix"), 1, []),
    "ms_mix": ("msprobe", _config(level="mix"), 1, []),
    "np_L0": ("numprobe", _config(level="L0"), 1, []),
    "np_md5": ("numprobe", _config(summary_mode="md5"), 1, []),
    "np_tensor": ("numprobe", _config(task="tensor", summary_mode="md5"), 1, []),
    "ms_tensor": ("msprobe", _config(task="tensor", summary_mode="md5"), 1, []),
    "np_model": ("numprobe", _config(), 2, ["--model-api"]),
    "np_kill": ("numprobe", _config(), 1, ["--kill-after", "40"]),
    "np_dtypes": ("numprobe", _config(summary_mode="md5"), None, []),
    "ms_dtypes": ("msprobe", _config(summary_mode="md5"), None, []),
    "np_scope_mix": ("numprobe", _config(level="mix", scope=SCOPE_CELLS), 1, []),
    "ms_scope_mix": ("msprobe", _config(level="mix", scope=SCOPE_CELLS), 1, []),
    "np_scope_bw": ("numprobe", _config(level="mix", scope=SCOPE_BACKWARD), 1, []),
    "ms_scope_bw": ("msprobe", _config(level="mix", scope=SCOPE_BACKWARD), 1, []),
    "np_scope_L1": ("numprobe", _config(scope=SCOPE_APIS), 2, []),
    "ms_scope_L1": ("msprobe", _config(scope=SCOPE_APIS), 2, []),
    "np_list_mix": ("numprobe", _config(level="mix", names=LIST_MIX), 1, []),
    "ms_list_mix": ("msprobe", _config(level="mix", names=LIST_MIX), 1, []),
    "np_scope_L0": ("numprobe", _config(level="L0", scope=SCOPE_L0), 1, []),
    "ms_scope_L0": ("msprobe", _config(level="L0", scope=SCOPE_L0), 1, []),
    "np_bw_xor": ("numprobe", _config(level="mix", summary_mode="xor", data_mode=["backward"]), 1, []),
    "ms_bw_xor": ("msprobe", _config(level="mix", summary_mode="xor", data_mode=["backward"]), 1, []),
    "np_fwd_in_mix": ("numprobe", _config(level="mix", data_mode=["forward", "input"]), 1, []),
    "ms_fwd_in_mix": ("msprobe", _config(level="mix", data_mode=["forward", "input"]), 1, []),
    "np_struct": ("numprobe", _config(task="structure", level="mix"), 1, []),
    "ms_struct": ("msprobe", _config(task="structure", level="mix"), 1, []),
    # async_dump changes nothing in numprobe (files are always written in the background).
    "np_async": ("numprobe", _config(task="tensor", names=["Functional"], async_dump=True), 1, []),
}


class _Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _run(base, name):
    tool, cfg, steps, extra = RUNS[name]
    d = os.path.join(base, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, GLOG_v="3", PYTHONWARNINGS="ignore")
    if steps is None:  # the dtype script: one step of single API calls
        cmd = [sys.executable, DTYPES_SCRIPT, "--tool", tool]
    else:
        cmd = [sys.executable, SCRIPT, "--tool", tool, "--config", "config.json",
               "--steps", str(steps)] + extra
    r = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=900)
    for fname, text in (("stdout.log", r.stdout), ("stderr.log", r.stderr), ("rc", str(r.returncode))):
        with open(os.path.join(d, fname), "w") as f:
            f.write(text)
    return d, _Result(r.returncode, r.stdout, r.stderr)


def _reuse(base, name):
    d = os.path.join(base, name)
    read = lambda fname: open(os.path.join(d, fname)).read()  # noqa: E731
    return d, _Result(int(read("rc")), read("stdout.log"), read("stderr.log"))


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    # NUMPROBE_MS_RUNS=<dir of an earlier session's runs> re-checks them without re-running.
    reuse = os.environ.get("NUMPROBE_MS_RUNS")
    if reuse:
        return {n: _reuse(reuse, n) for n in RUNS}
    base = str(tmp_path_factory.mktemp("ms_runs"))
    workers = int(os.environ.get("NUMPROBE_MS_JOBS", "3"))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futs = {n: pool.submit(_run, base, n) for n in RUNS}
        return {n: f.result() for n, f in futs.items()}


def _ok(runs, name):
    d, r = runs[name]
    if name != "np_kill":
        assert r.returncode == 0, f"{name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return d


def _rank_dirs(run_dir):
    return sorted(glob.glob(os.path.join(run_dir, "dump", "step*", "*")))


def _load(rank_dir, fname="dump.json"):
    with open(os.path.join(rank_dir, fname)) as f:
        return json.load(f)


def _close(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b and type(a) is type(b)


def _reduction_close(a, b, scale):
    """Mean/Norm: both tools reduce float32, in different orders; the error of a sum of n
    terms is bounded by n * eps * max|x|, so a mean is compared against the tensor's magnitude."""
    if not (isinstance(a, float) and isinstance(b, float)):
        return a == b and type(a) is type(b)
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b), scale)


def _compare(ours, theirs, path, errs):
    if isinstance(theirs, dict) and theirs.get("type") == "mindspore.Tensor" and isinstance(ours, dict):
        if list(ours) != list(theirs):
            errs.append(f"{path}: keys {list(ours)} != {list(theirs)}")
            return
        mags = [abs(v) for v in (theirs.get("Max"), theirs.get("Min"))
                if isinstance(v, float) and math.isfinite(v)]
        scale = max(mags, default=0.0)
        for k, v in theirs.items():
            ok = _reduction_close(ours[k], v, scale) if k in ("Mean", "Norm") else _close(ours[k], v)
            if not ok:
                errs.append(f"{path}.{k}: {ours[k]!r} != {v!r}")
        return
    if isinstance(theirs, dict):
        if not isinstance(ours, dict) or list(ours) != list(theirs):
            errs.append(f"{path}: keys {list(ours) if isinstance(ours, dict) else ours} != {list(theirs)}")
            return
        for k, v in theirs.items():
            _compare(ours[k], v, f"{path}.{k}", errs)
    elif isinstance(theirs, list):
        if not isinstance(ours, list) or len(ours) != len(theirs):
            errs.append(f"{path}: {ours!r:.80} != {theirs!r:.80}")
            return
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _compare(a, b, f"{path}[{i}]", errs)
    elif not _close(ours, theirs):
        errs.append(f"{path}: {ours!r} != {theirs!r}")


def _strip_md5(x):
    if isinstance(x, dict):
        return {k: _strip_md5(v) for k, v in x.items() if k != "md5"}
    if isinstance(x, list):
        return [_strip_md5(v) for v in x]
    return x


def _assert_same_dump(ours_dir, theirs_dir, check_order=True, strip_md5=False):
    ours, theirs = _load(ours_dir), _load(theirs_dir)
    if strip_md5:  # a statistics-mode dump against msprobe's md5-mode one
        theirs = _strip_md5(theirs)
    assert {k: v for k, v in ours.items() if k not in ("data", "dump_data_dir")} == \
        {k: v for k, v in theirs.items() if k not in ("data", "dump_data_dir")}
    names_o, names_t = list(ours["data"]), list(theirs["data"])
    assert set(names_o) == set(names_t), (
        f"only numprobe: {sorted(set(names_o) - set(names_t))[:10]}, "
        f"only msprobe: {sorted(set(names_t) - set(names_o))[:10]}")
    if check_order:
        assert names_o == names_t
    errs = []
    for name, body in theirs["data"].items():
        _compare(ours["data"][name], body, name, errs)
    assert not errs, f"{len(errs)} differences, first: {errs[:8]}"


def _validate(rank_dir):
    exe = os.environ.get("NUMPROBE_BIN")
    if not exe:
        pytest.skip("NUMPROBE_BIN (the numprobe CLI) is not set")
    r = subprocess.run([exe, "validate", rank_dir], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_statistics_L1_matches_msprobe(runs):
    ours, theirs = _rank_dirs(_ok(runs, "np_L1")), _rank_dirs(_ok(runs, "ms_L1"))
    assert [os.path.basename(os.path.dirname(d)) for d in ours] == ["step0", "step1"]
    assert len(ours) == len(theirs) == 2
    for o, t in zip(ours, theirs):
        assert os.path.basename(o).startswith("proc")
        _assert_same_dump(o, t, strip_md5=True)
        assert _load(o, "construct.json") == {}
        stack_o, stack_t = _load(o, "stack.json"), _load(t, "stack.json")
        names = lambda s: sorted(n for grp in s.values() for n in grp[0])  # noqa: E731
        assert names(stack_o) == names(stack_t)
    data = _load(ours[1])["data"]
    # Kinds msprobe records on this script: primitives of the cells, ops, Tensor methods, jit.
    for name in ("Primitive.matmul.MatMul.0.forward", "Functional.split.0.backward",
                 "Tensor.__mul__.0.forward", "Jit.SGD.0.forward", "Jit.forward_fn.0.backward"):
        assert name in data
    rec = data["Functional.cross_entropy.0.forward"]["input_args"][1]
    assert rec["type"] == "mindspore.Tensor" and rec["dtype"] == "Int32"
    assert isinstance(rec["Mean"], float) and "requires_grad" not in rec


def test_statistics_L1_matches_fixture_names():
    """The shipped fixture (another machine) has the same entry names in the same order."""
    fx = _rank_dirs(os.path.join(FIXTURES, "ms_tiny_f32_stat_L1"))
    assert len(fx) == 2 and len(_load(fx[0])["data"]) == 218


def test_mix_matches_msprobe(runs):
    (ours,), (theirs,) = _rank_dirs(_ok(runs, "np_mix")), _rank_dirs(_ok(runs, "ms_mix"))
    # Known difference: a parameters_grad entry lands one place earlier than msprobe's (before
    # the primitive backward of the same cell); names and contents agree.
    _assert_same_dump(ours, theirs, check_order=False)
    assert _load(ours, "construct.json") == _load(theirs, "construct.json")
    names = list(_load(ours)["data"])
    # Cells are re-inserted after the APIs they contain.
    assert names.index("Cell.embed.Dense.forward.0") > names.index("Primitive.bias_add.BiasAdd.0.forward")


def _sorted_grads(data):
    """parameters_grad keys follow the order the gradients arrived, which differs between L0
    and mix in msprobe itself (LayerNorm: gamma first at L0, beta first at mix)."""
    return {n: (dict(sorted(b.items())) if ".parameters_grad." in n else b) for n, b in data.items()}


def test_L0_matches_msprobe(runs):
    (ours,), (theirs,) = _rank_dirs(_ok(runs, "np_L0")), _rank_dirs(_ok(runs, "ms_mix"))
    data_o, data_t = _load(ours)["data"], _load(theirs)["data"]
    # Names, order and keys: msprobe's own L0 dump of this script (the fixture).
    fx = _rank_dirs(os.path.join(FIXTURES, "ms_tiny_f32_stat_L0"))[0]
    data_fx = _load(fx)["data"]
    assert list(data_o) == list(data_fx)
    for n, body in data_fx.items():
        assert list(data_o[n]) == list(body), n
    # Values: the Cell entries of msprobe's mix dump of the same step on this machine.
    cells_t = {n: b for n, b in data_t.items() if n.startswith("Cell.")}
    assert set(data_o) == set(cells_t)
    errs = []
    sorted_o, sorted_t = _sorted_grads(data_o), _sorted_grads(cells_t)
    for n, body in sorted_t.items():
        _compare(sorted_o[n], body, n, errs)
    assert not errs, errs[:8]
    cons_t = {k: v for k, v in _load(theirs, "construct.json").items() if k.startswith("Cell.")}
    assert _load(ours, "construct.json") == cons_t
    assert _load(ours)["level"] == "L0"


def test_md5_matches_msprobe(runs):
    (ours,), theirs = _rank_dirs(_ok(runs, "np_md5")), _rank_dirs(_ok(runs, "ms_L1"))[0]
    _assert_same_dump(ours, theirs)
    rec = _load(ours)["data"]["Primitive.matmul.MatMul.0.forward"]["input_args"][0]
    assert list(rec)[-1] == "md5" and len(rec["md5"]) == 8


def test_tensor_mode_files(runs, tmp_path):
    (ours,), (theirs,) = _rank_dirs(_ok(runs, "np_tensor")), _rank_dirs(_ok(runs, "ms_L1"))[:1]
    dump = _load(ours)
    assert dump["task"] == "tensor"
    assert dump["dump_data_dir"] == os.path.join(ours, "dump_tensor_data")
    assert list(dump["data"]) == list(_load(theirs)["data"])
    n_files = 0

    def walk(x):
        nonlocal n_files
        if isinstance(x, dict):
            if x.get("type") == "mindspore.Tensor":
                arr = np.load(os.path.join(ours, "dump_tensor_data", x["data_name"]),
                              allow_pickle=False)
                assert list(arr.shape) == x["shape"]
                # Written by the Rust writer thread: the bytes np.save writes for the array.
                with open(os.path.join(ours, "dump_tensor_data", x["data_name"]), "rb") as f:
                    assert f.read() == _np_save_bytes(arr, str(tmp_path / "ref.npy"))
                if arr.size and arr.dtype == np.float32 and arr.ndim:
                    assert float(arr.max()) == x["Max"] and float(arr.min()) == x["Min"]
                # summary_mode md5: CRC-32 of the saved values (what msprobe hashes).
                assert x["md5"] == format(zlib.crc32(arr.tobytes()), "08x")
                assert list(x)[-2:] == ["data_name", "md5"]
                n_files += 1
                return
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for name, body in dump["data"].items():
        walk(body)
    assert n_files == len(os.listdir(os.path.join(ours, "dump_tensor_data"))) > 200
    # The same files as msprobe's, byte for byte.
    (peer,) = _rank_dirs(_ok(runs, "ms_tensor"))
    files = sorted(os.listdir(os.path.join(ours, "dump_tensor_data")))
    assert files == sorted(os.listdir(os.path.join(peer, "dump_tensor_data")))
    for f in files:
        with open(os.path.join(ours, "dump_tensor_data", f), "rb") as a, \
                open(os.path.join(peer, "dump_tensor_data", f), "rb") as b:
            assert a.read() == b.read(), f
    rec = dump["data"]["Functional.split.0.forward"]["output"][2]
    assert rec["data_name"] == "Functional.split.0.forward.output.2.npy"
    grad = dump["data"]["Functional.split.0.backward"]["input"][0]
    assert grad["data_name"] == "Functional.split.0.backward.input.0.npy"
    _validate(ours)


def test_dtype_rules_equal_msprobe(runs):
    """Statistics, checksums and argument records over dtypes: the same JSON text as msprobe."""
    (ours,), (theirs,) = _rank_dirs(_ok(runs, "np_dtypes")), _rank_dirs(_ok(runs, "ms_dtypes"))
    data_o, data_t = _load(ours)["data"], _load(theirs)["data"]
    assert list(data_o) == list(data_t)
    for name, body in data_t.items():
        assert json.dumps(data_o[name]) == json.dumps(body), name
    rec = data_o["Functional.abs.0.forward"]["input_args"][0]
    assert rec["dtype"] == "Int32" and rec["Mean"] == 3.25  # integers are cast, all four kept
    assert data_o["Functional.abs.7.forward"]["input_args"][0]["Max"] == math.inf  # NaN skipped
    _validate(ours)


def test_validate_accepts_every_dump(runs):
    for name in ("np_L1", "np_mix", "np_L0", "np_md5"):
        for d in _rank_dirs(_ok(runs, name)):
            _validate(d)


def test_model_callback(runs):
    dirs = _rank_dirs(_ok(runs, "np_model"))
    assert [os.path.basename(os.path.dirname(d)) for d in dirs] == ["step0", "step1"]
    for d in dirs:
        data = _load(d)["data"]
        # No model is given to start(), so only APIs (as with msprobe's MsprobeStep).
        assert "Functional.cross_entropy.0.forward" in data
        assert "Functional.cross_entropy.0.backward" in data
        assert not any(n.startswith(("Primitive.", "Cell.")) for n in data)
        _validate(d)


def test_sigkill_keeps_what_was_recorded(runs, tmp_path):
    d, r = runs["np_kill"]
    assert r.returncode == -9, r.stdout[-2000:] + r.stderr[-2000:]
    (rank_dir,) = _rank_dirs(d)
    exe = os.environ.get("NUMPROBE_BIN")
    if exe:
        rr = subprocess.run([exe, "recover", os.path.join(d, "dump")], capture_output=True, text=True)
        assert rr.returncode == 0, rr.stdout + rr.stderr
    else:
        import numprobe

        numprobe.recover(os.path.join(d, "dump"))
    got = list(_load(rank_dir)["data"])
    (peer,) = _rank_dirs(_ok(runs, "ms_L1"))[:1]
    want = [n for n in _load(peer)["data"] if n.endswith(".forward")]
    api_fwd = [n for n in got if n.endswith(".forward")]
    # The 40th API call was recorded before the kill, and everything before it in order.
    n_api = sum(1 for n in api_fwd if not n.startswith("Primitive."))
    assert n_api >= 40
    assert api_fwd == want[: len(api_fwd)]
    # recover keeps the journal (it may be run again): validate reports the run as unfinished
    # until the journal is deleted.
    os.remove(os.path.join(rank_dir, "numprobe_journal.bin"))
    _validate(rank_dir)


def test_msprobe_compare_runs_on_numprobe_dump(runs, tmp_path):
    (ours,), theirs = _rank_dirs(_ok(runs, "np_md5")), _rank_dirs(_ok(runs, "ms_L1"))[0]
    exe = shutil.which("msprobe") or os.path.join(os.path.dirname(sys.executable), "msprobe")
    out = tmp_path / "cmp"
    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    r = subprocess.run([exe, "compare", "-tp", os.path.join(ours, "dump.json"),
                        "-gp", os.path.join(theirs, "dump.json"), "-o", str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    csvs = glob.glob(str(out / "compare_result_*.csv"))
    assert len(csvs) == 1
    import csv

    with open(csvs[0], encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) > 200
    result_col = next(k for k in rows[0] if k.strip().lower() == "result")
    bad = [r for r in rows if r[result_col] not in ("pass", "")]
    assert not bad, bad[:3]


def _stack_names(rank_dir):
    return sorted(n for grp in _load(rank_dir, "stack.json").values() for n in grp[0])


def _assert_scope_run(runs, np_name, ms_name, check_order):
    ours, theirs = _rank_dirs(_ok(runs, np_name)), _rank_dirs(_ok(runs, ms_name))
    assert len(ours) == len(theirs) >= 1
    for o, t in zip(ours, theirs):
        _assert_same_dump(o, t, check_order=check_order)
        assert _stack_names(o) == _stack_names(t)
        # construct.json is written before the filter applies: the whole model either way.
        assert _load(o, "construct.json") == _load(t, "construct.json")
    return [_load(o)["data"] for o in ours]


def test_scope_over_cells_mix_matches_msprobe(runs):
    (data,) = _assert_scope_run(runs, "np_scope_mix", "ms_scope_mix", check_order=False)
    full = _load(_rank_dirs(_ok(runs, "np_mix"))[0])["data"]
    assert 0 < len(data) < len(full) / 2
    assert "Primitive.layer_norm.LayerNorm.0.forward" not in data  # before the range
    assert "Cell.ln_f.LayerNorm.forward.0" not in data  # after the range
    # A Cell that began in the range and ended after it: its input only.
    assert list(data["Cell.blocks.1.Block.forward.0"]) == ["input_args", "input_kwargs"]
    start = data["Cell.blocks.0.attn.Attention.forward.0"]
    assert "input_args" in start and "output" in start
    # A Cell that began before the range and ended in it: its output only.
    assert "input_args" not in data["Cell.blocks.0.Block.forward.0"]
    assert "output" in data["Cell.blocks.0.Block.forward.0"]
    # The closing Cell: its input only (the range closes before its output is checked).
    assert list(data["Cell.blocks.1.attn.qkv.Dense.forward.0"]) == ["input_args", "input_kwargs"]


def test_scope_closing_in_backward_matches_msprobe(runs):
    (data,) = _assert_scope_run(runs, "np_scope_bw", "ms_scope_bw", check_order=False)
    for name in ("Cell.head.MLP.forward.0", "Functional.cross_entropy.0.backward",
                 "Cell.head.fc2.Dense.backward.0", "Cell.head.fc2.Dense.parameters_grad.0",
                 "Cell.blocks.1.Block.backward.0"):
        assert name in data, name
    assert "Cell.blocks.0.Block.backward.0" not in data


def test_scope_over_apis_L1_matches_msprobe(runs):
    datas = _assert_scope_run(runs, "np_scope_L1", "ms_scope_L1", check_order=True)
    assert len(datas) == 2
    for data in datas:
        names = list(data)
        assert names[0] == "Functional.split.0.forward" and names[-1] == "Functional.softmax.1.forward"
        assert "output" not in data["Functional.softmax.1.forward"]
        assert not any(n.endswith(".backward") for n in names)
        assert any(n.startswith("Primitive.") for n in names)


def test_list_with_a_cell_mix_matches_msprobe(runs):
    (data,) = _assert_scope_run(runs, "np_list_mix", "ms_list_mix", check_order=False)
    # Everything inside Cell.head.norm, forward and backward, plus names containing a string.
    for name in ("Primitive.layer_norm.LayerNorm.5.forward", "Cell.head.norm.LayerNorm.forward.0",
                 "Cell.head.norm.LayerNorm.backward.0", "Functional.split.1.forward",
                 "Cell.head.norm.LayerNorm.parameters_grad.0"):
        assert name in data, name
    assert "Primitive.layer_norm.LayerNorm.4.forward" not in data


def test_scope_over_cells_L0_matches_msprobe(runs):
    (data,) = _assert_scope_run(runs, "np_scope_L0", "ms_scope_L0", check_order=True)
    assert "Cell.blocks.0.ln1.LayerNorm.forward.0" not in data
    assert list(data["Cell.head.fc1.Dense.forward.0"]) == ["input_args", "input_kwargs"]


def test_async_dump_changes_nothing(runs):
    (ours,), (full,) = _rank_dirs(_ok(runs, "np_async")), _rank_dirs(_ok(runs, "np_tensor"))
    data, data_full = _load(ours)["data"], _load(full)["data"]
    assert list(data) == [n for n in data_full if "Functional" in n] and data
    files = sorted(os.listdir(os.path.join(ours, "dump_tensor_data")))
    assert files and all(f.startswith("Functional.") and f.endswith(".npy") for f in files)
    for f in files:
        a = open(os.path.join(ours, "dump_tensor_data", f), "rb").read()
        b = open(os.path.join(full, "dump_tensor_data", f), "rb").read()
        assert a == b, f
    _validate(ours)


def test_async_dump_option_is_accepted_silently(tmp_path):
    import warnings

    from numprobe.config import ConfigError, DumpConfig
    from numprobe.mindspore.recorder import Recorder

    cfg = DumpConfig(_config(async_dump=True) | {"dump_path": str(tmp_path)})
    assert cfg.async_dump is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rec = Recorder(cfg)
    rec.close()
    with pytest.raises(ConfigError):
        DumpConfig(_config(async_dump="yes"))


def test_bad_scope_is_refused():
    from numprobe.config import ConfigError, DumpConfig
    from numprobe.mindspore.recorder import Recorder

    for level, scope in (("L1", ["Cell.a.Dense.forward.0", "Cell.b.Dense.forward.0"]),
                         ("L0", ["Functional.relu.0.forward", "Functional.relu.1.forward"]),
                         ("L1", ["Functional.relu.0.forward"]),
                         ("mix", ["relu", "Functional.relu.1.forward"])):
        with pytest.raises(ConfigError):
            Recorder(DumpConfig(_config(level=level, scope=scope)))


def _np_save_bytes(arr, path):
    np.save(path, arr)
    with open(path, "rb") as f:
        return f.read()


def test_npy_files_written_by_rust_equal_np_save(tmp_path):
    """`Session.save_tensor` with a `.npy` path: the bytes `np.save` writes for the same array,
    for every dtype a MindSpore tensor hands over (bfloat16 as its float32 copy)."""
    import mindspore as ms

    from numprobe import _native

    rng = np.random.default_rng(3)
    base = rng.standard_normal((3, 4)).astype(np.float32) * 50
    bf16 = ms.Tensor(base, ms.bfloat16).astype(ms.float32).asnumpy()
    arrays = [bf16, base, base.astype(np.float16), base.astype(np.float64), base > 0]
    arrays += [base.astype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.int64)]
    arrays += [base.astype(np.uint16), base[:2].astype(np.complex64),
               np.array(2.5, np.float32), np.array(True), np.array(-7, np.int64),
               np.zeros((0,), np.float32), np.zeros((2, 0, 3), np.int32),
               np.arange(123_457, dtype=np.float32), ms.Tensor(base).asnumpy()]
    s = _native.Session(str(tmp_path / "rank"), "tensor", "L1", "mindspore",
                        str(tmp_path / "t"), True, "statistics")
    os.makedirs(tmp_path / "t")
    for i, arr in enumerate(arrays):
        s.save_tensor(str(tmp_path / "t" / f"{i}.npy"), arr.ctypes.data, arr.nbytes,
                      arr.dtype.str, list(arr.shape))
    s.close()
    for i, arr in enumerate(arrays):
        ours = (tmp_path / "t" / f"{i}.npy").read_bytes()
        assert ours == _np_save_bytes(arr, str(tmp_path / f"ref{i}.npy")), (arr.dtype, arr.shape)
    with pytest.raises(ValueError):
        arr = base.astype(">f4")
        s2 = _native.Session(str(tmp_path / "rank2"), "tensor", "L1", "mindspore", None, True,
                             "statistics")
        s2.save_tensor(str(tmp_path / "x.npy"), arr.ctypes.data, arr.nbytes, arr.dtype.str, [3, 4])


def test_structure_task_matches_msprobe(runs):
    """task structure: dump.json without data, but construct.json and the call stacks."""
    (ours,), (theirs,) = _rank_dirs(_ok(runs, "np_struct")), _rank_dirs(_ok(runs, "ms_struct"))
    assert _load(ours) == dict(_load(theirs), dump_data_dir=_load(ours)["dump_data_dir"])
    assert _load(ours)["data"] == {}
    assert _load(ours, "construct.json") == _load(theirs, "construct.json")
    names = _stack_names(ours)
    assert names == _stack_names(theirs) and len(names) > 100
    _validate(ours)


def test_backward_only_xor_mix_matches_msprobe(runs):
    """data_mode backward: msprobe still writes the call stack of every forward it collects;
    summary_mode xor: msprobe 26.2 has no MindSpore XOR checksum, so records hold "md5": null."""
    (ours,), (theirs,) = _rank_dirs(_ok(runs, "np_bw_xor")), _rank_dirs(_ok(runs, "ms_bw_xor"))
    _assert_same_dump(ours, theirs, check_order=False)
    data = _load(ours)["data"]
    assert data and all(".backward." in n or n.endswith(".backward") or ".parameters_grad." in n
                        for n in data)
    rec = data["Functional.cross_entropy.0.backward"]["input"][0]
    assert list(rec) == ["type", "dtype", "shape", "md5"] and rec["md5"] is None
    names = _stack_names(ours)
    assert names == _stack_names(theirs) and "Functional.cross_entropy.0.forward" in names
    # (numprobe validate rejects stack names without a dump.json entry, msprobe's own dump too.)


def test_forward_input_only_mix_matches_msprobe(runs):
    """data_mode [forward, input]: Cells keep their inputs only (no "parameters" key) and stay
    where their input was recorded, as msprobe's do."""
    (ours,), (theirs,) = _rank_dirs(_ok(runs, "np_fwd_in_mix")), _rank_dirs(_ok(runs, "ms_fwd_in_mix"))
    _assert_same_dump(ours, theirs, check_order=True)
    data = _load(ours)["data"]
    assert list(data["Cell.embed.Dense.forward.0"]) == ["input_args", "input_kwargs"]
    assert list(data).index("Cell.embed.Dense.forward.0") < list(data).index(
        "Primitive.matmul.MatMul.0.forward")
    _validate(ours)
