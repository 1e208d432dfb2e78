"""API calls (levels L1 and mix): how torch's APIs reach the recorder, and what it records of
each call.

Calls are recorded through wrappers set in torch's namespaces (``_patch_namespaces``) when the
debugger is created, as msprobe sets its own; a ``TorchFunctionMode`` (``_Mode``) sees the calls
no wrapper took (recorded only under the ``extra_apis`` opt-in) and guards the statistics
thread's tensors against writes. The mode is on the stack only while it has one of those jobs
(``_want_mode``/``_drop_mode``): with it, every torch call and tensor attribute read of the
script makes a Python round trip (a tenth of a tiny Llama's recorded step). Each recorded
call goes through ``ApiHooks.call_api``: its counter, msprobe's filters (scope, list, risk
level), the inputs before it runs, the outputs after, and a hook on the outputs' autograd
node for the backward entry. In the configuration most runs use (L1, no scope or list, no
tensor files) a wrapper hands the whole call to one native method instead (``ApiCalls.call``,
capture/py/src/api_call.rs), which does the same and calls back here for the rest; both walk
an entry's values natively (``Session.api_input`` and ``api_output``). The APIs outside
torch's Python namespaces (torch_npu, ``torch.ops``) are wrapped by _ops_hooks.py and go
through the same ``call_api``.
"""
import threading
from typing import Any, List, Tuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import _api_lists
from . import _ops_hooks
from . import _torch_shim
from ._reentry import busy as _busy
from ._reentry import set_busy as _set_busy
from ._module_hooks import OPTIMIZER_PHASES
from .risk import CORE, LOW_RISK, is_recorded_at
from .._native import ApiCalls
from .._native import backward_node as _backward_node

_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
_TF_ALL_OFF = getattr(torch._C, "_is_torch_function_all_disabled", None)  # torch 2.4 on
# The torch-function mode stack, to run a recorded API's original without our mode on it.
_MODE_STACK_LEN = torch._C._len_torch_function_stack
_MODE_AT = torch._C._get_function_stack_at
_MODE_POP = torch._C._pop_torch_function_stack
_MODE_PUSH = torch._C._push_on_torch_function_stack


def _build_api_map():
    """callable -> (prefix, api name). Functional wins where torch and functional share one
    object (F.conv2d is torch.conv2d): model code reaches it through F far more often."""
    m = {}

    def add(ns, names, prefix):
        for n in names:
            obj = getattr(ns, n, None)
            if obj is None or not callable(obj):
                continue
            try:
                m[obj] = (prefix, n)
            except TypeError:  # unhashable callables cannot be matched by identity
                pass

    add(torch.Tensor, _api_lists.TENSOR, "Tensor")
    add(torch, _api_lists.TORCH, "Torch")
    add(torch._VF, _api_lists.VF, "VF")
    add(F, _api_lists.FUNCTIONAL, "Functional")
    if torch.distributed.is_available():
        add(torch.distributed, _api_lists.DISTRIBUTED, "Distributed")
    return m


_API_MAP = None


def api_map():
    global _API_MAP
    if _API_MAP is None:
        _API_MAP = _build_api_map()
    return _API_MAP


# Which calls are recorded by default is decided as in msprobe: msprobe replaces each listed
# API in its namespace (torch.Tensor, torch, torch.nn.functional, torch._VF) by a wrapper when
# the PrecisionDebugger is created, so it records exactly the calls that look the API up there
# afterwards. numprobe sets its wrappers at the same moment (``_patch_namespaces``) and records
# what they see. Calls torch hands to the TorchFunctionMode without a wrapper (unary minus
# arriving as Tensor.neg, a function stored before the wrappers were set, as transformers'
# GELUActivation stores F.gelu) are what msprobe cannot see: recorded only under the opt-in
# (``extra_apis``), as ``Extra.{Prefix}.{api}.{n}`` with counters of their own, so no name
# msprobe would write changes.
EXTRA_PREFIX = "Extra."
_PATCHED: List[Tuple[Any, str, Any]] = []  # (namespace, attribute, original)


def _make_api_wrapper(orig, api):
    prefix, name = api
    # Collectives record their arguments after the call as outputs (``_DIST_IGNORE``): the
    # recorder's own path.
    native = prefix != "Distributed"
    # Left out of the call's stack (a Python-level original's own frame).
    code = getattr(orig, "__code__", None)
    key = prefix + "." + name  # the counter's key, made once

    def wrapper(*args, **kwargs):
        rec = _ACTIVE[0]
        if rec is None or not rec.api_enabled or _busy():
            return orig(*args, **kwargs)
        calls = rec.native_calls
        if native and calls is not None and not rec.async_jobs and not rec.async_storages:
            # The common configuration: the whole call recorded by one native call.
            return calls.call(orig, code, prefix, name, key, args, kwargs)
        return rec.call_api(api, orig, args, kwargs, inner_busy=True)

    wrapper.__name__ = getattr(orig, "__name__", api[1])
    wrapper.__qualname__ = getattr(orig, "__qualname__", api[1])
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig
    wrapper._numprobe_api = api
    return wrapper


