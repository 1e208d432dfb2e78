"""API calls (levels L1 and mix): how torch's APIs reach the recorder, and what it records of
each call.

Calls are seen through a ``TorchFunctionMode`` (``_Mode``) and, where the mode alone cannot see
the call as the script made it, through wrappers set in torch's namespaces (``_patch_namespaces``).
Each recorded call goes through ``ApiHooks.call_api``: its counter, msprobe's filters (scope,
list, risk level), the inputs before it runs, the outputs after, and a hook on the outputs'
autograd node for the backward entry. The APIs outside torch's Python namespaces (torch_npu,
``torch.ops``) are wrapped by _ops_hooks.py and go through the same ``call_api``.
"""
import types
from typing import Any, List, Tuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import _api_lists
from . import _ops_hooks
from ._reentry import busy as _busy
from ._reentry import set_busy as _set_busy
from ._reentry import tls as _tls
from .risk import is_recorded_at


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


# Two kinds of hooked APIs need a wrapper in their namespace rather than the mode alone:
# * operators reach __torch_function__ as the plain method (x * y arrives as Tensor.mul), so a
#   C-level dunder is wrapped to leave its name for the very next intercepted call;
# * Python-level functions (F.layer_norm, F.softmax...) reach it with their arguments rewritten
#   by handle_torch_function, so they are wrapped to record the caller's own arguments.
_PATCHED: List[Tuple[Any, str, Any]] = []  # (namespace, attribute, original)


def _make_hint_wrapper(orig, name):
    def wrapper(*args, **kwargs):
        _tls.hint = name
        try:
            return orig(*args, **kwargs)
        finally:
            _tls.hint = None

    wrapper.__name__ = name
    wrapper.__qualname__ = "Tensor." + name
    return wrapper


def _make_api_wrapper(orig, api):
    def wrapper(*args, **kwargs):
        rec = _ACTIVE[0]
        if rec is None or not rec.api_enabled or _busy():
            return orig(*args, **kwargs)
        return rec.call_api(api, orig, args, kwargs, inner_busy=True)

    wrapper.__name__ = getattr(orig, "__name__", api[1])
    wrapper.__qualname__ = getattr(orig, "__qualname__", api[1])
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig
    return wrapper


_ACTIVE = [None]  # the recorder the namespace wrappers report to


def _patch_namespaces():
    if _PATCHED:
        return
    targets = [(torch.Tensor, _api_lists.TENSOR, "Tensor"), (torch, _api_lists.TORCH, "Torch"),
               (F, _api_lists.FUNCTIONAL, "Functional")]
    for ns, names, prefix in targets:
        for name in names:
            orig = getattr(ns, name, None)
            if orig is None or not callable(orig):
                continue
            if isinstance(orig, types.FunctionType):
                wrapper = _make_api_wrapper(orig, (prefix, name))
            elif prefix == "Tensor" and name.startswith("__") and name.endswith("__"):
                wrapper = _make_hint_wrapper(orig, name)
            else:
                continue
            _PATCHED.append((ns, name, orig))
            setattr(ns, name, wrapper)


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
        hint = getattr(_tls, "hint", None)
        if hint is not None:
            _tls.hint = None
        rec = self.rec
        if _busy() or not rec.api_enabled:
            if rec.async_storages:
                rec._guard_writes(func, args, kwargs)
            return func(*args, **kwargs)
        if hint is not None:
            api = ("Tensor", hint)
        else:
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
        return rec.call_api(api, func, args, kwargs)


def _first_tensor(v):
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (list, tuple)):
        for x in v:
            t = _first_tensor(x)
            if t is not None:
                return t
    return None


