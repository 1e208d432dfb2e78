"""numprobe.cluster on a Ray cluster started here on loopback (a head and two worker nodes of one
CPU each; the head takes no task, so every task runs on a worker node) and torn down at the end.

The whole-run compare of testdata/runs/tp4-stats (4 ranks, 2 steps, rank 1 nudged) as Ray tasks
writes the very files of `numprobe compare` (NUMPROBE_BIN, or the cargo target's binary); a
task whose worker dies, or that meets an I/O error, is run again; `--resume` runs only the
pairs an interrupted run left undone. The replay of run_ut sharded over the cluster writes the
bytes of the single-process run_ut.

Ray is part of the test environment (.ci/setup installs it): without it these tests fail."""
import functools
import glob
import json
import os
import subprocess
import sys

import pytest

# Every Ray process (and this driver) on loopback: on Linux, Ray otherwise replaces a loopback
# address with the machine's outward one, where a node bound to 127.0.0.1 does not listen. Read
# when ray is imported, and inherited by the cluster's processes and the drivers started here.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError as e:  # a failure, not a skip: CI must have Ray
    raise ImportError(f"Ray is missing from this environment (.ci/setup installs it): {e}") from e

import cluster_faults
from numprobe.cluster import compare as cluster_compare

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.realpath(os.environ.get("NUMPROBE_TESTDATA") or os.path.join(HERE, "..", "..", "testdata"))
RUN = os.path.join(TESTDATA, "runs", "tp4-stats")
TARGET, GOLDEN = os.path.join(RUN, "target"), os.path.join(RUN, "golden")
FIX = os.path.join(TESTDATA, "fixtures", "msprobe-26.2.0-cpu")
TS = "20261202000000"
# Small nodes: the development machine has 2 cores and little memory to spare.
STORE = 200 * 1024 * 1024
# Ray's processes start slowly on a busy 2-core machine.
START_TIMEOUT = 300


def numprobe_bin():
    exe = os.environ.get("NUMPROBE_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR") or os.path.join(HERE, "..", "..", "target"), "debug", "numprobe")
    assert os.path.exists(exe), f"{exe}: set NUMPROBE_BIN to the numprobe binary (cargo build -p numprobe)"
    return exe