_ACTIVE = [None]  # the recorder the namespace wrappers report to

# msprobe's built-in ignore rules for torch.distributed (its builtin_ignore_ops.yaml): the
# arguments that are only destinations (an all_gather's output list, a recv's buffer) are
# recorded as null among the inputs, as `isend`'s tensor is among the outputs.
# name -> (input indices, input keyword names, output indices)
_DIST_IGNORE = {
    "recv": ((0,), (), ()),
    "irecv": ((0,), ("tensor",), ()),
    "isend": ((), (), (0,)),
    "all_gather": ((0,), (), ()),
    "gather": ((1,), (), ()),
    "scatter": ((0,), (), ()),
    "reduce_scatter": ((0,), (), ()),
    "_reduce_scatter_base": ((0,), (), ()),
    "_all_gather_base": ((0,), (), ()),
    "all_to_all_single": ((0,), (), ()),
    "all_to_all": ((0,), (), ()),
    "all_gather_into_tensor": ((0,), (), ()),
    "reduce_scatter_tensor": ((0,), (), ()),
}


def _masked(seq, indices):
    return [None if i in indices else v for i, v in enumerate(seq)]


def _dist_namespaces():
    if not torch.distributed.is_available():
        return []
    import torch.distributed.distributed_c10d as c10d
    return [(torch.distributed, _api_lists.DISTRIBUTED, "Distributed"),
            (c10d, _api_lists.DISTRIBUTED, "Distributed")]


def _namespaces():
    """(namespace, listed names, prefix) of the APIs msprobe wraps in torch's namespaces."""
    return [(F, _api_lists.FUNCTIONAL, "Functional"), (torch.Tensor, _api_lists.TENSOR, "Tensor"),
            (torch, _api_lists.TORCH, "Torch"), (torch._VF, _api_lists.VF, "VF")]


def _patch_namespaces():
    """Sets the wrappers (once per process). A dotted name (``linalg.norm``) is wrapped in its
    sub-namespace and recorded under its last part, as msprobe does."""
    if _PATCHED:
        return
    # torch.distributed's functions too (both the package and distributed_c10d, as msprobe):
    # through the mode alone they arrive with every defaulted keyword filled in, and msprobe
    # records the caller's own arguments.
    for ns, names, prefix in _namespaces() + _dist_namespaces():
        for name in names:
            owner, attr = ns, name
            if "." in name:
                sub, attr = name.rsplit(".", 1)
                owner = getattr(ns, sub, None)
                if owner is None:
                    continue
            orig = getattr(owner, attr, None)
            if orig is None or not callable(orig) or isinstance(orig, type):
                continue
            _PATCHED.append((owner, attr, orig))
            setattr(owner, attr, _make_api_wrapper(orig, (prefix, attr)))


def _unpatch_namespaces():
    while _PATCHED:
        ns, name, orig = _PATCHED.pop()
        setattr(ns, name, orig)
    _ops_hooks.uninstall()


class _Mode(TorchFunctionMode):
    def __init__(self, rec):
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        rec = self.rec
        if _busy():
            # Inside a recorded call (a wrapper handed over `func` may be, and passes through).
            if rec.async_storages:
                rec._guard_writes(func, args, kwargs)
            return func(*args, **kwargs)
        # torch names the function it dispatches by looking it up in its namespace, so a call
        # no wrapper took (an operator slot such as unary minus, or a stored original Python
        # function) can arrive here as the wrapper: run the original, as msprobe's run does.
        api = getattr(func, "_numprobe_api", None)
        if api is not None:
            func = func.__wrapped__
        if not rec.api_enabled or not rec.extra_apis:
            if rec.async_storages:
                rec._guard_writes(func, args, kwargs)
            return func(*args, **kwargs)
        # A call msprobe does not see, recorded under the opt-in only.
        if api is None:
            try:
                api = _API_MAP.get(func)
            except TypeError:
                api = None
        if api is None:
            # Not hooked. torch pops this mode while func runs, so APIs called inside an
            # unhooked Python-level torch function are not seen (re-entering the mode would
            # make the function dispatch to itself again).
            if rec.async_storages:
                rec._guard_writes(func, args, kwargs)
            return func(*args, **kwargs)
        return rec.call_api(api, func, args, kwargs, extra=True)


