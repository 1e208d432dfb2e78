"""msprobe's user API for PyTorch: PrecisionDebugger, seed_all, module_dump."""
import os
import random
from typing import Any, Dict, List, Optional

import torch

from .._debugger import DebuggerBase
from .recorder import Recorder


class PrecisionDebugger(DebuggerBase):
    """msprobe's ``PrecisionDebugger`` for PyTorch (see ``numprobe._debugger.DebuggerBase``)."""

    _instance = None
    _recorder_class = Recorder
    recorder: Recorder

    def __init__(self, config_path: Optional[str] = None, task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None, model: Any = None,
                 step: Optional[List[Any]] = None, extra_apis: Optional[bool] = None) -> None:
        """msprobe's arguments, and `extra_apis`: also record the calls msprobe cannot see,
        under names of their own (default: NUMPROBE_EXTRA_APIS)."""
        first = not getattr(self, "_initialized", False)
        super().__init__(config_path, task=task, dump_path=dump_path, level=level, model=model,
                         step=step)
        if first and extra_apis is not None:
            self.recorder.extra_apis = bool(extra_apis)


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False,
             is_enhanced: bool = False) -> None:
    """Seeds Python, numpy and torch (and CUDA when present) like msprobe's ``seed_all``;
    ``mode`` turns on deterministic algorithms; ``rm_dropout`` sets every dropout's p to 0."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError("seed must be an int in [0, 2**32)")
    if not isinstance(mode, bool) or not isinstance(rm_dropout, bool):
        raise ValueError("mode and rm_dropout must be booleans")
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(mode)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    if rm_dropout:
        _remove_dropout()


def _remove_dropout() -> None:
    import torch.nn.functional as F

    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                 "feature_alpha_dropout"):
        orig = getattr(F, name, None)
        if orig is None or getattr(orig, "_numprobe_p0", False):
            continue

        def make(orig):
            def no_dropout(input, p=0.5, training=True, inplace=False):
                return orig(input, 0.0, training, inplace)

            no_dropout._numprobe_p0 = True
            return no_dropout

        setattr(F, name, make(orig))


_module_dump_state: Dict[int, bool] = {}


def module_dump(module: torch.nn.Module, dump_name: str) -> None:
    """Dump only `module` (as ``Module.{dump_name}.{Class}``) until ``module_dump_end()``."""
    dbg = PrecisionDebugger._get()
    rec = dbg.recorder
    if not rec.ensure_session():
        return
    prefix = f"Module.{dump_name}.{type(module).__name__}"
    key = id(module)
    if key not in _module_dump_state:
        saved = rec.cfg.level
        rec.cfg.level = "L0"
        rec._hook_module(module, prefix)
        rec.cfg.level = saved
        _module_dump_state[key] = True
    rec.enabled = True
    rec.module_enabled = True


def module_dump_end() -> None:
    """Ends what ``module_dump`` started and writes the JSON files recorded so far."""
    dbg = PrecisionDebugger._get()
    dbg.recorder.module_enabled = False
    if dbg.recorder.session is not None:
        # Pending device statistics first, so this intermediate dump.json has them.
        dbg.recorder.flush_device_stats()
        dbg.recorder.session.write_json()
