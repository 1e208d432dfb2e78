"""Level L2 (kernel level) for MindSpore: MindSpore's own dump, configured as msprobe 26.2
configures it.

The debugger writes ``{dump_path}/kernel_kbyk_dump.json`` (the same JSON msprobe writes for the
same config.json), points ``MINDSPORE_DUMP_CONFIG`` at it at the first ``start()``, and drives
MindSpore's dynamic dump with ``start``/``stop``/``step``. MindSpore writes the tree
(``rank_{id}/{net_name}/{graph_id}/{iteration}/*.npy``); ``numprobe validate``/``compare`` read it.

Works in graph mode and for ``mindspore.jit`` functions in PyNative mode; plain PyNative ops
are not kernels of a graph and are not dumped (MindSpore's rule).

Task ``statistics`` on the CPU, where MindSpore refuses statistic dumps (and msprobe fails):
MindSpore is pointed at a staging copy of the JSON that saves tensors, and at every ``stop()``
and ``step()`` each iteration folder's tensors become MindSpore's ``statistic.csv`` (numprobe's
statistics kernels, MindSpore's rules; for ``summary_mode: md5`` the ``MD5`` column alone, the
MD5 of each tensor's bytes) and are deleted, so the staged data stays within a step.
``kernel_kbyk_dump.json`` itself is msprobe's JSON, unchanged.
"""
import json
import os
import sys
from typing import Any, Dict, List

from .. import _outfiles, _settings
from ..config import DumpConfig

try:  # MindSpore's dynamic dump switches (2.5+); without them the dump runs from the start.
    from mindspore._c_expression import (  # type: ignore[attr-defined]
        _dump_set_dynamic,
        _dump_start,
        _dump_step,
        _dump_stop,
        _set_init_iter,
    )

    _DYNAMIC = True
except ImportError:  # pragma: no cover - older MindSpore
    _DYNAMIC = False

CONFIG_NAME = "kernel_kbyk_dump.json"
# What MindSpore reads when numprobe stages tensors for host-side statistics.
STAGING_CONFIG_NAME = ".numprobe_kernel_staging.json"


def _hash_category(ms_version: str, mode: str) -> str:
    """msprobe's name for a hash statistic: MindSpore up to 2.7.0 calls it ``md5``."""
    try:
        parts = tuple(int(p) for p in ms_version.split(".")[:3])
    except ValueError:
        parts = (99,)
    if parts <= (2, 7, 0) and mode in ("hash", "md5"):
        return "md5"
    if mode == "md5":
        return "hash:md5"
    return mode


def dump_config(cfg: DumpConfig, ms_version: str) -> Dict[str, Any]:
    """The dump JSON msprobe's level L2 writes for ``cfg`` (keys, order and values)."""
    common: Dict[str, Any] = {
        "dump_mode": 0,
        "path": cfg.dump_path,
        "net_name": "Net",
        "iteration": "all",
        "saved_data": "statistic",
        "input_output": 0,
        "kernels": [],
        "support_device": [0, 1, 2, 3, 4, 5, 6, 7],
        "statistic_category": [],
    }
    if cfg.list:
        common["dump_mode"] = 1
        common["kernels"] = list(cfg.list)
    if cfg.step:
        common["iteration"] = "|".join(str(s) for s in cfg.step)
    if cfg.rank:
        common["support_device"] = list(cfg.rank)
    if cfg.task == "tensor":
        common["saved_data"] = "tensor"
    if len(cfg.data_mode) == 1:
        if cfg.data_mode[0] == "input":
            common["input_output"] = 1
        elif cfg.data_mode[0] == "output":
            common["input_output"] = 2
    if cfg.summary_mode == "statistics":
        common["statistic_category"] = ["max", "min", "avg", "l2norm"]
    else:
        common["statistic_category"] = [_hash_category(ms_version, cfg.summary_mode)]
    e2e: Dict[str, Any] = {"enable": not cfg.async_dump, "trans_flag": True}
    if cfg.task == "statistics":
        e2e["stat_calc_mode"] = "host"
        e2e["device_stat_precision_mode"] = "high"
    return {"common_dump_settings": common, "e2e_dump_settings": e2e}


def _communication_initialised() -> bool:
    try:
        from mindspore.communication._comm_helper import GlobalComm

        return bool(getattr(GlobalComm, "INITED", False))
    except Exception:  # no communication package: nothing initialised
        return False


def _graph_compiled() -> bool:
    """Whether MindSpore has compiled a graph (a Cell in graph mode or a jit function) in this
    process: it reads its dump configuration then, once. MindSpore 2.7 records compiled phases
    per Cell in ``api.cells_compile_cache`` (Cell id -> set of phases, empty until its first
    compile) and jit functions' in ``api.ms_compile_cache``."""
    try:
        from mindspore.common import api
    except Exception:
        return False
    cells = getattr(api, "cells_compile_cache", None)
    if isinstance(cells, dict) and any(cells.values()):
        return True
    return bool(getattr(api, "ms_compile_cache", None))


def _rank_id() -> int:
    try:
        from mindspore.communication import get_rank

        return int(get_rank())
    except Exception:  # communication not initialised: a single process
        return _settings.rank_id()


