"""msprobe's user API for MindSpore: PrecisionDebugger, seed_all and the MsprobeStep callback."""
import os
import random

import mindspore as ms

from ..config import DumpConfig
from .recorder import Recorder


class PrecisionDebugger:
    """Same arguments and methods as msprobe's MindSpore ``PrecisionDebugger``; one instance per
    process (constructing it again returns the first one, as msprobe does)."""

    _instance = None

    def __new__(cls, *args, **kwargs):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._initialized = False
        return cls._instance

    def __init__(self, config_path=None, task=None, dump_path=None, level=None, model=None,
                 step=None):
        if self._initialized:
            return
        self._initialized = True
        self.config = DumpConfig.load(config_path, task=task, dump_path=dump_path, level=level,
                                      step=step)
        self.model = model
        self.recorder = Recorder(self.config)

    def start(self, model=None):
        self.recorder.start(model if model is not None else self.model)

    def stop(self):
        self.recorder.stop()

    def step(self):
        self.recorder.end_step()

    def forward_backward_dump_end(self):
        self.recorder.stop()

    @classmethod
    def _reset(cls):
        """Forget the singleton (tests; a new run in the same process)."""
        if cls._instance is not None and cls._instance._initialized:
            cls._instance.recorder.end_step()
        cls._instance = None


class MsprobeStep(ms.train.Callback):
    """Dumps every training step of ``mindspore.train.Model``: start at step begin, stop and
    step at step end (pass it in ``callbacks=``)."""

    def __init__(self, debugger):
        super().__init__()
        self.debugger = debugger

    def on_train_begin(self, run_context):
        self.debugger.start()

    def on_train_step_begin(self, run_context):
        self.debugger.start()

    def on_train_step_end(self, run_context):
        self.debugger.stop()
        self.debugger.step()


def seed_all(seed=1234, mode=False, rm_dropout=False):
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


def _keep_all_dropout():
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
