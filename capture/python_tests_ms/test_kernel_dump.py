"""Level L2 (MindSpore's kernel dump) captured by numprobe and by msprobe on the same script:
the same dump configuration, the same file tree, the same bytes per tensor file; and the
statistics task on the CPU, where MindSpore (and so msprobe) writes no statistics."""
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ms_kernel_net.py")


def _run(tool, out, mode, task, lst=None, summary_mode="statistics"):
    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    env.pop("MINDSPORE_DUMP_CONFIG", None)
    cmd = [sys.executable, SCRIPT, tool, str(out), mode, task, ",".join(lst or []), summary_mode]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _tree(root):
    """Relative path -> sha256 of every file MindSpore wrote, timestamps in names masked."""
    out = {}
    seen = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != "graphs"]
        for f in sorted(files):  # time order within a folder (timestamps are in the names)
            if f in ("config.json",) and d == str(root):
                continue
            rel = os.path.relpath(os.path.join(d, re.sub(r"\.\d{12,}\.", ".TS.", f)), root)
            # One kernel can write the same name twice in an iteration (timestamps aside).
            seen[rel] = seen.get(rel, 0) + 1
            if seen[rel] > 1:
                rel = f"{rel}#{seen[rel]}"
            if rel.startswith(".dump_metadata") or "/.dump_metadata/" in rel or rel.endswith(
                    "data_dump.json") or rel.endswith(os.path.join(".dump_metadata", "config.json")):
                continue
            with open(os.path.join(d, f), "rb") as fh:
                data = fh.read()
            if f == "kernel_kbyk_dump.json":
                data = data.replace(str(root).encode(), b"ROOT")
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


@pytest.mark.parametrize("mode", ["graph", "jit", "model", "model2"])
def test_tensor_task_equals_msprobe(tmp_path, mode):
    """graph/jit: the debugger's start/stop/step around each step; model: msprobe's MsprobeStep
    callback in Model.train (2 steps); model2: the same Model trained twice with one callback
    (msprobe restarts the iteration folders at each train)."""
    ours, theirs = tmp_path / "numprobe", tmp_path / "msprobe"
    r = _run("numprobe", ours, mode, "tensor")
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
    r = _run("msprobe", theirs, mode, "tensor")
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
    a, b = _tree(ours), _tree(theirs)
    assert "kernel_kbyk_dump.json" in a
    assert sum(k.endswith(".npy") for k in a) > 10
    if mode == "jit":
        # MindSpore writes a jit function's Parameter (argument) files from a thread of its own
        # at the end of the call: which iteration folder gets them varies from run to run, for
        # msprobe as for numprobe. Their contents must still be the same.
        def split(t):
            params = sorted(v for k, v in t.items() if "/Parameter." in k)
            return {k: v for k, v in t.items() if "/Parameter." not in k}, params
        (a, pa), (b, pb) = split(a), split(b)
        assert pa == pb
    assert a == b
    if mode.startswith("model"):
        iterations = sorted(os.listdir(ours / "rank_0" / "Net" / "0"))
        assert iterations == ["0", "1"], iterations
        steps_in_0 = sum(k.startswith("rank_0/Net/0/0/Parameter.fc_weight.") for k in a)
        assert steps_in_0 == (2 if mode == "model2" else 1)
    # numprobe's reader takes the tree as it is.
    exe = os.environ.get("NUMPROBE_BIN")
    if exe:
        v = subprocess.run([exe, "validate", str(ours)], capture_output=True, text=True)
        assert v.returncode == 0, v.stdout + v.stderr


def _num(cell):
    return {"True": 1.0, "False": 0.0}.get(cell, None) if cell in ("True", "False") else float(cell)


