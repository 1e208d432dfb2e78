"""The PyTorch adapter: sees API calls through wrappers in torch's namespaces (and a
TorchFunctionMode), modules through module hooks, gradients through autograd node hooks, and
hands every value to the Rust session (``numprobe._native.Session``), which journals it and
writes msprobe's files.

``Recorder`` holds the state of one PrecisionDebugger; its parts live in modules named after
them:

* ``_api_hooks.py``: API calls (L1, mix): the namespace wrappers, the TorchFunctionMode, and
  what a call records (``call_api``);
* ``_module_hooks.py``: modules (L0, mix): forward, backward and parameter-gradient hooks;
* ``_values.py``: the record of each value; host tensor statistics read in place, and the
  cache of records of unchanged large tensors;
* ``_device_stats.py``: statistics of GPU/NPU tensors computed on the device, read back once
  per step;
* ``_stats_thread.py``: statistics of large CPU tensors on a second thread, and the write guard
  that keeps them exact;
* ``_stacks.py``: call stacks for stack.json;
* ``numprobe._session``: the session of each step and rank (shared with MindSpore).

Statistics are computed on the training thread, before the API runs (inputs) and right after
it (outputs), unless the device or the statistics thread takes them: the journal holds every
entry whose hook has returned, so a process killed at any point keeps every API recorded before
the kill. Call stacks are cached by code object and instruction offset, and a repeated stack
is journaled as a reference to its group.
"""
import torch

from .. import _native, _settings
from .._session import StepSession
from ._api_hooks import ApiHooks, _patch_namespaces, _unpatch_namespaces, api_map  # noqa: F401
from ._device_stats import DeviceStats
from ._module_hooks import ModuleHooks
from ._stacks import Stacks
from ._stats_thread import _ASYNC_MIN_BYTES, StatsThread
from . import _torch_shim, _values
from ._values import Values, _location, walker_types  # noqa: F401


