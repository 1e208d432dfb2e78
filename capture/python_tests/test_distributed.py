"""torch.distributed on CPU (gloo): numprobe's capture against msprobe's, rank by rank, and the
whole-run compare on the dumps it makes.

dist_model.py runs a tensor-parallel-style step (all_gather, all_reduce, broadcast,
reduce_scatter on an explicit group) in 2 and 4 processes. numprobe and msprobe run it
separately with the same config.json: the trees (step{N}/rank{R}/ and their files) and every
dump.json must be equal, statistics included (same machine, same kernels). gloo in this
torch build implements reduce_scatter (dist_model.py checks, and falls back to all_reduce
where a build lacks it, which the test then reports in its entries).
"""
import json
import os
import re
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "dist_model.py")
# numprobe's own crash journal beside the JSON files (msprobe has none).
OWN_FILES = {"numprobe_journal.bin"}


def _have_msprobe():
    try:
        import msprobe  # noqa: F401
        return True
    except Exception:
        return False


HAVE_MSPROBE = _have_msprobe()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_model(tmp, tool, world, name, perturb_rank=-1, **cfg_extra):
    cfg = {"task": "statistics", "dump_path": os.path.join(tmp, name), "rank": [], "step": [],
           "level": "L1", "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                         "summary_mode": "statistics"}}
    cfg.update(cfg_extra)
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    r = subprocess.run([sys.executable, MODEL, tool, path, str(world), str(free_port()),
                        "--perturb-rank", str(perturb_rank)],
                       capture_output=True, text=True, timeout=300, cwd=tmp)
    assert r.returncode == 0, r.stderr[-4000:]
    return cfg["dump_path"], r.stderr


def tree(root):
    """Relative paths of the files under root, numprobe's journal left out."""
    out = set()
    for d, _, files in os.walk(root):
        for f in files:
            if f not in OWN_FILES:
                out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def load(root, rel):
    with open(os.path.join(root, rel)) as f:
        return json.load(f)


_RUNS = {}


def numprobe_and_msprobe(tmp_path_factory, world):
    if world not in _RUNS:
        tmp = str(tmp_path_factory.mktemp(f"dist{world}"))
        ours, _ = run_model(tmp, "numprobe", world, "np")
        theirs, _ = run_model(tmp, "msprobe", world, "ms") if HAVE_MSPROBE else (None, None)
        _RUNS[world] = (ours, theirs)
    return _RUNS[world]


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
@pytest.mark.parametrize("world", [2, 4])
def test_distributed_dumps_equal_msprobe(tmp_path_factory, world):
    ours, theirs = numprobe_and_msprobe(tmp_path_factory, world)
    want = {f"step{s}/rank{r}/{f}" for s in (0, 1) for r in range(world)
            for f in ("dump.json", "stack.json", "construct.json")}
    assert tree(theirs) == want
    assert tree(ours) == want
    for rel in sorted(want):
        if rel.endswith("dump.json"):
            a, b = load(ours, rel), load(theirs, rel)
            assert list(a["data"]) == list(b["data"]), rel
            for key in b["data"]:
                assert a["data"][key] == b["data"][key], (rel, key)
            assert a == b, rel


def test_collective_arguments_are_recorded(tmp_path_factory):
    ours, _ = numprobe_and_msprobe(tmp_path_factory, 2)
    data = load(ours, "step0/rank1/dump.json")["data"]
    group = {"type": "torch.ProcessGroup", "group_ranks": [0, 1], "group_id": "%08x" % (
        __import__("zlib").crc32(b"[0, 1]"))}
    op = {"type": "torch.distributed.ReduceOp", "value": "RedOpType.SUM"}
    ar = data["Distributed.all_reduce.0.forward"]
    assert ar["input_kwargs"] == {"op": op, "group": group}
    # The in-place result: the arguments after the call, then the keywords' values.
    assert ar["output"][1:] == [op, group]
    assert ar["output"][0]["shape"] == [4, 8]
    bc = data["Distributed.broadcast.0.forward"]
    assert bc["input_kwargs"]["src"] == {"type": "int", "value": 0}
    assert bc["input_args"][0]["Max"] == 0.0 and bc["output"][0]["Max"] == 2.0  # rank 1 receives
    ag = data["Distributed.all_gather.0.forward"]
    assert ag["input_args"][0] is None  # the destination list, as msprobe's ignore rules
    assert len(ag["output"][0]) == 2
    names = [k for k in data if k.startswith("Distributed.")]
    assert names == ["Distributed.all_gather.0.forward", "Distributed.all_reduce.0.forward",
                     "Distributed.broadcast.0.forward", "Distributed.reduce_scatter.0.forward"]


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
def test_rank_and_step_filters_match_msprobe(tmp_path):
    tmp = str(tmp_path)
    ours, _ = run_model(tmp, "numprobe", 2, "np", rank=[1], step=[1])
    theirs, _ = run_model(tmp, "msprobe", 2, "ms", rank=[1], step=[1])
    want = {f"step1/rank1/{f}" for f in ("dump.json", "stack.json", "construct.json")}
    assert tree(ours) == tree(theirs) == want
    assert load(ours, "step1/rank1/dump.json") == load(theirs, "step1/rank1/dump.json")


@pytest.mark.parametrize("filt, said", [
    ({"rank": [5]}, "no rank of config.json's rank list [5] is in this run of 2 ranks"),
    ({"step": [7]}, "before reaching any of config.json's steps [7] after 2 steps: nothing was dumped"),
])
def test_a_filter_that_matches_nothing_says_so_and_dumps_nothing(tmp_path, filt, said):
    root, err = run_model(str(tmp_path), "numprobe", 2, "np", **filt)
    assert not os.path.exists(root)
    assert err.count("numprobe: warning: ") == 1, err[-3000:]
    assert said in err, err[-3000:]


def numprobe_bin():
    exe = os.environ.get("NUMPROBE_BIN")
    assert exe and os.path.exists(exe), "set NUMPROBE_BIN to the numprobe binary (cargo build -p numprobe)"
    return exe


def test_whole_run_compare_finds_the_rank_that_produced_the_difference(tmp_path_factory, tmp_path):
    """Rank 1's input is nudged: the all_reduce carries the difference to ranks 0, 2 and 3,
    and the compare of the whole run names rank 1 and the API that made it."""
    golden, _ = numprobe_and_msprobe(tmp_path_factory, 4)
    target, _ = run_model(str(tmp_path), "numprobe", 4, "np", perturb_rank=1)
    out = str(tmp_path / "out")
    r = subprocess.run([numprobe_bin(), "compare", target, golden, "--out", out, "--workers", "2",
                        "--timestamp", "20260101000000"], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    with open(os.path.join(out, "summary.md")) as f:
        summary = f.read()
    origin = [l for l in summary.splitlines() if l.startswith("Origin:")]
    assert origin == ["Origin: rank 1, API Tensor.__add__.0.forward"], summary
    for s in (0, 1):
        for rank in range(4):
            assert os.path.isfile(os.path.join(out, f"step{s}", f"compare_result_rank{rank}_20260101000000.csv"))
    with open(os.path.join(out, "run_summary.json")) as f:
        run = json.load(f)
    step0 = run["steps"][0]
    assert step0["first_divergence"]["rank_1"]["kind"] == "produced"
    for rank in (0, 2, 3):
        assert step0["first_divergence"][f"rank_{rank}"] == {
            "op_name": "Distributed.all_reduce.0.forward", "kind": "received",
            "collectives_before": 1}
    da = [f for f in os.listdir(os.path.join(out, "step0")) if re.match(r"diff_analyze_\d{14}\.json$", f)]
    with open(os.path.join(out, "step0", da[0])) as f:
        assert list(json.load(f)) == ["rank_1"]
