"""msprobe's user API for MindSpore: PrecisionDebugger, seed_all and the MsprobeStep callback."""
import os
import random
from typing import Any

import mindspore as ms

from .._debugger import DebuggerBase
from ..config import DumpConfig
from .kernel_dump import KernelDumpRecorder
from .recorder import Recorder


def _recorder_for(cfg: DumpConfig) -> Any:
    """Level L2 is MindSpore's own kernel dump; the other levels hook the Python APIs."""
    return KernelDumpRecorder(cfg) if cfg.level == "L2" else Recorder(cfg)


class PrecisionDebugger(DebuggerBase):
    """msprobe's ``PrecisionDebugger`` for MindSpore (see ``numprobe._debugger.DebuggerBase``)."""

    _instance = None
    _recorder_class = _recorder_for  # type: ignore[assignment]
    _levels = ("L0", "L1", "mix", "L2")
    recorder: Recorder


class MsprobeStep(ms.train.Callback):
    """Dumps every training step of ``mindspore.train.Model``: start at step begin, stop and
    step at step end (pass it in ``callbacks=``).

    At level L2, as msprobe's callback, each ``Model.train`` call restarts MindSpore's kernel-dump
    iteration count at 0, so a second ``train`` call writes its steps into the iteration folders
    ``0, 1, ...`` again (beside the first call's files) while the ``step`` filter keeps counting
    steps across calls."""

    def __init__(self, debugger: PrecisionDebugger) -> None:
        super().__init__()
        self.debugger = debugger

    def on_train_begin(self, run_context: Any) -> None:
        self.debugger.start()
        if isinstance(self.debugger.recorder, KernelDumpRecorder):
            self.debugger.recorder.restart_iterations()

    def on_train_step_begin(self, run_context: Any) -> None:
        self.debugger.start()

    def on_train_step_end(self, run_context: Any) -> None:
        self.debugger.stop()
        self.debugger.step()


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False) -> None:
    """Seeds Python and MindSpore like msprobe's ``seed_all``; ``mode`` turns on deterministic
    kernels; ``rm_dropout`` makes the dropout primitives keep everything."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError("seed must be an int in [0, 2**32)")
    if not isinstance(mode, bool) or not isinstance(rm_dropout, bool):
        raise ValueError("mode and rm_dropout must be booleans")
    os.environ["PYTHONHASHSEED"] = str(seed)
    ms.set_seed(seed)
    random.seed(seed)
    ms.set_context(deterministic="ON" if mode else "OFF")
    os.environ["HCCL_DETERMINISTIC"] = str(mode)
    if rm_dropout:
        _keep_all_dropout()


def _keep_all_dropout() -> None:
    from mindspore import ops

    for name in ("Dropout", "Dropout2D", "Dropout3D"):
        orig = getattr(ops, name, None)
        if orig is None or getattr(orig, "_numprobe_keep_all", False):
            continue
        keep_all = type(name, (orig,), {
            "__init__": lambda self, keep_prob=0.5, *a, _o=orig, **k: _o.__init__(self, 1.0, *a, **k),
            "_numprobe_keep_all": True,
        })
        setattr(ops, name, keep_all)
