"""Which API calls the default capture records: exactly msprobe's (issue 16, item 1).

msprobe sees a call only when the script looks the API up in torch's namespaces after the
PrecisionDebugger wrapped them; unary minus (torch hands it over as `Tensor.neg`) and a function
stored before the debugger was created (transformers' GELUActivation stores F.gelu) never reach
its wrappers. numprobe records the same by default, with msprobe's call numbers, and records the
others only under the opt-in (`extra_apis`), as `Extra.*` names with counters of their own.
"""
import csv
import glob
import json
import os
import subprocess
import sys

import pytest

from test_pytorch_capture import (HAVE_MSPROBE, assert_same_structure, assert_same_values,
                                  construct_items, load)
from test_run_ut import numprobe_cli

SCRIPT = r'''
import sys
import torch
import torch.nn.functional as F

tool, cfg_path, extras = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if tool == "msprobe":
    from msprobe.pytorch import PrecisionDebugger
else:
    from numprobe.pytorch import PrecisionDebugger

act_before = F.gelu           # the original: msprobe never sees calls through it
if tool == "msprobe":
    dbg = PrecisionDebugger(config_path=cfg_path)
else:
    dbg = PrecisionDebugger(config_path=cfg_path, extra_apis=extras)
act_after = F.gelu            # msprobe's wrapper now: recorded
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
for step in range(2):
    dbg.start(model=model)
    x = torch.randn(3, 4, requires_grad=True)
    h = model(x)
    a = -h                    # Tensor.neg through the C slot: not msprobe's
    b = act_before(a)
    c = act_after(b)
    d = torch.neg(c)
    e = c.neg()               # msprobe's Tensor.neg.0, whatever came before
    f = F.gelu(-e)
    loss = (d + f).sum()
    loss.backward()
    dbg.stop()
    dbg.step()
'''


def run(tmp, tool, level, extras=False):
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
    r = subprocess.run([sys.executable, path, tool, cfg_path, "1" if extras else "0"], cwd=tmp,
                       capture_output=True, text=True)
    assert r.returncode == 0, f"{tool}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return os.path.join(tmp, "dump")


def stack_names(root, step):
    return sorted(n for ns, _ in load(root, step, "stack.json").values() for n in ns)


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
@pytest.mark.parametrize("level", ["L1", "mix"])
def test_default_capture_records_what_msprobe_records(tmp_path, level):
    ours = run(str(tmp_path / "np"), "numprobe", level)
    theirs = run(str(tmp_path / "ms"), "msprobe", level)
    for step in (0, 1):
        a, b = load(ours, step), load(theirs, step)
        assert_same_structure(a, b)
        assert_same_values(a, b)
        assert stack_names(ours, step) == stack_names(theirs, step)
        if level == "mix":
            assert construct_items(ours, step) == construct_items(theirs, step)
    names = list(load(ours, 0)["data"])
    # The stored-after reference and F.gelu are msprobe's Functional.gelu.0 and .1; `-h`,
    # `-e` and the stored-before reference are not recorded, so c.neg() is Tensor.neg.0.
    assert [n for n in names if n.endswith(".forward")] == [
        "Functional.linear.0.forward", "Functional.gelu.0.forward", "Torch.neg.0.forward",
        "Tensor.neg.0.forward", "Functional.gelu.1.forward", "Tensor.__add__.0.forward",
        "Tensor.sum.0.forward"]


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
def test_extra_apis_keep_msprobe_names_and_compare_one_sided(tmp_path):
    ours = run(str(tmp_path / "np"), "numprobe", "mix", extras=True)
    theirs = run(str(tmp_path / "ms"), "msprobe", "mix")
    for step in (0, 1):
        a, b = load(ours, step), load(theirs, step)
        extra = [n for n in a["data"] if n.startswith("Extra.")]
        assert sorted(extra) == sorted([
            "Extra.Tensor.neg.0.forward", "Extra.Tensor.neg.0.backward",
            "Extra.Functional.gelu.0.forward", "Extra.Functional.gelu.0.backward",
            "Extra.Tensor.neg.1.forward", "Extra.Tensor.neg.1.backward"]), extra
        # Without them, the dump is msprobe's: same names, order, values.
        a["data"] = {k: v for k, v in a["data"].items() if not k.startswith("Extra.")}
        assert_same_structure(a, b)
        assert_same_values(a, b)
        construct = load(ours, step, "construct.json")
        assert {k: v for k, v in construct.items() if not k.startswith("Extra.")} == \
            load(theirs, step, "construct.json")

    # compare lists the extra entries as rows without a bench counterpart, not as errors.
    out = tmp_path / "cmp"
    r = subprocess.run(numprobe_cli() + ["compare", ours, theirs, "-o", str(out), "--step", "0",
                                         "--timestamp", "20260101000000"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    tables = glob.glob(str(out / "**" / "*.csv"), recursive=True) + \
        glob.glob(str(out / "*.csv"))
    assert tables, os.listdir(out)
    with open(tables[0], encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    extra_rows = [row for row in rows if row["NPU Name"].startswith("Extra.")]
    assert extra_rows
    for row in extra_rows:
        assert row["Bench Name"] == "N/A", row
        assert row.get("Result", "") != "error" and "error" not in row.get("Err_message", ""), row
    matched = [row for row in rows if not row["NPU Name"].startswith("Extra.")]
    assert matched and all(row["Bench Name"] != "N/A" for row in matched)
