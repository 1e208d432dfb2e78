"""Captures a MindSpore PyNative run into msprobe's MindSpore dump flavour.

What is hooked, and under which names, follows msprobe 26.2 on the same script:
- APIs of `mindspore.ops` (Functional), `Tensor` methods (Tensor), `mint` (Mint),
  `mint.nn.functional` (MintFunctional) and the distributed namespaces, by replacing the
  module/class attributes when the debugger is created (L1, mix), as msprobe does; only the
  outermost of nested API calls is recorded, and only between start() and stop().
- Primitive attributes of the model's cells (`Primitive.{attr}.{Class}.{n}`, L1/mix, only when
  `start(model)` got a model); their counter advances on every call, recorded or not.
- `mindspore.jit` functions through the jit executor (`Jit.{name}.{n}.forward`, L1/mix).
- Sub-cells of the model through forward (pre-)hooks (`Cell.{path}.{Class}.forward.{n}`, L0/mix)
  and their parameters' gradients (`….parameters_grad.{k}`).
Backward entries use MindSpore's cell backward-hook operator around each recorded call, so
`input` holds the gradients of the outputs and `output` those of the inputs.

The entries go to numprobe's Rust journal (`numprobe._native.Session`), so a killed run keeps
everything recorded before the kill (`numprobe recover`); the Rust core also computes each
tensor's statistics and CRC-32 with msprobe's MindSpore rules, reading the `asnumpy()` buffer in
place.
"""
import atexit
import linecache
import os
import sys
import threading
import types
from collections import OrderedDict, defaultdict
from typing import Any, Dict, List, Tuple

import numpy as np
import mindspore as ms
from mindspore import Tensor, mint, ops
from mindspore.common.api import _pynative_executor
from mindspore.ops.operations import _inner_ops as inner
from mindspore.ops.primitive import Primitive

try:
    from mindspore._c_expression.typing import Number as _MsNumber
except ImportError:  # pragma: no cover - older MindSpore
    _MsNumber = ()

from .._scope import DumpScope
from .._session import StepSession
from . import _api_lists

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_tls = threading.local()
_active = [None]  # the recorder the API wrappers report to
_param_hooks: Dict[str, Any] = {}  # parameter-gradient hook handles by '{cell}.{param}'
_BUILTINS = (bool, int, float, str, slice, type(Ellipsis))
_DIFFERENTIABLE = ("Float", "BFloat", "Complex")


def _busy():
    return getattr(_tls, "busy", 0)


class _Busy:
    """Marks this thread as inside numprobe or inside a recorded API, so nested calls pass."""

    def __enter__(self):
        _tls.busy = _busy() + 1

    def __exit__(self, *exc):
        _tls.busy -= 1


def _differentiable(x):
    return isinstance(x, Tensor) and str(x.dtype).startswith(_DIFFERENTIABLE)


def _grad_recording():
    return _pynative_executor.requires_grad()


def _namespaces():
    """(prefix, owner object, names) for every API namespace msprobe wraps."""
    spaces = [("Functional", ops, _api_lists.OPS), ("Tensor", Tensor, _api_lists.TENSOR),
              ("Mint", mint, _api_lists.MINT)]
    try:
        from mindspore.mint.nn import functional as mint_functional

        spaces.append(("MintFunctional", mint_functional, _api_lists.MINT_FUNCTIONAL))
    except ImportError:
        pass
    try:
        from mindspore.communication import comm_func

        spaces.append(("Distributed", comm_func, _api_lists.COMM_FUNC))
    except ImportError:
        pass
    try:
        from mindspore.mint import distributed as mint_distributed

        spaces.append(("MintDistributed", mint_distributed, _api_lists.MINT_DISTRIBUTED))
    except ImportError:
        pass
    try:
        from mindspore.common._stub_tensor import StubTensor

        spaces.append(("Tensor", StubTensor, _api_lists.TENSOR))
    except ImportError:
        pass
    return spaces


def _resolve(owner, dotted):
    if "." in dotted:
        sub, attr = dotted.rsplit(".", 1)
        owner = getattr(owner, sub, None)
        if owner is None:
            return None, None
        return owner, attr
    return owner, dotted