class ApiHooks:
    """The recorder's API part (a mixin of ``Recorder``)."""

    mode = None  # the _Mode while APIs are hooked

    def hook_apis(self):
        """Sets the namespace wrappers (once per process) and enters the mode."""
        if self.mode is not None:
            return
        api_map()
        _patch_namespaces()
        _ops_hooks.install(self.cfg)
        _ACTIVE[0] = self
        self.mode = _Mode(self)
        self.mode.__enter__()

    def unhook_apis(self):
        """Leaves the mode (the namespace wrappers stay: disabled, they cost one test)."""
        if self.mode is not None:
            mode, self.mode = self.mode, None
            try:
                mode.__exit__(None, None, None)
            except Exception:  # popped by someone else already
                pass

    def call_api(self, api, func, args, kwargs, inner_busy=False):
        prefix, name = api
        if self.async_jobs:
            self._reap()
        key = prefix + "." + name
        n = self.counters.get(key, 0)
        self.counters[key] = n + 1
        entry = f"{key}.{n}.forward"
        cfg = self.cfg
        parent = self.module_stack[-1] if self.module_stack else None
        if cfg.level == "mix" and cfg.extra_info:
            _set_busy(True)
            try:
                self.session.construct(entry, parent)
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
            self._begin_entry(entry)
            if "forward" in modes and "input" in modes:
                body = {
                    "input_args": [self.value(a, entry, ("input", i)) for i, a in enumerate(args)],
                    "input_kwargs": {k: self.value(v, entry, ("kwargs", k), k)
                                     for k, v in kwargs.items()},
                }
                self._entry(entry, body)
            if "forward" in modes and cfg.extra_info:
                self._record_stack(entry, *self.stack(getattr(func, "__code__", None)))
        finally:
            _set_busy(False)
        if self.async_storages:
            self._guard_writes(func, args, kwargs)
        out = self._run(func, args, kwargs, inner_busy)
        _set_busy(True)
        try:
            self._begin_entry(entry)
            if "forward" in modes and "output" in modes:
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                body = {"output": [self.value(o, entry, ("output", i)) for i, o in enumerate(outs)]}
                self._entry(entry, body)
            if "backward" in modes and torch.is_grad_enabled():
                self._hook_backward(f"{key}.{n}.backward", prefix, name, out, args, kwargs)
        finally:
            _set_busy(False)
        return out

    @staticmethod
    def _run(func, args, kwargs, inner_busy):
        # Called from a namespace wrapper the mode is still active: the busy flag keeps the
        # API's own torch calls from being recorded as nested APIs.
        if not inner_busy:
            return func(*args, **kwargs)
        _set_busy(True)
        try:
            return func(*args, **kwargs)
        finally:
            _set_busy(False)

    def api_selected(self, name, entry):
        cfg = self.cfg
        if cfg.scope or cfg.list:
            return self.selected(entry)
        return is_recorded_at(name, cfg.risk_level)

    def _hook_backward(self, entry, prefix, name, out, args, kwargs, construct_only=False):
        t = _first_tensor(out)
        if t is None or not t.requires_grad or t.grad_fn is None:
            return
        if prefix == "Functional" and name == "dropout":
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            if p == 0:
                return
        rec = self

        def hook(grad_inputs, grad_outputs):
            if not rec.enabled or rec.session is None:
                return
            _set_busy(True)
            try:
                if rec.cfg.level == "mix" and rec.cfg.extra_info:
                    parent = rec.bwd_stack[-1] if rec.bwd_stack else None
                    rec.session.construct(entry, parent)
                if construct_only:
                    return
                # list/scope decide when the backward runs (a scope may have closed by then).
                if (rec.cfg.list or rec.cfg.scope) and not rec.selected(entry):
                    return
                rec._begin_entry(entry)
                body = {}
                if "input" in rec.cfg.modes:
                    body["input"] = [rec.value(g, entry, ("input", i))
                                     for i, g in enumerate(grad_outputs)]
                if "output" in rec.cfg.modes:
                    body["output"] = [rec.value(g, entry, ("output", i))
                                      for i, g in enumerate(grad_inputs)]
                rec._entry(entry, body)
            finally:
                _set_busy(False)

        t.grad_fn.register_hook(hook)
