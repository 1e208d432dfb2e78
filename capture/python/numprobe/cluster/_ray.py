"""Ray, imported on first use, and the connection to the cluster."""
import contextlib
from typing import Iterator, Optional

# Object store of a Ray instance this package starts itself (no --address): the tasks pass
# small results only (tables and rows are written to the shared output folder).
LOCAL_OBJECT_STORE = 200 * 1024 * 1024


class RayMissing(Exception):
    pass


def import_ray():
    try:
        import ray
    except ImportError as e:
        raise RayMissing(f"numprobe.cluster needs Ray on this machine and every node (pip install ray): {e}") from e
    return ray


@contextlib.contextmanager
def connected(address: Optional[str]) -> Iterator[object]:
    """Ray connected to the cluster at `address` (`auto`: the one this machine belongs to),
    or to a Ray instance started here when `address` is None; disconnected at the end."""
    ray = import_ray()
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(object_store_memory=LOCAL_OBJECT_STORE, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
