"""Statistics on the statistics thread (numprobe/pytorch/_stats_thread.py): the dump must be
the one the synchronous path writes, whatever the script writes into recorded tensors right
after recording them. The thread is held back before each job (the recorder's
``stats_thread_delay_ms``, a test hook), so a write that is not guarded would change the
statistics instead of depending on timing."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

# Every tensor below that is written in place is >= 1 MiB, so it takes the statistics thread.
SCRIPT = r"""
import json, sys
import torch
import torch.nn as nn
import torch.nn.functional as F
from numprobe.pytorch import PrecisionDebugger

torch.manual_seed(0)
torch.set_num_threads(1)
dump, level, steps, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cfg = {"task": "statistics", "level": level, "dump_path": dump,
       "statistics": {"summary_mode": "statistics"}}
with open(dump + ".json", "w") as f:
    json.dump(cfg, f)
model = nn.Sequential(nn.Linear(512, 1024), nn.BatchNorm1d(1024), nn.ReLU(), nn.Linear(1024, 512))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(512, 512)
dbg = PrecisionDebugger(config_path=dump + ".json")
if delay != "none":
    dbg.recorder.stats_thread_delay_ms = int(delay)
for step in range(steps):
    dbg.start(model=model)
    y = torch.mul(x, 2.0)                 # recorded output, then written at once:
    y.add_(1.0)                           # in-place method
    y[3] = 7.0                            # __setitem__
    y += 0.5                              # in-place operator
    torch.add(x, 0.25, out=y)             # out=
    F.relu(y, inplace=True)               # inplace keyword
    z = y.clone()
    z.mul_(3.0).sub_(1.0)                 # chained in-place methods
    F.dropout(z, 0.0, True, True)         # inplace positional (p=0: values kept)
    h = model(z)                          # BatchNorm running statistics (small) and params
    loss = h.float().pow(2).mean()
    loss.backward()
    opt.step()                            # momentum buffers and parameters, in place
    opt.zero_grad()
    dbg.stop()
    dbg.step()
print("done", flush=True)
"""


# Recorded outputs that nothing writes into: their jobs wait on the held-back thread until the
# kill (a write would have the training thread run them at once).
KILL_SCRIPT = r"""
import json, sys
import torch
from numprobe.pytorch import PrecisionDebugger

torch.set_num_threads(1)
dump = sys.argv[1]
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump}, f)
dbg = PrecisionDebugger(config_path=dump + ".json")
dbg.recorder.stats_thread_delay_ms = 200
dbg.start()
x = torch.randn(512, 512)
kept = []
for i in range(100000):
    kept.append(torch.mul(x, float(i)))
    if len(kept) > 64:
        kept.pop(0)
