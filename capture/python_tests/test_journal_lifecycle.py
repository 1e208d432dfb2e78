"""The capture journal's life (issue 16, item 3): a clean stop()/step() leaves msprobe's files
only (the journal is removed once the JSON files are durable, off the training thread); a run
killed before keeps it, and `numprobe recover` rebuilds the JSON files from it; `numprobe
validate` reports a journal still there as an unfinished run; NUMPROBE_KEEP_JOURNAL=1 keeps it
on purpose."""
import glob
import json
import os
import signal
import subprocess
import sys

from test_run_ut import numprobe_cli

SCRIPT = r'''
import os, signal, sys
import torch
from numprobe.pytorch import PrecisionDebugger

cfg_path, mode = sys.argv[1], sys.argv[2]
dbg = PrecisionDebugger(config_path=cfg_path)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
for step in range(2):
    dbg.start(model=model)
    loss = model(torch.randn(3, 4)).sum()
    if mode == "restart":
        # A stop and a start inside the step: the journal goes, then comes back whole.
        dbg.stop()
        dbg.start(model=model)
        loss = loss + model(torch.randn(3, 4)).sum()
    loss.backward()
    if mode == "kill" and step == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dbg.stop()
    dbg.step()
'''


def run(tmp, mode, env=None, level="mix"):
    os.makedirs(tmp, exist_ok=True)
    path = os.path.join(tmp, "script.py")
    with open(path, "w") as f:
        f.write(SCRIPT)
    cfg = {"task": "statistics", "dump_path": os.path.join(tmp, "dump"), "level": level,
           "rank": [], "step": [], "async_dump": False,
           "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                          "summary_mode": "statistics"}}
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    r = subprocess.run([sys.executable, path, cfg_path, mode], cwd=tmp, capture_output=True,
                       text=True, env=dict(os.environ, **(env or {})))
    return r, os.path.join(tmp, "dump")


def files_of(rank):
    return sorted(os.listdir(rank))


def validate(path):
    return subprocess.run(numprobe_cli() + ["validate", path], capture_output=True, text=True)


def test_clean_run_leaves_msprobe_files_only(tmp_path):
    for mode in ("clean", "restart"):
        r, dump = run(str(tmp_path / mode), mode)
        assert r.returncode == 0, r.stderr[-3000:]
        # The directories made ahead for a next step are gone with the process.
        assert sorted(os.listdir(dump)) == ["step0", "step1"]
        ranks = sorted(glob.glob(os.path.join(dump, "step*", "*")))
        assert len(ranks) == 2
        for rank in ranks:
            assert files_of(rank) == ["construct.json", "dump.json", "stack.json"], rank
        v = validate(dump)
        assert v.returncode == 0, v.stdout + v.stderr
    # The stop inside the step lost nothing: the second forward's entries are there.
    with open(os.path.join(ranks[0], "dump.json")) as f:
        names = list(json.load(f)["data"])
    assert "Module.0.Linear.forward.1" in names and "Module.0.Linear.backward.1" in names


def test_killed_run_keeps_the_journal_for_recover(tmp_path):
    r, dump = run(str(tmp_path / "kill"), "kill")
    assert r.returncode == -signal.SIGKILL
    step0 = glob.glob(os.path.join(dump, "step0", "*"))[0]
    step1 = glob.glob(os.path.join(dump, "step1", "*"))[0]
    # Step 0 ended cleanly: its files were complete when step() returned. Its journal goes
    # once they are durable, on a background thread: a kill that came first leaves it too,
    # and validate says so.
    json_files = ["construct.json", "dump.json", "stack.json"]
    step0_kept = "numprobe_journal.bin" in files_of(step0)
    assert files_of(step0) == sorted(json_files + ["numprobe_journal.bin"] * step0_kept)
    step0_files = {f: open(os.path.join(step0, f), "rb").read() for f in json_files}
    assert "numprobe_journal.bin" in files_of(step1)
    # Beside the steps, at most the (empty) directories made ahead for a next step, which
    # validate and recover pass over.
    assert all(n.startswith(("step", ".numprobe-next-")) for n in os.listdir(dump))
    v = validate(dump)
    assert v.returncode == 1, v.stdout + v.stderr
    assert "unfinished run" in v.stdout and "numprobe recover" in v.stdout, v.stdout
    assert v.stdout.count("unfinished run") == 1 + step0_kept, v.stdout
    # recover rebuilds step 1's files from the journal: the backward is there.
    rec = subprocess.run(numprobe_cli() + ["recover", dump], capture_output=True, text=True)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    with open(os.path.join(step1, "dump.json")) as f:
        names = list(json.load(f)["data"])
    assert "Module.2.Linear.backward.0" in names, names
    # A journal step 0 kept rebuilds exactly the files it had.
    for f, data in step0_files.items():
        assert open(os.path.join(step0, f), "rb").read() == data, f


def test_keep_journal_on_purpose(tmp_path):
    r, dump = run(str(tmp_path / "keep"), "clean", env={"NUMPROBE_KEEP_JOURNAL": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in glob.glob(os.path.join(dump, "step*", "*")):
        assert "numprobe_journal.bin" in files_of(rank)


def test_stacks_kept_per_call_site_journal_and_recover_as_lists_do(tmp_path):
    # The recorder hands each step's capture the same StackFrames per call site (rendered once);
    # MindSpore's recorder hands plain lists. Both write the same stack.json, and a journal
    # written either way recovers to it.
    from numprobe._native import Session, StackFrames, recover

    site = ['File "m.py", line 3, in f, \n y = "x" \\ 2', "File é.py, line 9, in <module>, \n f()"]
    other = ["File n.py, line 1, in g, \n\tg()"]
    written = {}
    for how in ("frames", "lists"):
        d = tmp_path / how
        s = Session(str(d), "statistics", "L1", "pytorch", None, True, "statistics",
                    keep_journal=True)
        wrap = StackFrames if how == "frames" else list
        assert s.stack("Functional.linear.0.forward", wrap(site)) == 0
        assert s.stack("Functional.relu.0.forward", wrap(other)) == 1
        # A second site with equal lines joins the first group.
        assert s.stack("Functional.linear.1.forward", wrap(list(site))) == 0
        s.write_json()
        s.close()
        written[how] = (d / "stack.json").read_bytes()
        os.remove(d / "stack.json")
        recover(str(d))
        assert (d / "stack.json").read_bytes() == written[how]
    assert written["frames"] == written["lists"]
    groups = json.loads(written["frames"])
    assert groups == {"0": [["Functional.linear.0.forward", "Functional.linear.1.forward"], site],
                      "1": [["Functional.relu.0.forward"], other]}
    assert StackFrames(site).lines() == site and len(StackFrames(other)) == 1
