"""numprobe's MindSpore adapter (PyNative), with msprobe's import paths:

    from numprobe.mindspore import PrecisionDebugger, seed_all, MsprobeStep
"""
from .debugger import MsprobeStep, PrecisionDebugger, seed_all

__all__ = ["PrecisionDebugger", "seed_all", "MsprobeStep"]
