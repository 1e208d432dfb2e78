"""Per-thread flags shared by the recorder's hooks and wrappers.

``busy`` is set while numprobe itself runs (recording a value, or running a recorded API's own
torch calls), so that the torch calls made meanwhile are not recorded as APIs of the script.
The flag lives in the native module, which sets it too (capture/py/src/api_call.rs).
"""
from .._native import busy, set_busy  # noqa: F401
