"""msprobe's config.json, read unchanged (keys, defaults and checks of msprobe 26.2); shared by the PyTorch and MindSpore adapters and free of framework imports."""
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Set

TASKS = ("statistics", "tensor", "structure")
# L2 (kernel level) is MindSpore's only (mindspore/kernel_dump.py); the PyTorch adapter refuses it.
LEVELS = ("L0", "L1", "mix", "L2")
SUMMARY_MODES = ("statistics", "md5", "xor")
RISK_LEVELS = ("CORE", "FOCUS", "ALL")
DATA_MODES = ("all", "forward", "backward", "input", "output")


class ConfigError(ValueError):
    pass


def _list(cfg: Mapping[str, Any], key: str, where: str) -> List[Any]:
    v = cfg.get(key, [])
    if v is None:
        return []
    if not isinstance(v, list):
        raise ConfigError(f"{where}: '{key}' must be a list, got {type(v).__name__}")
    return v


class DumpConfig:
    """The options that change what is dumped, after the debugger's arguments are applied."""

    task: str
    dump_path: str
    level: str
    rank: List[Any]
    step: List[Any]
    async_dump: bool
    extra_info: bool
    precision: str
    custom_op_namespaces: List[str]
    risk_level: str
    scope: List[str]
    list: List[str]
    tensor_list: List[str]
    data_mode: List[str]
    summary_mode: str
    modes: Set[str]

    def __init__(self, raw: Optional[Mapping[str, Any]] = None, task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None,
                 step: Optional[List[Any]] = None) -> None:
        raw = dict(raw or {})
        self.task = task or raw.get("task", "statistics")
        if self.task not in TASKS:
            raise ConfigError(f"task must be one of {TASKS}, got {self.task!r}")
        self.dump_path = dump_path or raw.get("dump_path") or "./"
        self.level = level or raw.get("level", "L1")
        if self.level not in LEVELS:
            raise ConfigError(f"level must be one of {LEVELS}, got {self.level!r}")
        if self.task == "structure" and self.level not in ("L0", "mix"):
            self.level = "mix"
        self.rank = _list(raw, "rank", "config")
        self.step = step if step is not None else _list(raw, "step", "config")
        if not isinstance(self.step, list):
            raise ConfigError("step must be a list")
        # msprobe's asynchronous dump. numprobe always computes statistics in its Rust core
        # and writes tensor files on a background thread, so the option is accepted (and kept
        # for callers) but changes nothing else.
        self.async_dump = raw.get("async_dump", False)
        if not isinstance(self.async_dump, bool):
            raise ConfigError("async_dump must be a boolean")
        self.extra_info = raw.get("extra_info", True)
        if not isinstance(self.extra_info, bool):
            raise ConfigError("extra_info must be a boolean")
        self.precision = raw.get("precision", "low")
        if self.precision not in ("low", "high"):
            raise ConfigError("precision must be 'low' or 'high'")
        # torch.ops namespaces whose operators are recorded as `{namespace}.{op}` (msprobe's
        # key; pytorch/_ops_hooks.py).
        if "custom_op_namespaces" in raw:
            self.custom_op_namespaces = _list(raw, "custom_op_namespaces", "config")
            if not all(isinstance(n, str) and n for n in self.custom_op_namespaces):
                raise ConfigError("custom_op_namespaces must be a list of namespace names")
        else:
            self.custom_op_namespaces = ["_C_ascend"]
        self.risk_level = raw.get("risk_level", "FOCUS") or "ALL"
        if self.risk_level not in RISK_LEVELS:
            raise ConfigError(f"risk_level must be one of {RISK_LEVELS}")
        sec = raw.get(self.task, {}) or {}
        if not isinstance(sec, dict):
            raise ConfigError(f"'{self.task}' must be an object")
        self.scope = _list(sec, "scope", self.task)
        self.list = _list(sec, "list", self.task)
        self.tensor_list = _list(sec, "tensor_list", self.task)
        self.data_mode = _list(sec, "data_mode", self.task) or ["all"]
        for m in self.data_mode:
            if m not in DATA_MODES:
                raise ConfigError(f"data_mode entries must be among {DATA_MODES}, got {m!r}")
        self.summary_mode = sec.get("summary_mode", "statistics")
        if self.summary_mode not in SUMMARY_MODES:
            raise ConfigError(f"summary_mode must be one of {SUMMARY_MODES}")
        modes = set(self.data_mode)
        if "all" in modes:
            modes = {"forward", "backward", "input", "output"}
        else:
            if not modes & {"forward", "backward"}:
                modes |= {"forward", "backward"}
            if not modes & {"input", "output"}:
                modes |= {"input", "output"}
        self.modes = modes

    @classmethod
    def load(cls, config_path: Optional[str] = None, **overrides: Any) -> "DumpConfig":
        """The config.json at `config_path` (msprobe's defaults without one), with the
        debugger's arguments (`task`, `dump_path`, `level`, `step`) applied over it."""
        raw: Dict[str, Any] = {}
        if config_path is not None:
            if not os.path.isfile(config_path):
                raise ConfigError(f"config file not found: {config_path}")
            with open(config_path) as f:
                raw = json.load(f)
            if not isinstance(raw, dict):
                raise ConfigError(f"{config_path}: top level must be an object")
        return cls(raw, **overrides)

    def saves_tensors(self, entry_name: str) -> bool:
        """Whether the tensors of entry `entry_name` are saved as files."""
        if self.task == "tensor":
            return True
        return any(s in entry_name for s in self.tensor_list)