def _make_api_wrapper(orig, key):
    def numprobe_api(*args, **kwargs):
        rec = _active[0]
        if rec is None or not rec.running or _busy():
            return orig(*args, **kwargs)
        return rec.run_api(key, orig, args, kwargs)

    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(numprobe_api, attr, getattr(orig, attr))
        except (AttributeError, TypeError):
            pass
    numprobe_api._numprobe_orig = orig
    return numprobe_api


_installed: List[Tuple[Any, str, Any]] = []  # (owner, attr, original) of every replaced API


def install_api_wrappers():
    if _installed:
        return
    seen = set()
    for prefix, owner, names in _namespaces():
        for dotted in names:
            target, attr = _resolve(owner, dotted)
            if target is None or attr not in dir(target):
                continue
            orig = getattr(target, attr, None)
            if not callable(orig) or getattr(orig, "_numprobe_orig", None) is not None:
                continue
            if (id(target), attr) in seen:
                continue
            seen.add((id(target), attr))
            key = f"{prefix}.{attr}."
            try:
                setattr(target, attr, _make_api_wrapper(orig, key))
            except (AttributeError, TypeError):
                continue
            _installed.append((target, attr, orig))


def uninstall_api_wrappers():
    while _installed:
        target, attr, orig = _installed.pop()
        setattr(target, attr, orig)


def _current_rank():
    try:
        from mindspore.communication import GlobalComm, get_rank

        if GlobalComm.INITED:
            return get_rank()
    except Exception:  # noqa: BLE001 - no communication package: single process
        pass
    return None


def _stack_frames():
    frames = []
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not path.startswith(_PKG_DIR):
            line = linecache.getline(path, f.f_lineno).strip()
            if line:
                frames.append(f"File {path}, line {f.f_lineno}, in {f.f_code.co_name}, \n {line}")
        f = f.f_back
    return frames


