"""Module records at levels L0 and mix against msprobe run live on the same plain-torch script:
modules returning tensors, tuples, lists, dicts, namedtuples and dataclasses, with None, bool
and non-tensor members, and modules whose outputs feed no gradient (issue 16, item 2).

What msprobe writes and numprobe must write too:
* a module returning a dict gets its backward entry (its tensors requiring grad are what the
  backward hook sees), and construct.json gives its backward node a parent;
* a dataclass/namedtuple is written as a dict of all its fields, None fields included;
* a module backward's `input` lists the gradients of the outputs that take part in the
  backward only: no null for a None output, no record for a bool mask;
* parameter gradients only of modules called in the step (a module holding a weight that
  others share and call, or whose weight is used without calling it, has none), in the order
  of the modules' last calls where they share a parameter;
* a forward API that a module's backward runs (a custom autograd Function's backward) has that
  backward node as its construct.json parent;
* a backward node in construct.json for a module whose output does not depend on its input
  (positions computed from an input's shape), whose backward hook never fires;
* under torch's non-reentrant checkpoint, the modules a recomputation leaves when it stops
  early get their forward entry with a None output, as msprobe's forward hook gives them.
"""
import json
import os
import subprocess
import sys

import pytest

from test_pytorch_capture import (HAVE_MSPROBE, assert_same_structure, assert_same_values,
                                  construct_items, load)

# The start and end of the scripts below: two steps of SGD on `Net()` fed by `inputs()`.
TRAIN = r"""
dbg = PrecisionDebugger(config_path=cfg_path)
torch.manual_seed(0)
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(2):
    dbg.start(model=net)
    net(*inputs()).backward()
    opt.step()
    opt.zero_grad()
    dbg.stop()
    dbg.step()
"""

HEADER = r"""
import sys
import torch

tool, cfg_path = sys.argv[1:3]
if tool == "msprobe":
    from msprobe.pytorch import PrecisionDebugger
else:
    from numprobe.pytorch import PrecisionDebugger
"""

SCRIPT = HEADER + r'''
import collections, dataclasses
from typing import Optional


@dataclasses.dataclass
class Out:
    last: torch.Tensor
    hidden: Optional[torch.Tensor] = None
    count: int = 3


Pair = collections.namedtuple("Pair", ["value", "skip"])


class DictOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return {"h": h, "none": None, "mask": h > 0, "n": 2}


class TupleNone(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x), None


class BoolOut(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x), x > 0


class ListOut(torch.nn.Module):
    def forward(self, x):
        return [x * 2, 7, "s", None]


class DataOut(torch.nn.Module):
    def forward(self, x):
        return Out(last=torch.sigmoid(x))


class NamedOut(torch.nn.Module):
    def forward(self, x):
        return Pair(torch.relu(x), None)


class NoGrad(torch.nn.Module):
    def forward(self, x):
        return x.detach() * 3, torch.argmax(x, dim=-1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.d = DictOut()
        self.t = TupleNone()
        self.b = BoolOut()
        self.l = ListOut()
        self.dc = DataOut()
        self.nt = NamedOut()
        self.ng = NoGrad()

    def forward(self, x):
        d = self.d(x)
        h, _ = self.t(d["h"])
        a, m = self.b(h)
        lst = self.l(a * m)
        o = self.dc(lst[0])
        p = self.nt(o.last)
        c, idx = self.ng(p.value)
        return (p.value + c).sum() + idx.sum()


def inputs():
    return (torch.randn(3, 4, requires_grad=True),)
''' + TRAIN