@pytest.mark.parametrize("mode", ["graph", "model"])
def test_statistics_task_on_cpu(tmp_path, mode):
    """msprobe's JSON, then MindSpore refuses statistic dumps on the CPU; numprobe writes the
    same JSON and delivers statistic.csv computed from staged tensors, which it removes (also
    step by step from MsprobeStep in Model.train)."""
    ours, theirs, tensors = tmp_path / "numprobe", tmp_path / "msprobe", tmp_path / "tensors"
    r = _run("msprobe", theirs, mode, "statistics")
    assert "done" not in r.stdout and "statistic dump is only supported" in r.stderr
    r = _run("numprobe", ours, mode, "statistics")
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
    with open(ours / "kernel_kbyk_dump.json") as f, open(theirs / "kernel_kbyk_dump.json") as g:
        assert json.load(f) == json.loads(g.read().replace(str(theirs), str(ours)))
    assert not list(ours.rglob("*.npy")), "staged tensors are removed"
    assert sorted(p.name for p in (ours / "rank_0" / "Net" / "0").iterdir()) == ["0", "1"]
    r = _run("numprobe", tensors, mode, "tensor")
    assert r.returncode == 0, r.stderr[-3000:]
    import csv

    checked = 0
    for it in ("0", "1"):
        with open(ours / "rank_0" / "Net" / "0" / it / "statistic.csv") as f:
            rows = list(csv.DictReader(f))
        files = {re.sub(r"\.\d{12,}\.", ".", p.name): p
                 for p in (tensors / "rank_0" / "Net" / "0" / it).glob("*.npy")}
        assert len(rows) == len(files)
        for row in rows:
            name = (f"{row['Op Type']}.{row['Op Name']}.{row['Task ID']}.{row['Stream ID']}."
                    f"{row['IO']}.{row['Slot']}.DefaultFormat.")
            match = [p for k, p in files.items() if k.startswith(name)]
            assert len(match) == 1, name
            arr = np.load(match[0])
            assert _num(row["Max Value"]) == float(np.max(arr))
            assert _num(row["Min Value"]) == float(np.min(arr))
            wide = arr.astype(np.float64)
            if arr.dtype != np.bool_:
                assert _num(row["Avg Value"]) == pytest.approx(float(np.mean(wide)), rel=1e-6,
                                                              abs=1e-12)
                assert _num(row["L2Norm Value"]) == pytest.approx(
                    float(np.sqrt(np.sum(wide * wide))), rel=1e-6, abs=1e-12)
            checked += 1
    assert checked > 100


def test_filter_that_matches_nothing_says_so(tmp_path):
    r = _run("numprobe", tmp_path / "out", "graph", "tensor", ["NoSuchKernel"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "level L2 dumped no kernel so far: the `list` filter ['NoSuchKernel'] matched" in r.stderr
    # A filter that matches says nothing of the kind.
    r = _run("numprobe", tmp_path / "out2", "graph", "tensor",
             ["Default/network-WithLossCell/_backbone-Net/fc-Dense/MatMul-op0"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "dumped no kernel" not in r.stderr
    assert list((tmp_path / "out2").rglob("MatMul.*.npy"))


def test_debugger_after_the_graph_compiled_is_an_error(tmp_path):
    r = _run("numprobe", tmp_path / "out", "late", "tensor")
    assert r.returncode != 0 and "done" not in r.stdout
    assert "a graph was compiled before level L2 was set up" in r.stderr, r.stderr[-3000:]
    assert not list((tmp_path / "out").rglob("*.npy"))


def test_debugger_after_communication_init_is_an_error(tmp_path):
    r = _run("numprobe", tmp_path / "out", "afterinit", "tensor")
    assert r.returncode != 0 and "done" not in r.stdout
    assert "before mindspore.communication.init()" in r.stderr, r.stderr[-3000:]


def test_md5_statistics_task_on_cpu(tmp_path):
    """summary_mode md5: MindSpore's MD5 column (hash:md5), the MD5 of each tensor's bytes."""
    ours, tensors = tmp_path / "numprobe", tmp_path / "tensors"
    r = _run("numprobe", ours, "graph", "statistics", summary_mode="md5")
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-3000:]
    with open(ours / "kernel_kbyk_dump.json") as f:
        assert json.load(f)["common_dump_settings"]["statistic_category"] == ["hash:md5"]
    assert not list(ours.rglob("*.npy"))
    r = _run("numprobe", tensors, "graph", "tensor")
    assert r.returncode == 0, r.stderr[-3000:]
    import csv

    checked = 0
    for it in ("0", "1"):
        with open(ours / "rank_0" / "Net" / "0" / it / "statistic.csv") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0])[-1] == "MD5" and "Max Value" not in rows[0]
        files = {re.sub(r"\.\d{12,}\.", ".", p.name): p
                 for p in (tensors / "rank_0" / "Net" / "0" / it).glob("*.npy")}
        for row in rows:
            name = (f"{row['Op Type']}.{row['Op Name']}.{row['Task ID']}.{row['Stream ID']}."
                    f"{row['IO']}.{row['Slot']}.DefaultFormat.")
            match = [p for k, p in files.items() if k.startswith(name)]
            assert len(match) == 1, name
            data = np.ascontiguousarray(np.load(match[0])).tobytes()
            assert row["MD5"] == hashlib.md5(data).hexdigest()
            checked += 1
    assert checked > 100


def test_dump_configuration_is_never_written_through_a_planted_link(tmp_path):
    """kernel_kbyk_dump.json is the one file numprobe writes at L2: a link planted at its name
    is refused (MindSpore would otherwise read a configuration from wherever it leads), and
    the file it leads to is left as it was."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    (out / "kernel_kbyk_dump.json").symlink_to(victim)
    r = _run("numprobe", out, "graph", "tensor")
    assert r.returncode != 0 and "done" not in r.stdout
    assert "kernel_kbyk_dump.json" in r.stderr, r.stderr[-3000:]
    assert victim.read_text() == "keep"
    assert (out / "kernel_kbyk_dump.json").is_symlink()
    assert not list(out.rglob("*.npy"))