class Recorder(StepSession):
    framework = "mindspore"
    # msprobe's MindSpore flavour (numprobe._session.StepSession says how the other differs).
    absolute_dump_path = True
    data_dir_with_tensor_list = False
    module_prefix = "Cell."

    def __init__(self, cfg):
        super().__init__(cfg)
        self.running = False
        self.models_hooked = set()
        # Built once, like msprobe's: an open range stays open into the next step.
        self.scope = DumpScope.build(cfg.scope, cfg.list, cfg.level)
        self._reset_counters()
        if cfg.level in ("L1", "mix"):
            # At creation, as msprobe does: a function stored as an attribute after this (say
            # TransformerEncoderLayer's `self.activation = ops.relu`) is the wrapper, and its
            # calls are recorded like msprobe's; the wrappers record only while running.
            _active[0] = self
            install_api_wrappers()
            _install_jit_probe()
        atexit.register(self.close)

    # -- step and session ------------------------------------------------------------------
    def _reset_counters(self):
        self.api_counts = defaultdict(int)
        self.prim_counts = {}
        self.cell_counts = {}
        self.jit_counts = {}
        self.grad_calls = {}
        self.keep = []  # hook dictionaries (CellBackwardHook holds them weakly)
        self.cell_stack = []  # forward and backward cells now running, innermost last
        self.cells_with_backward = set()  # Cells whose backward entry got data this step

    def current_rank(self):
        return _current_rank()

    def session_options(self):
        # msprobe 26.2 has no XOR checksum for MindSpore: `_tensor` writes those records itself.
        return {"summary_mode": "md5" if self.cfg.summary_mode == "md5" else "statistics"}

    def start(self, model):
        _active[0] = self
        level = self.cfg.level
        if level in ("L1", "mix"):
            install_api_wrappers()
            _install_jit_probe()
        if model is not None:
            models = model if isinstance(model, (list, tuple)) else [model]
            for i, m in enumerate(models):
                if id(m) in self.models_hooked:
                    continue
                self.models_hooked.add(id(m))
                index = f"{i}." if isinstance(model, (list, tuple)) else ""
                if level in ("L1", "mix"):
                    self._hook_primitives(m)
                if level in ("L0", "mix"):
                    self._hook_cells(m, index)
        elif level == "L0" and not self.models_hooked:
            raise ValueError('a model is needed when level is "L0" or "mix"')
        self.running = self.ensure_session()

    def stop(self):
        self.running = False
        if self.session is not None:
            self.session.write_json()

    def end_step(self):
        self.running = False
        self.next_step()
        self._reset_counters()

    def close(self):
        self.running = False
        self.close_session()

    # -- filters ---------------------------------------------------------------------------
    def _collect(self, name):
        """msprobe's scope/list filter at one collect point (the scope is stateful: call this
        exactly where msprobe checks, whatever `data_mode` and `task` say)."""
        return self.scope is None or self.scope.check(name)

    def _want(self, name):
        if self.session is None:
            return False
        keep = self._collect(name)
        return keep and self.cfg.task != "structure"

    def _want_output(self, name, input_recorded):
        """Whether a forward output is recorded (its own collect point under a scope)."""
        if self.scope is None:
            return input_recorded
        return self._want(name) and "forward" in self.cfg.modes

    def _begin_cell(self, name):
        if self.scope is not None:
            self.scope.begin_cell(name)

    def _end_cell(self, name):
        if self.scope is not None:
            self.scope.end_cell(name)

    # -- records ---------------------------------------------------------------------------
    @staticmethod
    def _host_array(t, dtype_name):
        """The C-contiguous `asnumpy()` buffer msprobe reads (bf16/float8 as a float32 copy)."""
        if dtype_name == "BFloat16" or dtype_name.startswith("Float8"):
            t = t.astype(ms.float32)  # msprobe's statistics, checksum and file use this copy
        arr = t.asnumpy()
        if not arr.flags.c_contiguous:  # (np.ascontiguousarray would turn 0-dim into 1-dim)
            arr = np.ascontiguousarray(arr).reshape(arr.shape)
        return arr

    def _save(self, arr, fname):
        # The Rust writer thread writes what np.save would; the call copies the bytes.
        self.session.save_tensor(os.path.join(self.tensor_dir, fname), arr.ctypes.data,
                                 arr.nbytes, arr.dtype.str, list(arr.shape))

    def _tensor(self, t, file_base):
        dtype_name = str(t.dtype)
        fname = None if file_base is None else f"{file_base}.npy"
        if self.cfg.summary_mode == "xor":
            # msprobe 26.2 has no XOR checksum for MindSpore: its records hold "md5": null.
            rec = {"type": "mindspore.Tensor", "dtype": dtype_name, "shape": list(t.shape),
                   "md5": None}
            if fname is not None:
                self._save(self._host_array(t, dtype_name), fname)
                rec["data_name"] = fname
            return rec
        arr = self._host_array(t, dtype_name)
        if fname is not None:
            self._save(arr, fname)
        # Statistics and CRC-32 with MindSpore's rules, read in place by the Rust core (the
        # session's framework is "mindspore"); `arr` stays alive for both calls.
        return self.session.tensor(arr.ctypes.data, arr.nbytes, dtype_name, list(arr.shape),
                                   None, fname)

    def _value(self, x, path, file_base, depth=0):
        """A record of `x`; `path` is the key path used in tensor file names."""
        if depth > 400:
            raise ValueError("value nested deeper than 400 levels")
        if path and path[-1] == "dtype" and not isinstance(x, (list, tuple, dict)):
            return {"type": "mindspore.dtype", "value": str(x)}
        if isinstance(x, _BUILTINS):
            if isinstance(x, slice):
                vals = []
                for v in (x.start, x.stop, x.step):
                    try:
                        vals.append(None if v is None else int(v))
                    except (TypeError, ValueError):
                        vals.append(None)
                return {"type": "slice", "value": vals}
            return {"type": type(x).__name__, "value": "..." if x is Ellipsis else x}
        if isinstance(x, Tensor):
            fb = None
            if file_base is not None:
                fb = ".".join([file_base] + [str(p) for p in path])
            return self._tensor(x, fb)
        if _MsNumber and isinstance(x, _MsNumber):
            return {"type": "mindspore.dtype", "value": str(x)}
        if isinstance(x, np.generic):
            return {"type": type(x).__name__, "value": x.item()}
        if isinstance(x, np.ndarray):
            rec = {"type": "numpy.ndarray", "dtype": str(x.dtype), "shape": list(x.shape),
                   "Max": None, "Min": None, "Mean": None, "Norm": None}
            if x.size and x.dtype.kind not in "US":
                rec.update(Max=np.max(x).item(), Min=np.min(x).item(), Mean=np.mean(x).item(),
                           Norm=np.linalg.norm(x).item())
            return rec
        if isinstance(x, (list, tuple)):
            if hasattr(x, "_fields"):
                return {k: self._value(v, path + [k], file_base, depth + 1)
                        for k, v in zip(x._fields, x)}
            return [self._value(v, path + [i], file_base, depth + 1) for i, v in enumerate(x)]
        if isinstance(x, dict):
            return {str(k): self._value(v, path + [k], file_base, depth + 1) for k, v in x.items()}
        return None

    def _file_base(self, name, category):
        if self.cfg.saves_tensors(name):
            return f"{name}.{category}"
        return None

    def _forward_input(self, name, args, kwargs):
        modes = self.cfg.modes
        if self.session is None or not self._collect(name):
            return False
        if self.cfg.task == "structure" or "forward" not in modes:
            # msprobe writes the call stack of every forward it collects, even when task
            # structure or data_mode leaves no data for it.
            if self.cfg.extra_info:
                self.session.stack(name, _stack_frames())
            return False
        body = {}
        if "input" in modes:
            fb = self._file_base(name, "input")
            kb = self._file_base(name, "kwargs")
            body["input_args"] = [self._value(a, [i], fb) for i, a in enumerate(args)]
            body["input_kwargs"] = {str(k): self._value(v, [k], kb) for k, v in kwargs.items()}
        if body or "output" in modes:
            self.session.entry(name, body)
            if self.cfg.extra_info:
                self.session.stack(name, _stack_frames())
            return True
        return False

    def _forward_output(self, name, output, params=None, reinsert=False):
        if "output" not in self.cfg.modes:
            # msprobe then adds nothing: no "parameters" key, and a Cell is not moved.
            return
        outs = list(output) if isinstance(output, (tuple, list)) else [output]
        fb = self._file_base(name, "output")
        body = {"output": [self._value(o, [i], fb) for i, o in enumerate(outs)]}
        if params is not None:
            pb = self._file_base(name, "parameters")
            body["parameters"] = {k: self._value(v, [k], pb) for k, v in params.items()}
        self.session.entry(name, body, reinsert)

    def _record_backward(self, name, grads_of_outputs, grads_of_inputs, parent=True):
        if parent:
            self._construct(name, self._api_parent())
        modes = self.cfg.modes
        if not self._want(name) or "backward" not in modes:
            return False
        with _Busy():
            body = {}
            if "input" in modes:
                fb = self._file_base(name, "input")
                body["input"] = [self._value(g, [i], fb) for i, g in enumerate(grads_of_outputs)]
            if "output" in modes:
                fb = self._file_base(name, "output")
                body["output"] = [self._value(g, [i], fb) for i, g in enumerate(grads_of_inputs)]
            if body:
                self.session.entry(name, body)
        return bool(body)

    def _construct(self, name, parent):
        if self.session is None or not self.cfg.extra_info or self.cfg.level not in ("L0", "mix"):
            return
        super()._construct(name, parent)

    # -- backward hooks --------------------------------------------------------------------
    def _bw_hook(self, name, cell, fn, pre):
        d = OrderedDict()
        d[name] = fn
        self.keep.append(d)
        h = inner.CellBackwardHook(name, cell, d)
        if pre:
            h.register_backward_pre_hook()
        else:
            h.register_backward_hook()
        return h

    def _wrap_backward(self, name, cell, args):
        """Hooks the differentiable inputs of a call; returns (new args, hook or None)."""
        if not _grad_recording() or not any(_differentiable(a) for a in args):
            return args, None

        def on_inputs(_cell, grad_inputs, grad_outputs):
            self._record_backward(name, grad_outputs, grad_inputs)

        bw = self._bw_hook(name, cell, on_inputs, False)
        return bw(tuple(args)), bw

    def _wrap_backward_out(self, name, cell, output, bw):
        if bw is not None:
            output = bw(output)
        if not _grad_recording():
            return output
        if bw is None:
            def on_outputs(_cell, grad_outputs):
                self._record_backward(name, grad_outputs, ())

            output = self._bw_hook(name, cell, on_outputs, True)(output)
        return output

    # -- APIs ------------------------------------------------------------------------------
    def _api_parent(self):
        return self.cell_stack[-1] if self.cell_stack else None

    def run_api(self, key, orig, args, kwargs):
        with _Busy():
            n = self.api_counts[key]
            fwd = f"{key}{n}.forward"
            bwd = f"{key}{n}.backward"
            args, bw = self._wrap_backward(bwd, None, args)
            self._construct(fwd, self._api_parent())
            recorded = self._forward_input(fwd, args, kwargs)
            out = orig(*args, **kwargs)
            if self._want_output(fwd, recorded):
                self._forward_output(fwd, out)
            self.api_counts[key] += 1
            out = self._wrap_backward_out(bwd, None, out, bw)
        return out

    # -- primitives ------------------------------------------------------------------------
    def _hook_primitives(self, model):
        found = {}
        for _, cell in model.cells_and_names():
            for attr, value in vars(cell).items():
                if isinstance(value, Primitive):
                    found.setdefault((attr, id(value)), (attr, value))
        for attr, prim in found.values():
            self._wrap_primitive(prim, f"{attr}.{type(prim).__name__}")

    def _wrap_primitive(self, prim, pname):
        rec = self
        cls = type(prim)
        orig_call = cls.__call__

        def __call__(prim_self, *args, **kwargs):
            r = _active[0]
            if r is not rec:
                return orig_call(prim_self, *args, **kwargs)
            return rec.run_primitive(pname, orig_call, prim_self, args, kwargs)

        prim.__class__ = type(cls.__name__, (cls,), {"__call__": __call__})

    def run_primitive(self, pname, orig_call, prim, args, kwargs):
        n = self.prim_counts.get(pname, -1) + 1
        self.prim_counts[pname] = n
        if not self.running or getattr(_tls, "recording", False):
            return orig_call(prim, *args, **kwargs)
        base = f"Primitive.{pname}.{n}"
        fwd, bwd = f"{base}.forward", f"{base}.backward"
        grads_in, grads_out = [], []

        def on_input_grad(grad):
            grads_in.extend(grad if isinstance(grad, tuple) else (grad,))
            self._record_backward_part(bwd, "output", grads_in)

        def on_output_grad(grad):
            grads_out.extend(grad if isinstance(grad, tuple) else (grad,))
            self._record_backward_part(bwd, "input", grads_out)

        args = tuple(ops.HookBackward(on_input_grad)(a) if isinstance(a, Tensor) else a
                     for a in args)
        _tls.recording = True
        try:
            self._construct(fwd, self._api_parent())
            recorded = self._forward_input(fwd, args, kwargs)
        finally:
            _tls.recording = False
        out = orig_call(prim, *args, **kwargs)
        _tls.recording = True
        try:
            recorded = self._want_output(fwd, recorded)
        finally:
            _tls.recording = False
        if recorded:
            _tls.recording = True
            try:
                self._forward_output(fwd, out)
            finally:
                _tls.recording = False
        if isinstance(out, Tensor):
            out = ops.HookBackward(on_output_grad)(out)
        elif isinstance(out, tuple):
            out = tuple(ops.HookBackward(on_output_grad)(o) if isinstance(o, Tensor) else o
                        for o in out)
        return out

    def _record_backward_part(self, name, key, grads):
        self._construct(name, self._api_parent())
        if not self._want(name) or "backward" not in self.cfg.modes or key not in self.cfg.modes:
            return
        _tls.recording = True
        try:
            with _Busy():
                fb = self._file_base(name, key)
                self.session.entry(name, {key: [self._value(g, [i], fb)
                                                for i, g in enumerate(grads)]})
        finally:
            _tls.recording = False

    # -- jit -------------------------------------------------------------------------------
    def record_jit(self, name, args, out):
        if not self.running or self.session is None or self.cfg.task not in ("statistics", "tensor"):
            return
        _jit_seen[0] = True
        n = self.jit_counts.get(name, -1) + 1
        self.jit_counts[name] = n
        fwd = f"Jit.{name}.{n}.forward"
        with _Busy():
            self._construct(fwd, self._api_parent())
            if self._forward_input(fwd, args, {}):
                self._forward_output(fwd, out)

    # -- cells -----------------------------------------------------------------------------
    def _hook_cells(self, model, index):
        for name, cell in model.cells_and_names():
            if cell is model or not name:
                continue
            prefix = f"Cell.{index}{name}.{type(cell).__name__}."
            # With keyword arguments, as msprobe registers it: they go to `input_kwargs`.
            cell.register_forward_pre_hook(self._cell_pre_hook(prefix), with_kwargs=True)
            cell.register_forward_hook(self._cell_post_hook(prefix))

    def _cell_pre_hook(self, prefix):
        def pre(cell, args, kwargs):
            if not self.running:
                return None
            with _Busy():
                n = self.cell_counts.get(prefix, -1) + 1
                self.cell_counts[prefix] = n
                fwd = f"{prefix}forward.{n}"
                bwd = f"{prefix}backward.{n}"
                self._construct(fwd, self._api_parent())
                self.cell_stack.append(fwd)
                self._begin_cell(fwd)
                recorded = self._forward_input(fwd, args, kwargs)
                cell._numprobe_in = recorded
                new_args, bw = self._wrap_cell_backward(bwd, cell, args)
                cell._numprobe_bw = bw
            return (new_args, kwargs) if bw is not None else None

        return pre

    def _wrap_cell_backward(self, name, cell, args):
        if not _grad_recording() or not any(_differentiable(a) for a in args):
            return args, None

        def on_inputs(_cell, grad_inputs, grad_outputs):
            self._record_cell_backward(name, grad_outputs, grad_inputs)
            # The innermost open Cell closes whatever its name, as in msprobe: a backward
            # scope whose own hook came out of order never stays open for later entries.
            if self.cell_stack:
                self.cell_stack.pop()

        bw = self._bw_hook(name, cell, on_inputs, False)
        return bw(tuple(args)), bw

    def _cell_post_hook(self, prefix):
        def post(cell, args, output):
            n = self.cell_counts.get(prefix)
            fwd = f"{prefix}forward.{n}"
            if not self.running or n is None or not self.cell_stack or self.cell_stack[-1] != fwd:
                return None
            with _Busy():
                self.cell_stack.pop()
                self._flush_nodes()
                self._end_cell(fwd)
                bwd = f"{prefix}backward.{n}"
                params = {k.split(".")[-1]: v for k, v in cell.parameters_dict(recurse=False).items()}
                if self.cfg.task != "structure" and "backward" in self.cfg.modes:
                    # Registered whatever the filter says; the gradient hook decides.
                    self._hook_param_grads(prefix[:-1], params)
                if self._want_output(fwd, getattr(cell, "_numprobe_in", False)):
                    self._forward_output(fwd, output, params, reinsert=True)
                cell._numprobe_in = False
                bw = getattr(cell, "_numprobe_bw", None)
                cell._numprobe_bw = None
                if bw is not None:
                    output = bw(output)
                if _grad_recording():
                    # The cell's backward brackets the backward entries recorded inside it,
                    # which name it as their construct.json parent (as msprobe does).
                    def on_outputs(_cell, grad_outputs):
                        self._construct(bwd, self._api_parent())
                        self._begin_cell(bwd)
                        if bw is None:
                            self._record_cell_backward(bwd, grad_outputs, ())
                        else:
                            self.cell_stack.append(bwd)

                    output = self._bw_hook(bwd, cell, on_outputs, True)(output)
            return output

        return post

    def _record_cell_backward(self, name, grads_of_outputs, grads_of_inputs):
        self._flush_nodes()
        if self._record_backward(name, grads_of_outputs, grads_of_inputs, parent=False):
            # A Cell with backward data keeps its parameter gradients whatever the scope says.
            self.cells_with_backward.add(name.rsplit(".", 2)[0])
        self._end_cell(name)

    def _hook_param_grads(self, owner, params):
        # Re-registered at every forward, as msprobe does: MindSpore runs a parameter's hooks
        # in registration order relative to the graph, which fixes where the entry lands.
        for pname, p in params.items():
            if not getattr(p, "requires_grad", False):
                continue
            old = _param_hooks.pop(f"{owner}.{pname}", None)
            if old is not None:
                old.remove()
            _param_hooks[f"{owner}.{pname}"] = p.register_hook(self._param_grad_hook(owner, pname))

    def _param_grad_hook(self, owner, pname):
        def hook(grad):
            if self.session is None:
                return None
            state = self.grad_calls.get(owner)
            if state is None:
                state = self.grad_calls[owner] = [0, pname]
            elif state[1] == pname:
                state[0] += 1
            name = f"{owner}.parameters_grad.{state[0]}"
            # msprobe checks the Cell's name here (not the entry's), and keeps the gradients
            # of a Cell whose backward was recorded.
            keep = self._collect(owner) or owner in self.cells_with_backward
            if not keep:
                # A gradient refused here drops the whole entry of this call number, with
                # the gradients of the Cell's other parameters that were kept before it
                # (msprobe's rule: a scope closing between a Cell's parameter gradients).
                if self.session.has_entry(name):
                    self.session.remove(name)
            elif self.cfg.task != "structure":
                with _Busy():
                    fb = f"{name}" if self.cfg.saves_tensors(name) else None
                    rec = self._value(grad, [pname], fb)
                    # An update of a Cell entry moves it to the end, as msprobe's writer
                    # does: the entry lands after the last of its gradients.
                    self.session.entry(name, {pname: [rec]}, True)
            return None

        return hook


    def record_jit_grad(self, name, args):
        """msprobe records a gradient computation as `Jit.{fn}.{n}.backward` (inputs only) once
        any jit function has been dumped in the process; `n` is the forward count, 0 if none."""
        if not self.running or self.session is None or self.cfg.task not in ("statistics", "tensor"):
            return
        n = self.jit_counts.setdefault(name, 0)
        bwd = f"Jit.{name}.{n}.backward"
        with _Busy():
            self._record_backward(bwd, list(args), [None])


