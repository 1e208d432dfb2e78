"""Per-thread flags shared by the recorder's hooks and wrappers.

``busy`` is set while numprobe itself runs (recording a value, or running a recorded API's own
torch calls), so that the torch calls made meanwhile are not recorded as APIs of the script.
"""
import threading

tls = threading.local()


def busy() -> bool:
    return getattr(tls, "busy", False)


def set_busy(v: bool) -> None:
    tls.busy = v
