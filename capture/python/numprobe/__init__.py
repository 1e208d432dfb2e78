"""numprobe: msprobe-compatible dumps of PyTorch and MindSpore runs, captured by a Rust core.

    from numprobe.pytorch import PrecisionDebugger, seed_all
    from numprobe.mindspore import PrecisionDebugger, seed_all, MsprobeStep

`python -m numprobe.pytorch run_ut -api_info dump.json -o OUT` re-checks a dump's APIs.
"""
from ._native import recover, wait_durable  # noqa: F401

__version__ = "0.1.0"
