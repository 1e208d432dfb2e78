"""numprobe's PyTorch adapter, with msprobe's import paths:

    from numprobe.pytorch import PrecisionDebugger, seed_all, module_dump, module_dump_end
"""
__all__ = ["PrecisionDebugger", "seed_all", "module_dump", "module_dump_end"]


def __getattr__(name):
    # The capture machinery (hooks over torch's API lists) is imported on first use: the
    # replay (`python -m numprobe.pytorch run_ut`) needs none of it.
    if name in __all__:
        from . import debugger

        return getattr(debugger, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
