"""The cluster path's cost per task: `python -m numprobe.cluster compare` on a local Ray cluster
(a head taking no task and two worker nodes of one CPU each, on loopback) against `numprobe
compare --workers 2` on the same run, and a Ray task that does nothing.

    python benches/peers/cluster_overhead.py --numprobe BIN [--run DIR] [--rounds 3]

DIR holds `target/` and `golden/` run roots (default: testdata/runs/tp4-stats, 8 pairs of
statistics dumps). Cluster start-up is left out (a cluster is started once and outlives many
runs); the driver's own start (Python, Ray's connection, the plan) is in. Prints the median
wall time of each path and (cluster - local) / pairs.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only (see capture/python_tests/test_cluster.py)
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def wall(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        sys.exit(f"{cmd[:3]} failed ({r.returncode}): {r.stderr[-2000:]}")
    return dt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--numprobe", required=True)
    p.add_argument("--run", default=os.path.join(HERE, "..", "..", "testdata", "runs", "tp4-stats"))
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    target, golden = os.path.join(a.run, "target"), os.path.join(a.run, "golden")
    pairs = sum(len([r for r in os.listdir(os.path.join(target, s)) if r.startswith("rank")])
                for s in os.listdir(target) if s.startswith("step"))
    node = {"node_ip_address": "127.0.0.1", "object_store_memory": 200 * 1024 * 1024}
    t0 = time.perf_counter()
    c = Cluster(initialize_head=True, head_node_args=dict(node, num_cpus=0, include_dashboard=False))
    for _ in range(2):
        c.add_node(num_cpus=1, **node)
    c.wait_for_nodes(timeout=300)
    start = time.perf_counter() - t0
    try:
        local, remote = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(a.rounds):
                local.append(wall([a.numprobe, "compare", target, golden, "--out", f"{tmp}/l{i}", "--workers", "2",
                                   "--timestamp", "20261202000000"]))
                remote.append(wall([sys.executable, "-m", "numprobe.cluster", "compare", target, golden,
                                    "--out", f"{tmp}/r{i}", "--address", c.address,
                                    "--timestamp", "20261202000000"]))
        ray.init(address=c.address, log_to_driver=False)
        noop = ray.remote(lambda: None).options(num_cpus=1)
        ray.get([noop.remote() for _ in range(4)])  # workers started
        t0 = time.perf_counter()
        ray.get([noop.remote() for _ in range(100)])
        per_noop = (time.perf_counter() - t0) / 100
        ray.shutdown()
    finally:
        c.shutdown()
    lm, rm = statistics.median(local), statistics.median(remote)
    print(f"pairs {pairs}; cluster start {start:.1f} s (not counted)")
    print(f"numprobe compare --workers 2: median {lm:.2f} s {[round(x, 2) for x in local]}")
    print(f"numprobe.cluster compare (2 worker nodes): median {rm:.2f} s {[round(x, 2) for x in remote]}")
    print(f"overhead per pair task: {(rm - lm) / pairs * 1000:.0f} ms; empty Ray task: {per_noop * 1000:.1f} ms")


if __name__ == "__main__":
    main()