def run_script(tmp, tool, level, script=SCRIPT):
    os.makedirs(tmp, exist_ok=True)
    path = os.path.join(tmp, "script.py")
    with open(path, "w") as f:
        f.write(script)
    cfg = {"task": "statistics", "dump_path": os.path.join(tmp, "dump"), "level": level,
           "rank": [], "step": [], "async_dump": False,
           "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                          "summary_mode": "statistics"}}
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    r = subprocess.run([sys.executable, path, tool, cfg_path], cwd=tmp, capture_output=True,
                       text=True)
    assert r.returncode == 0, f"{tool}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return os.path.join(tmp, "dump")


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_module_records_match_msprobe(tmp_path, level):
    ours = run_script(str(tmp_path / "np"), "numprobe", level)
    theirs = run_script(str(tmp_path / "ms"), "msprobe", level)
    for step in (0, 1):
        a, b = load(ours, step), load(theirs, step)
        assert_same_structure(a, b)
        assert_same_values(a, b)
        assert construct_items(ours, step) == construct_items(theirs, step)
    data = load(ours, 0)["data"]
    # (a) dict outputs get their backward entry.
    assert "Module.d.DictOut.backward.0" in data
    # (b) dataclass and namedtuple outputs: every field, None kept.
    assert data["Module.dc.DataOut.forward.0"]["output"][0]["hidden"] is None
    assert data["Module.dc.DataOut.forward.0"]["output"][0]["count"] == {"type": "int",
                                                                          "value": 3}
    assert data["Module.nt.NamedOut.forward.0"]["output"]["skip"] is None  # a dict, as msprobe
    # (c) no slot for the None output; (d) no gradient record for the bool mask.
    assert len(data["Module.t.TupleNone.backward.0"]["input"]) == 1
    assert len(data["Module.b.BoolOut.backward.0"]["input"]) == 1
    # Outputs that feed no gradient: no backward entry.
    assert "Module.ng.NoGrad.backward.0" not in data
    construct = load(ours, 0, "construct.json")
    assert construct["Module.d.fc.Linear.backward.0"] == "Module.d.DictOut.backward.0"


SHARED_SCRIPT = HEADER + r"""


class Positions(torch.nn.Embedding):
    def forward(self, x):
        ids = torch.arange(x.shape[1]).expand(x.shape[0], -1)
        return super().forward(ids)


class TanhFunction(torch.autograd.Function):
    # A custom Function whose backward runs torch APIs (BLOOM's GeLUFunction is one): they
    # arrive as forward calls while the module's backward is open.
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.tanh(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(x)
        return g * (1 - t * t)


class CustomTanh(torch.nn.Module):
    def forward(self, x):
        return TanhFunction.apply(x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.act = CustomTanh()
        self.shared = torch.nn.Embedding(10, 4)
        self.enc = torch.nn.Embedding(10, 4)
        self.dec = torch.nn.Embedding(10, 4)
        self.enc.weight = self.shared.weight
        self.dec.weight = self.shared.weight
        self.rel = torch.nn.Embedding(6, 4)
        self.pos = Positions(8, 4)
        self.head = torch.nn.Linear(4, 10)

    def forward(self, ids, feats):
        h = self.enc(ids) + self.pos(feats)
        h = h + self.dec(ids) + self.rel.weight[: ids.shape[1]]
        h = self.act(h + self.enc(ids))
        return self.head(h).sum()


def inputs():
    return torch.randint(0, 10, (2, 6)), torch.randn(2, 6, requires_grad=True)
""" + TRAIN


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_shared_and_uncalled_modules_match_msprobe(tmp_path, level):
    ours = run_script(str(tmp_path / "np"), "numprobe", level, SHARED_SCRIPT)
    theirs = run_script(str(tmp_path / "ms"), "msprobe", level, SHARED_SCRIPT)
    for step in (0, 1):
        a, b = load(ours, step), load(theirs, step)
        assert_same_structure(a, b)
        assert_same_values(a, b)
        assert construct_items(ours, step) == construct_items(theirs, step)
        grads = [k for k in a["data"] if ".parameters_grad." in k]
        # Never called: no gradient entry, though their weights get gradients.
        assert not [k for k in grads if ".shared." in k or ".rel." in k], grads
        # The shared weight's hooks in the order of the last calls: dec, then enc again.
        shared = [k for k in grads if ".enc." in k or ".dec." in k]
        assert shared == ["Module.dec.Embedding.parameters_grad.0",
                          "Module.enc.Embedding.parameters_grad.0"], grads
        # The positions' backward hook never fires (its output ignores its input), its node
        # is there all the same.
        construct = load(ours, step, "construct.json")
        assert "Module.pos.Positions.backward.0" in construct
        assert "Module.pos.Positions.backward.0" not in a["data"]
        if level == "mix":
            # The APIs of the custom backward: forward calls inside the module's backward node.
            inside = [k for k, v in construct.items() if v == "Module.act.CustomTanh.backward.0"
                      and k.endswith(".forward")]
            assert inside, construct


CHECKPOINT_SCRIPT = HEADER + r"""
import torch.utils.checkpoint as cp


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.mlp = Mlp()

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        for b in self.blocks:
            x = cp.checkpoint(b, x, use_reentrant=False)
        return self.head(x).sum()


def inputs():
    return (torch.randn(3, 8, requires_grad=True),)
""" + TRAIN


def _subsequence(short, long):
    it = iter(long)
    return all(k in it for k in short)


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
def test_non_reentrant_checkpoint_matches_msprobe_and_keeps_what_it_loses(tmp_path):
    """torch.utils.checkpoint(use_reentrant=False) recomputes each block in the backward and
    stops the recomputation by an exception once it has the tensors it needs. At L0 both tools
    write the same entries: the modules left by the stop end with `"output": [null]`. At mix
    msprobe 26.2 records no forward API after the first stop (the exception skips the end of
    its API hook, which leaves its nesting counter up): the second block's recomputation and
    the optimizer's updates are missing from its dump; numprobe records them, and everything
    msprobe wrote it writes the same, in the same order."""
    for level in ("L0", "mix"):
        ours = run_script(str(tmp_path / f"np_{level}"), "numprobe", level, CHECKPOINT_SCRIPT)
        theirs = run_script(str(tmp_path / f"ms_{level}"), "msprobe", level, CHECKPOINT_SCRIPT)
        for step in (0, 1):
            a, b = load(ours, step), load(theirs, step)
            stopped = [k for k, v in a["data"].items() if v.get("output") == [None]]
            assert "Module.blocks.0.mlp.down.Linear.forward.1" in stopped, stopped
            if level == "L0":
                assert_same_structure(a, b)
                assert_same_values(a, b)
                assert construct_items(ours, step) == construct_items(theirs, step)
                continue
            assert _subsequence(list(b["data"]), list(a["data"]))
            assert_same_values(a, b)
            extra = [k for k in a["data"] if k not in b["data"]]
            assert extra and all(k.endswith(".forward") and not k.startswith("Module.")
                                 for k in extra), extra
            assert "Tensor.add_.0.forward" in extra  # SGD's first update
            construct_a = load(ours, step, "construct.json")
            for k, parent in load(theirs, step, "construct.json").items():
                assert construct_a[k] == parent, k


CLIP_SCRIPT = HEADER + r"""
import torch.nn.utils


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))).sum()


dbg = PrecisionDebugger(config_path=cfg_path)
torch.manual_seed(0)
net = Net()
opt = torch.optim.AdamW(net.parameters(), lr=0.1)
for step in range(2):
    dbg.start(model=net)
    net(torch.randn(3, 4)).backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
    torch.nn.utils.clip_grad_value_(net.parameters(), 0.05)
    opt.step()
    opt.zero_grad()
    dbg.stop()
    dbg.step()
"""


@pytest.mark.skipif(not HAVE_MSPROBE, reason="msprobe is not installed")
def test_gradient_clipping_and_optimizer_nodes_match_msprobe(tmp_path):
    """At mix level msprobe makes the APIs of torch.nn.utils' gradient clipping children of a
    `clip_grad` node and those of the optimizer's step children of an `optimizer` node, each
    node written just before its first API; module nodes go in after the first API called in
    them. construct.json must equal msprobe's, key order included."""
    ours = run_script(str(tmp_path / "np"), "numprobe", "mix", CLIP_SCRIPT)
    theirs = run_script(str(tmp_path / "ms"), "msprobe", "mix", CLIP_SCRIPT)
    for step in (0, 1):
        a, b = load(ours, step), load(theirs, step)
        assert_same_structure(a, b)
        assert_same_values(a, b)
        assert construct_items(ours, step) == construct_items(theirs, step)
        items = construct_items(ours, step)
        names = [k for k, _ in items]
        for phase in ("clip_grad", "optimizer"):
            children = [k for k, v in items if v == phase]
            assert children, (phase, items)
            assert names.index(phase) + 1 == names.index(children[0])
        # The first module's node follows the first API called inside it.
        assert names.index("Module.fc1.Linear.forward.0") == names.index(
            "Functional.linear.0.forward") + 1
