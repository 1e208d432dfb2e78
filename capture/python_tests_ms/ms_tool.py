"""What the MindSpore test scripts share: PyNative mode on the CPU, and the debugger module of
the tool under test."""
import importlib

import mindspore as ms


def setup(tool):
    """Sets PyNative mode on the CPU and returns `msprobe.mindspore` or `numprobe.mindspore`
    (None for "none"). msprobe's statistics call mint.norm, which has no CPU kernel; without the
    attribute it falls back to ops.norm (the fixtures were made the same way)."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    if tool == "none":
        return None
    if tool == "msprobe":
        from mindspore import mint

        if hasattr(mint, "norm"):
            delattr(mint, "norm")
    return importlib.import_module(f"{tool}.mindspore")
