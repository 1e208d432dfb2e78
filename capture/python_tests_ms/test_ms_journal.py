"""The capture journal on MindSpore (issue 16, item 3; the session code is shared with PyTorch):
a clean step leaves msprobe's files only, so `numprobe validate` passes; a killed run keeps the
journal, and validate says so and points at `numprobe recover`."""
import glob
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ms_tiny.py")


def _run(d, extra):
    os.makedirs(d)
    cfg = {"task": "statistics", "dump_path": "./dump", "level": "L1", "rank": [], "step": [],
           "async_dump": False, "extra_info": True,
           "statistics": {"scope": [], "list": [], "tensor_list": [], "data_mode": ["all"],
                          "summary_mode": "statistics"}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, GLOG_v="3", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, SCRIPT, "--tool", "numprobe", "--config",
                           "config.json", "--steps", "1"] + extra, cwd=d, env=env,
                          capture_output=True, text=True, timeout=900)


def _validate(path):
    exe = os.environ.get("NUMPROBE_BIN")
    if not exe:
        pytest.fail("NUMPROBE_BIN is not set (capture/tests/run_python_ms_tests.sh sets it)")
    return subprocess.run([exe, "validate", path], capture_output=True, text=True)


def test_clean_step_removes_the_journal_and_a_kill_keeps_it(tmp_path):
    clean = str(tmp_path / "clean")
    r = _run(clean, [])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (rank,) = glob.glob(os.path.join(clean, "dump", "step0", "*"))
    assert sorted(os.listdir(rank)) == ["construct.json", "dump.json", "stack.json"]
    v = _validate(os.path.join(clean, "dump"))
    assert v.returncode == 0, v.stdout + v.stderr

    killed = str(tmp_path / "killed")
    r = _run(killed, ["--kill-after", "20"])
    assert r.returncode == -9, r.stdout[-2000:] + r.stderr[-3000:]
    (rank,) = glob.glob(os.path.join(killed, "dump", "step0", "*"))
    assert "numprobe_journal.bin" in os.listdir(rank)
    v = _validate(os.path.join(killed, "dump"))
    assert v.returncode == 1, v.stdout + v.stderr
    assert "unfinished run" in v.stdout and "numprobe recover" in v.stdout, v.stdout
