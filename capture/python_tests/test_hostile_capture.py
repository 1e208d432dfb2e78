"""Hostile conditions during capture (issue "hostile input"): two processes capturing into the
same dump_path at once, and a disk that fills up during a run. Each run's files stay intact,
or the run is refused or fails with a clear error; nothing written earlier is lost."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

NUMPROBE_BIN = os.environ.get("NUMPROBE_BIN")

# argv: mode (rank|proc) dump_path ready_file go_file [port]. Records 50 torch.add calls,
# says it is ready, waits for go, records 50 torch.mul calls and stops.
CONCURRENT = r"""
import json, os, sys, time
import torch
mode, dump, ready, go = sys.argv[1:5]
if mode == "rank":
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[5],
                            rank=0, world_size=1)
from numprobe.pytorch import PrecisionDebugger
cfg = ready + ".config.json"
with open(cfg, "w") as f:
    json.dump({"task": "tensor", "level": "L1", "dump_path": dump}, f)
dbg = PrecisionDebugger(config_path=cfg)
x = torch.arange(1000.0)
try:
    dbg.start()
    for i in range(50):
        x = torch.add(x, 1.0)
    open(ready, "w").close()
    deadline = time.time() + 60
    while not os.path.exists(go) and time.time() < deadline:
        time.sleep(0.05)
    for i in range(50):
        x = torch.mul(x, 1.0)
    dbg.stop()
    dbg.step()
except Exception as e:
    print("ERROR:", type(e).__name__, e, flush=True)
    sys.exit(3)
print("done", flush=True)
"""

# argv: dump_path config_path. Steps of 10 torch.add calls in tensor mode, on a tensor that
# doubles every step (400 bytes at step 0), so both a small file system and a file size limit
# are reached after a few steps.
FILL = r"""
import json, sys
import torch
from numprobe.pytorch import PrecisionDebugger
dump, cfg = sys.argv[1:3]
with open(cfg, "w") as f:
    json.dump({"task": "tensor", "level": "L1", "dump_path": dump}, f)
dbg = PrecisionDebugger(config_path=cfg)
try:
    for step in range(16):
        x = torch.arange(100.0 * 2**step)
        dbg.start()
        for i in range(10):
            x = torch.add(x, 1.0)
        dbg.stop()
        dbg.step()
        print("step", step, "done", flush=True)
except Exception as e:
    print("ERROR:", type(e).__name__, e, flush=True)
    sys.exit(3)
print("done", flush=True)
"""


def spawn(tmp_path, script, *args):
    path = tmp_path / "script.py"
    path.write_text(script)
    return subprocess.Popen(
        [sys.executable, str(path), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(path, proc):
    deadline = time.time() + 120
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.time() < deadline, "the first capture never got ready"
        time.sleep(0.05)


def validate(path):
    assert NUMPROBE_BIN, "NUMPROBE_BIN names the numprobe binary"
    r = subprocess.run([NUMPROBE_BIN, "validate", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def entries(rank_dir):
    with open(os.path.join(rank_dir, "dump.json")) as f:
        return json.load(f)["data"]


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_second_capture_into_the_same_rank_directory_is_refused(tmp_path):
    """Two jobs that are both rank 0 of their group write to dump_path/step0/rank0: the second
    one is refused with an error naming the directory; the first one's files are complete."""
    dump = tmp_path / "dump"
    a = spawn(tmp_path, CONCURRENT, "rank", dump, tmp_path / "ra", tmp_path / "ga", free_port())
    wait_for(tmp_path / "ra", a)
    (tmp_path / "gb").touch()
    b = spawn(tmp_path, CONCURRENT, "rank", dump, tmp_path / "rb", tmp_path / "gb", free_port())
    out_b = b.communicate(timeout=120)[0]
    (tmp_path / "ga").touch()
    out_a = a.communicate(timeout=120)[0]
    assert b.returncode == 3, out_b
    assert "another capture is writing" in out_b and "rank0" in out_b, out_b
    assert a.returncode == 0, out_a
    rank = dump / "step0" / "rank0"
    data = entries(rank)
    assert len(data) == 100
    assert sorted(data)[:2] == ["Torch.add.0.forward", "Torch.add.1.forward"]
    assert "0 problem(s)" in validate(dump)


def test_concurrent_captures_into_one_dump_path_keep_their_own_files(tmp_path):
    """Without ranks each process writes its own proc<pid> directory: both complete, and
    neither file set is torn or interleaved with the other's."""
    dump = tmp_path / "dump"
    a = spawn(tmp_path, CONCURRENT, "proc", dump, tmp_path / "ra", tmp_path / "ga")
    b = spawn(tmp_path, CONCURRENT, "proc", dump, tmp_path / "rb", tmp_path / "gb")
    wait_for(tmp_path / "ra", a)
    wait_for(tmp_path / "rb", b)
    (tmp_path / "ga").touch()
    (tmp_path / "gb").touch()
    for p in (a, b):
        out = p.communicate(timeout=120)[0]
        assert p.returncode == 0, out
    procs = sorted(os.listdir(dump / "step0"))
    assert procs == sorted(f"proc{p.pid}" for p in (a, b))
    for d in procs:
        data = entries(dump / "step0" / d)
        assert len(data) == 100, d
    assert "2 rank dir(s)" in validate(dump)


def mount_tmpfs(where, size):
    where.mkdir()
    if shutil.which("mount") is None:
        return False
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
    )
    return r.returncode == 0


def run_until_full(tmp_path, dump, tmpfs):
    """Runs FILL into `dump`: in a 128 KiB tmpfs when asked and one can be mounted, else with
    each file capped at 12 KiB (RLIMIT_FSIZE; writes past it fail with EFBIG, SIGXFSZ
    ignored)."""
    path = tmp_path / "fill.py"
    path.write_text(FILL)
    cmd = [sys.executable, str(path), str(dump), str(tmp_path / "fill.json")]
    if tmpfs and mount_tmpfs(dump.parent, "128k"):
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    dump.parent.mkdir(exist_ok=True)

    def cap():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (12 * 1024, 12 * 1024))

    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, preexec_fn=cap)


@pytest.mark.parametrize("tmpfs", [True, False], ids=["tmpfs", "file_size_limit"])
def test_a_full_disk_fails_the_run_and_keeps_earlier_steps(tmp_path, tmpfs):
    mnt = tmp_path / "mnt"
    dump = mnt / "dump"
    try:
        r = run_until_full(tmp_path, dump, tmpfs)
        out = r.stdout + r.stderr
        # The run says it failed and why, naming the file; it is not reported as done.
        assert r.returncode == 3, out
        assert "ERROR:" in out and "done" not in out.splitlines(), out
        assert ("No space left" in out) or ("too large" in out), out
        finished = [line for line in out.splitlines() if line.startswith("step ")]
        assert finished, f"no step finished before the disk filled:\n{out}"
        # Every step that finished is complete and valid; the failed step holds no torn
        # tensor file (a failed write removes its file).
        for line in finished:
            step = dump / f"step{line.split()[1]}"
            assert "0 problem(s)" in validate(step), step
            (rank,) = os.listdir(step)
            assert len(entries(step / rank)) == 10
        failed = dump / f"step{len(finished)}"
        for root, _, files in os.walk(failed):
            for f in files:
                if f.endswith(".pt"):
                    r = subprocess.run(
                        [NUMPROBE_BIN, "inspect", os.path.join(root, f)], capture_output=True
                    )
                    assert r.returncode == 0, (f, r.stderr)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
