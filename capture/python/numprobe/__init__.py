"""numprobe: msprobe-compatible dumps of PyTorch runs, captured by a Rust core.

    from numprobe.pytorch import PrecisionDebugger, seed_all
"""
from ._native import recover  # noqa: F401

__version__ = "0.1.0"