class ApiHooks:
    """The recorder's API part (a mixin of ``Recorder``)."""

    mode = None  # the _Mode while it is on the torch-function stack
    _mode_thread = None  # the thread whose stack it goes on (the one that called start())

    def wrap_apis(self):
        """Sets the namespace wrappers (once per process): at the debugger's creation, as
        msprobe does, so a function stored from a namespace after it is the wrapper."""
        api_map()
        _patch_namespaces()

    def native_api_calls(self):
        """The native path of the namespace wrappers' calls (capture/py/src/api_call.rs), for
        the configuration it covers: level L1, every data mode, no ``scope``/``list`` filter,
        no tensor files. None for any other (``call_api`` records those)."""
        cfg = self.cfg
        if (cfg.level != "L1" or cfg.scope or cfg.list or self.may_save
                or cfg.task == "structure"
                or not {"forward", "backward", "input", "output"} <= set(cfg.modes)):
            return None
        torch_c = (_NO_TORCH_FUNCTION, _MODE_STACK_LEN, _MODE_AT, _MODE_POP, _MODE_PUSH,
                   torch.is_grad_enabled, torch.nn.Parameter)
        return ApiCalls(self, self.counters, bool(cfg.extra_info), cfg.risk_level, CORE,
                        LOW_RISK, self.device_stats_bound, torch.Tensor, torch_c,
                        self.stack_cache, shim=_torch_shim.load())

    def hook_apis(self):
        """Sets the namespace wrappers (if not yet), and the mode where the opt-in needs it
        from the start."""
        self.wrap_apis()
        _ops_hooks.install(self.cfg)
        _ACTIVE[0] = self
        self._mode_thread = threading.get_ident()
        if self.extra_apis:
            self._want_mode()

    def unhook_apis(self):
        """Leaves the mode (the namespace wrappers stay: disabled, they cost one test)."""
        self._drop_mode(force=True)
        self._mode_thread = None

    def _want_mode(self):
        """Puts the mode on this thread's torch-function stack (if not there yet): for the
        opt-in, and while the statistics thread holds storages. Returns whether it is there
        (not on a thread other than start()'s, whose stack it cannot guard)."""
        if self._mode_thread != threading.get_ident():
            return False
        if self.mode is not None:
            return True
        self.mode = _Mode(self)
        _MODE_PUSH(self.mode)
        return True

    def _drop_mode(self, force=False):
        """Takes the mode off the stack once nothing needs it (`force`: at stop()). Only
        when it is on top: inside its own ``__torch_function__`` torch holds it aside and
        puts it back, and a mode the script entered later stays above it; either way the
        next call that finds it idle takes it off."""
        mode = self.mode
        if mode is None or self._mode_thread != threading.get_ident():
            return
        if not force and (self.extra_apis or self.async_storages):
            return
        n = _MODE_STACK_LEN()
        if n and _MODE_AT(n - 1) is mode:
            _MODE_POP()
            self.mode = None

    def call_api(self, api, func, args, kwargs, inner_busy=False, extra=False):
        prefix, name = api
        if self.async_jobs:
            self._reap()
        if extra:
            # Own names and counters: the calls inside still reach their wrappers and are
            # recorded under msprobe's names (the run below does not set the busy flag).
            prefix = EXTRA_PREFIX + prefix
            counters = self.extra_counters
        else:
            counters = self.counters
        key = prefix + "." + name
        n = counters.get(key, 0)
        counters[key] = n + 1
        entry = f"{key}.{n}.forward"
        cfg = self.cfg
        if cfg.level == "mix" and cfg.extra_info:
            _set_busy(True)
            try:
                self._construct_api(entry)
            finally:
                _set_busy(False)
        if not self.api_selected(name, entry):
            if self.async_storages:
                self._guard_writes(func, args, kwargs)
            out = self._run(func, args, kwargs, inner_busy)
            if cfg.level == "mix" and cfg.extra_info and torch.is_grad_enabled():
                _set_busy(True)
                try:
                    self._hook_backward(f"{key}.{n}.backward", prefix, name, out, args, kwargs,
                                        construct_only=True)
                finally:
                    _set_busy(False)
            return out
        modes = cfg.modes
        _set_busy(True)
        try:
            if self.may_save:
                self._begin_entry(entry)
            ignore = _DIST_IGNORE.get(name, ((), (), ())) if prefix == "Distributed" else None
            stacked = "forward" in modes and cfg.extra_info
            if stacked:
                skey, frames = self.stack(getattr(func, "__code__", None))
                # A call site seen before in this session: its stack reference goes into the
                # journal with the input entry, in one write.
                gid = self.session.site_group(skey)
            if "forward" in modes and "input" in modes and cfg.task != "structure":
                in_args = _masked(args, ignore[0]) if ignore else args
                in_kwargs = ({k: (None if k in ignore[1] else v) for k, v in kwargs.items()}
                             if ignore else kwargs)
                # One native call builds and journals the entry; one context for all the
                # arguments' tensors instead of one each.
                with _NO_TORCH_FUNCTION():
                    if self.session.api_input(entry, in_args, in_kwargs, self,
                                              gid if stacked else None):
                        stacked = False
                self._entry_done()
            if stacked:
                self._record_stack(entry, skey, frames)
        finally:
            _set_busy(False)
        if self.async_storages:
            self._guard_writes(func, args, kwargs)
        out = self._run(func, args, kwargs, inner_busy)
        _set_busy(True)
        try:
            if self.may_save:
                self._begin_entry(entry)
            with _NO_TORCH_FUNCTION():
                if "forward" in modes and "output" in modes and cfg.task != "structure":
                    if ignore is not None:
                        # A collective works in place: msprobe records its arguments after
                        # the call (positional, then the keywords' values) as the outputs.
                        outs = _masked(list(args) + list(kwargs.values()), ignore[2])
                        self.session.lists_entry(entry, [("output", outs)], self)
                    else:
                        self.session.api_output(entry, out, self)
                    self._entry_done()
                if "backward" in modes and torch.is_grad_enabled():
                    self._hook_backward(f"{key}.{n}.backward", prefix, name, out, args, kwargs)
        finally:
            _set_busy(False)
        return out

    def _run(self, func, args, kwargs, inner_busy):
        # Called from a namespace wrapper the mode is still active: the busy flag keeps the
        # API's own torch calls from being recorded as nested APIs.
        if not inner_busy:
            return func(*args, **kwargs)
        _set_busy(True)
        try:
            if self.mode is not None:
                self._drop_mode()
            mode = self.mode
            if mode is not None and not self.async_storages:
                # With the busy flag set the mode only passes calls through (and guards the
                # statistics thread's storages, of which none is pending): run the original
                # with the mode taken off the stack, as torch itself runs a mode's function,
                # instead of a Python round trip through __torch_function__ per torch call.
                # Nothing is recorded meanwhile, so no storage can become pending.
                n = _MODE_STACK_LEN()
                if n and _MODE_AT(n - 1) is mode:
                    _MODE_POP()
                    try:
                        return func(*args, **kwargs)
                    finally:
                        _MODE_PUSH(mode)
            return func(*args, **kwargs)
        finally:
            _set_busy(False)

    def _construct_api(self, entry):
        """An API entry's construct.json node (level mix). Inside an optimizer step or a
        clip_grad function (`optimizer_status`, set by ModuleHooks) its parent is that phase,
        whose own node goes in just before the first such API of the step, as msprobe writes
        them; elsewhere it is the innermost open module."""
        status = self.optimizer_status
        if status in OPTIMIZER_PHASES:
            if status not in self.phases_noted and self.session is not None:
                self.phases_noted.add(status)
                self.session.construct(status, None)
            self._construct(entry, status)
        else:
            self._construct(entry, self.module_stack[-1] if self.module_stack else None)

    def api_selected(self, name, entry):
        cfg = self.cfg
        if cfg.scope or cfg.list:
            return self.selected(entry)
        return is_recorded_at(name, cfg.risk_level)

    def _hook_backward(self, entry, prefix, name, out, args, kwargs, construct_only=False):
        # The output's gradient function, by the rule the native path uses too; read without
        # the mode: each tensor attribute would otherwise go through it.
        tf_off = _TF_ALL_OFF is not None and _TF_ALL_OFF()
        if tf_off:
            grad_fn = _backward_node(out, torch.Tensor, prefix, name, args, kwargs)
        else:
            with _NO_TORCH_FUNCTION():
                grad_fn = _backward_node(out, torch.Tensor, prefix, name, args, kwargs)
        if grad_fn is None:
            return
        rec = self

        def hook(grad_inputs, grad_outputs):
            if not rec.enabled or rec.session is None:
                return
            _set_busy(True)
            try:
                if rec.cfg.level == "mix" and rec.cfg.extra_info:
                    rec._construct_api(entry)
                if construct_only:
                    return
                # list/scope decide when the backward runs (a scope may have closed by then).
                if (rec.cfg.list or rec.cfg.scope) and not rec.selected(entry):
                    return
                rec._begin_entry(entry)
                if rec.cfg.task != "structure":
                    lists = []
                    if "input" in rec.cfg.modes:
                        lists.append(("input", grad_outputs))
                    if "output" in rec.cfg.modes:
                        lists.append(("output", grad_inputs))
                    with _NO_TORCH_FUNCTION():
                        rec.session.lists_entry(entry, lists, rec)
                    rec._entry_done()
            finally:
                _set_busy(False)

        if tf_off:
            grad_fn.register_hook(hook)
        else:
            with _NO_TORCH_FUNCTION():
                grad_fn.register_hook(hook)
