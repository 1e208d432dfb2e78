"""numprobe's PyTorch adapter, with msprobe's import paths:

    from numprobe.pytorch import PrecisionDebugger, seed_all, module_dump, module_dump_end
"""
from .debugger import PrecisionDebugger, module_dump, module_dump_end, seed_all

__all__ = ["PrecisionDebugger", "seed_all", "module_dump", "module_dump_end"]