# -- jit executor ----------------------------------------------------------------------------
_jit_installed: List[Tuple[Any, str, Any]] = []
_jit_seen = [False]


def _install_jit_probe():
    if _jit_installed:
        return
    api = ms.common.api
    attr = "_MindsporeFunctionExecutor" if hasattr(api, "_MindsporeFunctionExecutor") else "_JitExecutor"
    base = getattr(api, attr, None)
    if base is None:
        return

    class NumprobeJitExecutor(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._numprobe_name = getattr(args[0], "__name__", None) if args else None

        def __call__(self, *args, **kwargs):
            with _Busy():
                out = super().__call__(*args, **kwargs)
            rec = _active[0]
            name = self._numprobe_name
            if rec is not None and args and name and rec.cfg.level in ("L1", "mix"):
                if name == "construct":
                    if isinstance(args[0], ms.nn.Cell):
                        rec.record_jit(type(args[0]).__name__, args, out)
                else:
                    rec.record_jit(name, args, out)
            return out

    setattr(api, attr, NumprobeJitExecutor)
    _jit_installed.append((api, attr, base))

    executor_cls = api._PyNativeExecutor
    orig_grad = executor_cls.grad

    def grad(self, obj, grad_op, weights, grad_position, *args, **kwargs):
        out = orig_grad(self, obj, grad_op, weights, grad_position, *args, **kwargs)
        rec = _active[0]
        if rec is not None and _jit_seen[0] and rec.cfg.level in ("L1", "mix"):
            if isinstance(obj, types.FunctionType):
                rec.record_jit_grad(obj.__name__, args)
            elif isinstance(obj, ms.nn.Cell):
                rec.record_jit_grad(type(obj).__name__, args)
        return out

    executor_cls.grad = grad
