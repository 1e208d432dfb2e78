"""The part of msprobe's ``PrecisionDebugger`` that does not depend on the framework: one
instance per process, config.json read once, start/stop/step handed to the adapter's recorder."""
from typing import Any, ClassVar, List, Optional, Protocol, Tuple, Type, TypeVar

from .config import ConfigError, DumpConfig


class RecorderProtocol(Protocol):
    """What a debugger asks of its framework's recorder."""

    def __init__(self, cfg: DumpConfig) -> None: ...
    def start(self, model: Any) -> None: ...
    def stop(self) -> None: ...
    def end_step(self) -> None: ...


_D = TypeVar("_D", bound="DebuggerBase")


class DebuggerBase:
    """Same arguments and methods as msprobe's ``PrecisionDebugger``; a second construction
    returns the first instance, as msprobe does. Subclasses set ``_recorder_class``."""

    _instance: ClassVar[Optional["DebuggerBase"]] = None
    _recorder_class: ClassVar[Optional[Type[RecorderProtocol]]] = None
    # The dump levels the framework's adapter implements.
    _levels: ClassVar[Tuple[str, ...]] = ("L0", "L1", "mix")
    _initialized: bool
    config: DumpConfig
    model: Any
    recorder: RecorderProtocol

    def __new__(cls: Type[_D], *args: Any, **kwargs: Any) -> _D:
        # Assigning on `cls` keeps one singleton per framework subclass.
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._initialized = False
        return cls._instance  # type: ignore[return-value]

    def __init__(self, config_path: Optional[str] = None, task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None, model: Any = None,
                 step: Optional[List[Any]] = None) -> None:
        if self._initialized:
            return
        self._initialized = True
        self.config = DumpConfig.load(config_path, task=task, dump_path=dump_path, level=level,
                                      step=step)
        if self.config.level not in type(self)._levels:
            self._initialized = False
            type(self)._instance = None
            raise ConfigError(f"level {self.config.level!r} is not available for this framework "
                              f"(levels: {', '.join(type(self)._levels)})")
        self.model = model
        make = type(self)._recorder_class
        assert make is not None, "subclasses set _recorder_class"
        self.recorder = make(self.config)

    @classmethod
    def _get(cls: Type[_D]) -> _D:
        inst = cls._instance
        if inst is None or not inst._initialized:
            raise RuntimeError("PrecisionDebugger has not been created")
        return inst  # type: ignore[return-value]

    def start(self, model: Any = None) -> None:
        """Starts (or resumes) recording; `model` (or the constructor's) gets the module hooks
        of levels L0 and mix."""
        self.recorder.start(model if model is not None else self.model)

    def stop(self) -> None:
        """Pauses recording and writes the JSON files of what the step recorded so far."""
        self.recorder.stop()

    def step(self) -> None:
        """Ends the step: its files are finished and the next step starts counting from 0."""
        self.recorder.end_step()

    def forward_backward_dump_end(self) -> None:
        self.recorder.stop()

    @classmethod
    def _reset(cls) -> None:
        """Forget the singleton (tests; a new run in the same process)."""
        if cls._instance is not None and cls._instance._initialized:
            rec = cls._instance.recorder
            rec.end_step()
            # Module hooks the PyTorch recorder registered (MindSpore's keep their own table).
            for h in getattr(rec, "handles", ()):
                h.remove()
        cls._instance = None