class KernelDumpRecorder:
    """The recorder of level L2: no hooks, MindSpore's dump does the work."""

    def __init__(self, cfg: DumpConfig) -> None:
        import mindspore as ms

        self.cfg = cfg
        self.ms_version = ms.__version__
        self.step_count = 0
        self.started = False
        self.dumping = False
        self.config_path = os.path.join(cfg.dump_path, CONFIG_NAME)
        self.host_statistics = (cfg.task == "statistics"
                                and cfg.summary_mode in ("statistics", "md5")
                                and ms.get_context("device_target") == "CPU")
        self.warned_empty = False
        self.window_ran = False
        if _communication_initialised():
            raise RuntimeError(
                "numprobe: level L2 must be set up before mindspore.communication.init(): "
                "create PrecisionDebugger first (msprobe's rule); MindSpore's kernel dump "
                "would stay empty")
        existing = _settings.mindspore_dump_config()
        if existing and os.path.abspath(existing) != os.path.abspath(self.config_path):
            print(f"numprobe: MINDSPORE_DUMP_CONFIG was {existing}; level L2 replaces it with "
                  f"{self.config_path}", file=sys.stderr)
        if _DYNAMIC:
            _dump_set_dynamic()

    @staticmethod
    def _write_json(path: str, data: Dict[str, Any]) -> None:
        # By the writers' rule: a link or non-file at the name is refused, never replaced or
        # written through; the file is written beside it and renamed over it.
        _outfiles.replace(path, lambda f: json.dump(data, f, indent=4))

    def _write_config(self) -> None:
        os.makedirs(self.cfg.dump_path, exist_ok=True)
        data = dump_config(self.cfg, self.ms_version)
        self._write_json(self.config_path, data)
        target = self.config_path
        if self.host_statistics:
            staged = json.loads(json.dumps(data))
            staged["common_dump_settings"]["saved_data"] = "tensor"
            del staged["common_dump_settings"]["statistic_category"]
            for k in ("stat_calc_mode", "device_stat_precision_mode"):
                staged["e2e_dump_settings"].pop(k, None)
            target = os.path.join(self.cfg.dump_path, STAGING_CONFIG_NAME)
            self._write_json(target, staged)
        _settings.use_mindspore_dump_config(target)

    def _summarize_staged(self) -> None:
        """Every iteration folder's staged tensors into its statistic.csv."""
        from .._native import kernel_statistics

        root = os.path.join(self.cfg.dump_path, f"rank_{_rank_id()}")
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ("execution_order", "graphs")
                       and not d.startswith(".")]
            if any(f.endswith(".npy") for f in files):
                kernel_statistics(dirpath, md5=self.cfg.summary_mode == "md5")

    def start(self, model: Any = None) -> None:
        if not self.started:
            if _graph_compiled():
                raise RuntimeError(
                    "numprobe: a graph was compiled before level L2 was set up (the first "
                    "PrecisionDebugger.start()); MindSpore reads its kernel-dump configuration "
                    "at the first compile, so nothing would be dumped. Create the debugger and "
                    "call start() before the network or jit function first runs")
            self._write_config()
            if _DYNAMIC:
                _set_init_iter(0)
            self.started = True
        rank_ok = not self.cfg.rank or _rank_id() in self.cfg.rank
        step_ok = not self.cfg.step or self.step_count in self.cfg.step
        if rank_ok and step_ok:
            # A step and rank the filters keep: an empty tree after it is worth a word.
            self.window_ran = True
        if _DYNAMIC and rank_ok and step_ok and not self.dumping:
            _dump_start()
            self.dumping = True

    def stop(self) -> None:
        if _DYNAMIC and self.dumping:
            # As msprobe: let queued kernels finish before the switch (on the CPU MindSpore
            # logs that it cannot synchronize; the call is still what orders the dump).
            import mindspore as ms

            try:
                ms.runtime.synchronize()
            except Exception:
                pass
            _dump_stop()
            self.dumping = False
        if self.host_statistics:
            self._summarize_staged()
        if self.window_ran and not self.warned_empty and not self.dumped_files():
            self.warned_empty = True
            if self.cfg.list:
                why = (f"the `list` filter {list(self.cfg.list)} matched no kernel of the graph "
                       "(names are MindSpore's full scopes, e.g. Default/network-WithLossCell/"
                       "_backbone-Net/fc-Dense/MatMul-op0)")
            else:
                why = "the code ran outside a graph or mindspore.jit"
            print(f"numprobe: level L2 dumped no kernel so far: {why}", file=sys.stderr)

    def restart_iterations(self) -> None:
        """MindSpore's iteration count (the dump tree's ``{iteration}`` folders) back to 0, what
        msprobe's ``MsprobeStep`` does at every ``Model.train`` begin."""
        if _DYNAMIC and self.started:
            _set_init_iter(0)

    def end_step(self) -> None:
        if _DYNAMIC and self.started:
            _dump_step(1)
        if self.host_statistics:
            self._summarize_staged()
        self.step_count += 1

    def dumped_files(self) -> List[str]:
        """Tensor and statistic files under this rank's tree so far (for the 'nothing matched'
        message)."""
        root = os.path.join(self.cfg.dump_path, f"rank_{_rank_id()}")
        found: List[str] = []
        for dirpath, _dirs, files in os.walk(root):
            if os.sep + "execution_order" in dirpath or os.sep + "graphs" in dirpath:
                continue
            found.extend(os.path.join(dirpath, f) for f in files
                         if f.endswith(".npy") or f == "statistic.csv")
        return found