@pytest.fixture(scope="module")
def cluster():
    # The workers import cluster_faults (the tests' planted failures) from this folder.
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE] + ([old] if old else []))
    node = {"node_ip_address": "127.0.0.1", "object_store_memory": STORE}
    c = Cluster(initialize_head=True, connect=False,
                head_node_args=dict(node, num_cpus=0, include_dashboard=False))
    try:
        for _ in range(2):
            c.add_node(num_cpus=1, **node)
        c.wait_for_nodes(timeout=START_TIMEOUT)
        yield c
    finally:
        c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """`numprobe compare` of the run on this machine: (exit status, output folder)."""
    out = str(tmp_path_factory.mktemp("local") / "out")
    r = subprocess.run([numprobe_bin(), "compare", TARGET, GOLDEN, "--out", out, "--workers", "2",
                        "--timestamp", TS], capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, out


def files(root):
    """Every file under root: relative path -> bytes."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def assert_same_files(ours, local):
    a, b = files(ours), files(local)
    assert sorted(a) == sorted(b)
    for name in sorted(a):
        assert a[name] == b[name], name


def worker_node_ids(cluster):
    return {n.node_id for n in cluster.worker_nodes}


def ran(marker_dir):
    """(pair, node) of each logged task run."""
    out = []
    for p in glob.glob(os.path.join(marker_dir, "ran-*")):
        with open(p) as f:
            out.append(("-".join(os.path.basename(p).split("-")[1:3]), json.load(f)["node"]))
    return out


def test_cluster_compare_writes_the_files_of_numprobe_compare(cluster, local_run, tmp_path):
    code, local = local_run
    out = str(tmp_path / "out")
    r = subprocess.run([sys.executable, "-m", "numprobe.cluster", "compare", TARGET, GOLDEN, "--out", out,
                        "--address", cluster.address, "--timestamp", TS],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == code, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Origin: rank 1, API Tensor.__add__.0.forward" in r.stdout.splitlines(), r.stdout
    for s in (0, 1):
        for rank in range(4):
            assert os.path.isfile(os.path.join(out, f"step{s}", f"compare_result_rank{rank}_{TS}.csv"))
    assert_same_files(out, local)


def test_lost_and_failed_tasks_are_retried(cluster, local_run, tmp_path):
    code, local = local_run
    out, markers = str(tmp_path / "out"), str(tmp_path / "markers")
    os.makedirs(markers)
    task = functools.partial(cluster_faults.lost_once, markers)
    got = cluster_compare.main([TARGET, GOLDEN, "--out", out, "--address", cluster.address, "--timestamp", TS],
                               pair_task=task)
    assert got == code
    # Both planted failures happened, and every pair then ran once to the end, on worker nodes.
    assert sorted(os.listdir(markers))[:2] == ["died-step0-rank2", "oserror-step0-rank3"]
    runs = ran(markers)
    assert sorted(p for p, _ in runs) == sorted(f"step{s}-rank{r}" for s in (0, 1) for r in range(4))
    assert {n for _, n in runs} <= worker_node_ids(cluster)
    assert_same_files(out, local)


def test_resume_compares_only_the_pairs_left_undone(cluster, local_run, tmp_path):
    code, local = local_run
    out, first, second = str(tmp_path / "out"), str(tmp_path / "first"), str(tmp_path / "second")
    os.makedirs(first)
    os.makedirs(second)
    args = [TARGET, GOLDEN, "--out", out, "--address", cluster.address]
    # Ranks 2 and 3 fail for good: the run ends with their pairs undone (exit 2).
    got = cluster_compare.main(args + ["--timestamp", TS, "--max-retries", "0"],
                               pair_task=functools.partial(cluster_faults.ranks_2_3_fail, first))
    assert got == 2
    assert sorted(p for p, _ in ran(first)) == sorted(f"step{s}-rank{r}" for s in (0, 1) for r in (0, 1))
    # Resumed without --timestamp: the run's own timestamp is taken from the pairs done, and
    # only the undone pairs run.
    got = cluster_compare.main(args + ["--resume"], pair_task=functools.partial(cluster_faults.logged, second))
    assert got == code
    assert sorted(p for p, _ in ran(second)) == sorted(f"step{s}-rank{r}" for s in (0, 1) for r in (2, 3))
    assert_same_files(out, local)
    # A second resume finds every pair done and runs none.
    third = str(tmp_path / "third")
    os.makedirs(third)
    got = cluster_compare.main(args + ["--resume"], pair_task=functools.partial(cluster_faults.logged, third))
    assert got == code and ran(third) == []
    assert_same_files(out, local)


def test_cluster_compare_refuses_what_is_not_a_run(tmp_path):
    r = subprocess.run([sys.executable, "-m", "numprobe.cluster", "compare", str(tmp_path), GOLDEN,
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "not a run root" in r.stderr, r.stderr


def run_ut_outputs(folder):
    (res,) = glob.glob(os.path.join(folder, "accuracy_checking_result_*.csv"))
    return res, res.replace("accuracy_checking_result_", "accuracy_checking_details_")


def test_cluster_run_ut_writes_the_rows_of_run_ut(cluster, tmp_path):
    (dump_json,) = glob.glob(os.path.join(FIX, "pt_tiny_f32_tensor_L1", "dump", "step0", "*", "dump.json"))
    local, remote = tmp_path / "local", tmp_path / "remote"
    r = subprocess.run([sys.executable, "-m", "numprobe.pytorch", "run_ut", "-api_info", dump_json, "-o", str(local)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    c = subprocess.run([sys.executable, "-m", "numprobe.cluster", "run_ut", "-api_info", dump_json,
                        "-o", str(remote), "--address", cluster.address, "--shards", "3"],
                       capture_output=True, text=True, timeout=900)
    assert c.returncode == r.returncode, c.stderr[-3000:]
    for a, b in zip(run_ut_outputs(remote), run_ut_outputs(local)):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read(), a
