"""Pair tasks for test_cluster.py that fail on purpose, importable by the Ray workers (the test
puts this folder on the cluster's PYTHONPATH). Each wraps numprobe.cluster's own task."""
import json
import os

from numprobe.cluster.compare import compare_pair


def _first_time(marker):
    """True once per marker file: created exclusively, so a retried task finds it."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _name(pair):
    return f"step{pair[0]}-rank{pair[1]}"


def lost_once(marker_dir, options, timestamp, pair):
    """The worker of step 0's rank 2 dies before comparing (a lost task, as a killed node's);
    step 0's rank 3 raises an I/O error once (storage gone a moment); every pair then runs."""
    name = _name(pair)
    if pair[0] == 0 and pair[1] == 2 and _first_time(os.path.join(marker_dir, f"died-{name}")):
        os._exit(1)
    if pair[0] == 0 and pair[1] == 3 and _first_time(os.path.join(marker_dir, f"oserror-{name}")):
        raise OSError(f"{name}: storage not reachable (planted by the test)")
    return logged(marker_dir, options, timestamp, pair)


def logged(marker_dir, options, timestamp, pair):
    """Compares the pair and leaves `ran-{pair}-{pid}` naming the node it ran on."""
    import ray

    out = compare_pair(options, timestamp, pair)
    node = ray.get_runtime_context().get_node_id()
    with open(os.path.join(marker_dir, f"ran-{_name(pair)}-{os.getpid()}"), "w") as f:
        json.dump({"node": node}, f)
    return out


def ranks_2_3_fail(marker_dir, options, timestamp, pair):
    """Ranks 2 and 3 fail for good (a bug, not retried): the run stops with their pairs undone."""
    if pair[1] in (2, 3):
        raise RuntimeError(f"{_name(pair)}: planted failure")
    return logged(marker_dir, options, timestamp, pair)