"""


def run(tmp, level, async_on, steps=2, delay=None):
    script = os.path.join(tmp, "script.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    dump = os.path.join(tmp, f"dump_{level}_{async_on}")
    env = dict(os.environ, NUMPROBE_ASYNC_STATS="1" if async_on else "0")
    r = subprocess.run([sys.executable, script, dump, level, str(steps), str(delay).lower()],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return dump


def dump_files(root):
    out = {}
    for p in sorted(glob.glob(os.path.join(root, "step*", "*", "*.json"))):
        step = p.split(os.sep)[-3]
        with open(p, "rb") as f:
            out[(step, os.path.basename(p))] = f.read()
    return out


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_async_dump_equals_synchronous_dump(tmp_path, level):
    sync = dump_files(run(str(tmp_path), level, False))
    # 5 ms before each job: the training thread is always ahead of the statistics thread.
    got = dump_files(run(str(tmp_path), level, True, delay=5))
    assert sync and set(got) == set(sync)
    for k in sync:
        assert got[k] == sync[k], k
    data = json.loads(sync[("step0", "dump.json")])["data"]
    # The in-place writes above were recorded (the comparison covers them).
    assert any(n.startswith("Tensor.add_.") for n in data)
    assert any(n.startswith("Tensor.__setitem__.") for n in data)
    assert "numprobe_pending" not in sync[("step0", "dump.json")].decode()


def test_async_guard_is_what_keeps_the_statistics(tmp_path, monkeypatch):
    """Without the write guard the held-back thread reads values written after the API was
    recorded, so the dump differs: the comparison above can fail."""
    sync = dump_files(run(str(tmp_path), "L1", False, steps=1))
    # Disable the guard in the child through a sitecustomize that patches the recorder.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "from numprobe.pytorch import recorder\n"
        "recorder.Recorder._guard_writes = lambda self, func, args, kwargs: None\n")
    monkeypatch.setenv("PYTHONPATH", str(site) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    got = dump_files(run(str(tmp_path), "L1", True, steps=1, delay=20))
    assert got[("step0", "dump.json")] != sync[("step0", "dump.json")]


def _journaled_bytes(path):
    """Bytes of frames in a journal being written: its file may be longer, the space reserved
    ahead of the frames reading as zeros."""
    with open(path, "rb") as f:
        return len(f.read().rstrip(b"\0"))


def test_kill_with_jobs_in_flight_keeps_every_entry(tmp_path):
    """SIGKILL while statistics are still on the thread: recovery keeps every journaled entry;
    the records whose fill never came have null statistics and are counted."""
    from numprobe import recover

    script = os.path.join(str(tmp_path), "script.py")
    with open(script, "w") as f:
        f.write(KILL_SCRIPT)
    dump = os.path.join(str(tmp_path), "dump_kill")
    env = dict(os.environ, NUMPROBE_ASYNC_STATS="1")
    p = subprocess.Popen([sys.executable, script, dump], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    journal = None
    while time.time() < deadline:
        found = glob.glob(os.path.join(dump, "step0", "*", "numprobe_journal.bin"))
        if found and _journaled_bytes(found[0]) > 20000:
            journal = found[0]
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert journal, "run never journaled"
    for f in ("dump.json", "stack.json", "construct.json"):
        path = os.path.join(os.path.dirname(journal), f)
        if os.path.exists(path):
            os.remove(path)
    results = recover(dump)
    assert results
    with open(os.path.join(os.path.dirname(journal), "dump.json")) as f:
        data = json.load(f)["data"]
    assert data
    def null_records(v):
        if isinstance(v, dict):
            if v.get("type") == "torch.Tensor":
                return int("Max" in v and v["Max"] is None)
            return sum(null_records(x) for x in v.values())
        if isinstance(v, list):
            return sum(null_records(x) for x in v)
        return 0

    nulls = null_records(data)
    # A 200 ms hold per job: the kill found jobs unfinished, written with null statistics.
    assert nulls > 0
    assert sum(r[3] for r in results) == nulls


MODE_SCRIPT = r"""
import json, sys
import torch
from numprobe.pytorch import PrecisionDebugger

torch.set_num_threads(1)
dump, extra = sys.argv[1], sys.argv[2] == "1"
with open(dump + ".json", "w") as f:
    json.dump({"task": "statistics", "level": "L1", "dump_path": dump}, f)
dbg = PrecisionDebugger(config_path=dump + ".json", extra_apis=extra)
dbg.recorder.stats_thread_delay_ms = 50
depth = torch._C._len_torch_function_stack
seen = {}
dbg.start()
small = torch.mul(torch.ones(8), 2.0)
seen["small"] = depth()
big = torch.mul(torch.ones(512, 512), 2.0)  # 1 MiB: a job held back 50 ms
seen["job"] = depth()
big.add_(1.0)                                # the guard waits for the job (its output
dbg.recorder._reap(all_jobs=True)            # makes one more, waited for here)
small = torch.mul(small, 3.0)                # a later call finds the mode idle
seen["after"] = depth()
dbg.stop()
seen["stopped"] = depth()
print(json.dumps(seen))
"""


@pytest.mark.parametrize("extra", [False, True])
def test_mode_is_on_the_stack_only_while_needed(tmp_path, extra):
    """The recorder's TorchFunctionMode makes every torch call of the script a Python round
    trip: it is there for the extra_apis opt-in, and while a statistics job holds a storage
    (to guard writes into it), and nowhere else."""
    script = os.path.join(str(tmp_path), "mode.py")
    with open(script, "w") as f:
        f.write(MODE_SCRIPT)
    env = dict(os.environ, NUMPROBE_ASYNC_STATS="1")
    r = subprocess.run([sys.executable, script, str(tmp_path / "dump"), "1" if extra else "0"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    on = 1 if extra else 0
    assert seen == {"small": on, "job": 1, "after": on, "stopped": 0}
