"""The part of msprobe's ``PrecisionDebugger`` that does not depend on the framework: one
instance per process, config.json read once, start/stop/step handed to the adapter's recorder."""
from .config import DumpConfig


class DebuggerBase:
    """Same arguments and methods as msprobe's ``PrecisionDebugger``; a second construction
    returns the first instance, as msprobe does. Subclasses set ``_recorder_class``."""

    _instance = None
    _recorder_class = None

    def __new__(cls, *args, **kwargs):
        # Assigning on `cls` keeps one singleton per framework subclass.
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
        self.recorder = self._recorder_class(self.config)

    @classmethod
    def _get(cls):
        if cls._instance is None or not cls._instance._initialized:
            raise RuntimeError("PrecisionDebugger has not been created")
        return cls._instance

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
            rec = cls._instance.recorder
            rec.end_step()
            # Module hooks the PyTorch recorder registered (MindSpore's keep their own table).
            for h in getattr(rec, "handles", ()):
                h.remove()
        cls._instance = None