class Recorder(StepSession, ApiHooks, ModuleHooks, Values, DeviceStats, StatsThread, Stacks):
    """State of one PrecisionDebugger: the current step's session, counters, hooks."""

    framework = "pytorch"
    module_prefix = "Module."

    def __init__(self, cfg):
        super().__init__(cfg)
        self.api_enabled = False
        self.module_enabled = False
        self.enabled = False
        self.counters = {}
        self.extra_counters = {}  # calls msprobe cannot see (opt-in, see _api_hooks.py)
        self.extra_apis = _settings.extra_apis()
        self.module_counters = {}
        # The open module calls, forward and backward nodes alike, as msprobe keeps them: an
        # API's construct.json parent is the top, so a forward API that a module's backward
        # runs (a custom autograd Function's backward, a checkpointed forward recomputed)
        # has that backward node as its parent.
        self.module_stack = []
        # msprobe's phase of the step at mix level ("optimizer", "clip_grad" or ""), and the
        # phases whose construct.json node this step has written (see ApiHooks._construct_api).
        self.optimizer_status = ""
        self.phases_noted = set()
        self.modules_with_backward = set()  # modules whose backward entry got data this step
        self.scope_state = "before"
        self.scope_taken = set()
        self.may_save = cfg.task == "tensor" or bool(cfg.tensor_list)
        # msprobe takes float32 Mean/Norm from torch under precision low.
        self.torch_order = cfg.precision == "low" and cfg.summary_mode != "xor"
        self.hooked_models = set()
        self.handles = []
        self.param_grad_hooks = {}  # (module prefix, parameter name) -> its gradient hook
        self._walkers = {}  # see _walker
        self._init_stacks()
        self._init_values()
        self._init_stats_thread()
        self._init_device_stats()
        self.native_calls = self.native_api_calls()
        if cfg.level in ("L1", "mix"):
            # msprobe wraps the APIs when the debugger is created (not at start): a function
            # a script stores from a namespace after this is the wrapper, before it the original.
            self.wrap_apis()

    # ------------------------------------------------------------------ session lifecycle

    def current_rank(self):
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank()
        return None

    def world_size(self):
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_world_size()
        return None

    def session_options(self):
        return {"summary_mode": self.cfg.summary_mode, "torch_threads": torch.get_num_threads(),
                "stats_thread_delay_ms": self.stats_thread_delay_ms}

    def session_opened(self):
        self.async_stats = self._async_stats_wanted()
        # The native walk of API values (capture/py/src/walk.rs) records what it can read in
        # place and hands the rest back to ``value``/``outputs``; tensor files stay with them.
        self.session.set_walker(self._walker())

    def _walker(self):
        """The native walk's view of torch for the current settings, built once per settings
        (it reads every dtype's size and name, up to a third of opening a step's capture)."""
        key = (not self.may_save, self.torch_order, _ASYNC_MIN_BYTES if self.async_stats else None)
        walker = self._walkers.get(key)
        if walker is None:
            shim = _torch_shim.load()
            walker = _native.Walker(*walker_types(), *key, to_dlpack=_values.TO_DLPACK,
                                    dlpack_dtypes=_values.dlpack_dtypes(_values.TO_DLPACK),
                                    shim=shim, shim_dtypes=_values.shim_dtypes(shim))
            self._walkers[key] = walker
        return walker

    def start(self, model=None):
        if not self.ensure_session():
            return
        cfg = self.cfg
        if model is not None and cfg.level in ("L0", "mix"):
            self.hook_model(model)
        self.enabled = True
        self.module_enabled = cfg.level in ("L0", "mix")
        if cfg.level in ("L1", "mix"):
            self.api_enabled = True
            self.hook_apis()

    def stop(self):
        self.enabled = False
        self.api_enabled = False
        self.module_enabled = False
        self.unhook_apis()
        if self.session is not None:
            if self.async_jobs:
                self._reap(all_jobs=True)
            self.flush_device_stats()
            self.session.write_json()

    def end_step(self):
        self.stop()
        self.next_step()
        self.counters.clear()
        self.extra_counters.clear()
        self.module_counters.clear()
        self.module_stack.clear()
        self.optimizer_status = ""
        self.phases_noted.clear()
        self.scope_state = "before"
        self.scope_taken = set()
        self.param_grad_counts = {}
        self.modules_with_backward.clear()
        self._prune_stats_cache()

    # ------------------------------------------------------------------ entries

    def selected(self, entry, entering=True):
        """msprobe's collect filter: `list` keeps names containing any list string; `scope`
        [start, end] keeps everything from start through end (the range closes at the end
        entry's forward pre-hook). `entering` is False for a module's output/backward,
        which belongs to a decision already taken at its forward pre-hook."""
        cfg = self.cfg
        if cfg.list:
            return any(item in entry for item in cfg.list)
        if not cfg.scope:
            return True
        start, end = cfg.scope[0], cfg.scope[-1]
        state = self.scope_state
        if not entering:
            # Outputs arrive later: only while the range is still open (the module that
            # closes the range keeps its inputs only, as msprobe's does).
            return entry in self.scope_taken and state == "active"
        if state == "before" and entry == start:
            state = "active"
        if state == "active":
            if entry == end:
                state = "done"
            self.scope_state = state
            self.scope_taken.add(entry)
            return True
        self.scope_state = state
        return False

    def _entry(self, name, body, reinsert=False, stack_group=None):
        """Records `body` into entry `name`; with `stack_group`, `name`'s call stack as that
        group's too (one journal write). Returns whether the stack was recorded."""
        recorded = False
        # task structure: construct.json and stack.json only, dump.json keeps "data": {}.
        if self.cfg.task != "structure":
            if stack_group is None:
                self.session.entry(name, body, reinsert)
            else:
                self.session.entry(name, body, reinsert, stack_group)
                recorded = True
        self._entry_done()
        return recorded

    def _entry_done(self):
        # Past the bound, pending device statistics are read back here, where the entries of
        # all of them are journaled (a fill must follow its placeholder in the journal).
        if self._dev_count >= self.device_stats_bound:
            self.flush_device_stats()

    saving_entry = None  # the entry whose tensors are saved as files now

    def _begin_entry(self, entry):
        if self.may_save:
            self.saving_entry = entry if self.cfg.saves_tensors(entry) else None
