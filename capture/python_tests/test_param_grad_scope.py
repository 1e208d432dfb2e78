"""A module's `parameters_grad` entry when a scope closes between its parameters' gradients,
against msprobe 26.2.0 live (param_grad_model.py: module `gated` owns `scale_out`, whose
gradient arrives before its child Linear's backward, and `scale_in`, whose gradient arrives
after it). msprobe decides each gradient on the module's name and drops the entry of that call
(with the gradients kept before it) when one is refused, unless the module's own backward was
recorded; so with the scope closing at the child's backward, `Module.gated.Gated.parameters_grad.0`
is not in its dump."""
import json
import os
import subprocess
import sys

import pytest

from test_pytorch_capture import HAVE_MSPROBE, assert_same_structure, assert_same_values, load

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "param_grad_model.py")
SCOPE = ["Module.pre.Linear.forward.0", "Module.gated.inner.Linear.backward.0"]
GATED = "Module.gated.Gated.parameters_grad.0"


def run(tmp, tool, level, scope):
    d = os.path.join(tmp, f"{tool}_{level}_{bool(scope)}")
    os.makedirs(d)
    cfg = os.path.join(d, "config.json")
    with open(cfg, "w") as f:
        json.dump({"task": "statistics", "dump_path": os.path.join(d, "dump"), "level": level,
                   "statistics": {"scope": scope, "summary_mode": "statistics"}}, f)
    r = subprocess.run([sys.executable, SCRIPT, tool, cfg, "2"], cwd=d, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"{tool}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return os.path.join(d, "dump")


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
@pytest.mark.parametrize("level,scope", [("L0", SCOPE), ("mix", SCOPE), ("mix", [])])
def test_parameters_grad_entries_follow_msprobe(tmp_path, level, scope):
    ours = run(str(tmp_path), "numprobe", level, scope)
    theirs = run(str(tmp_path), "msprobe", level, scope)
    for step in (0, 1):
        a, b = load(ours, step), load(theirs, step)
        assert_same_structure(a, b)
        assert_same_values(a, b)
    data = load(ours, 0)["data"]
    if scope:
        assert GATED not in data
        assert "Module.gated.inner.Linear.parameters_grad.0" in data
    else:
        assert list(data[GATED]) == ["scale_out", "scale_in"]
