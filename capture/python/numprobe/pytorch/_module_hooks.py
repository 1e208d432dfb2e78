"""Modules (levels L0 and mix): forward, backward and parameter-gradient hooks on every
sub-module of the models given to ``start``, and the optimizer step's and gradient clipping's
nodes in construct.json.

Entries are named as msprobe names them: ``Module.{path}.{Class}.forward.{n}`` (with
``{index}.`` before the path when ``start`` got a list of models), ``….backward.{n}`` and
``….parameters_grad.{k}``.

The backward entry of each forward call comes from a ``BackwardHook`` of that call fed, as
msprobe feeds its own, with only the tensors that take part in the backward (found through
lists, tuples and dicts): torch's full backward hooks would see tuples only, give a None output
a slot and a bool mask a gradient.
"""
import functools
import sys

import torch
import torch.utils.checkpoint
from torch.utils.hooks import BackwardHook

from ._reentry import busy as _busy
from ._reentry import set_busy as _set_busy


# What torch's non-reentrant checkpoint raises to end a recomputation once it has the tensors
# the backward needs: the modules it leaves mid-forward get their forward entry ended with a
# None output, as msprobe ends them (its forward hook runs on this exception).
_STOP_RECOMPUTATION = getattr(torch.utils.checkpoint, "_StopRecomputationError", ())


def _quiet_backward_hook_setup():
    """Full backward module hooks route inputs/outputs through torch's BackwardHookFunction
    (view_as calls); that plumbing is not the user's API, so it runs unrecorded."""
    import torch.utils.hooks as th

    cls = th.BackwardHook
    for meth in ("setup_input_hook", "setup_output_hook"):
        orig = getattr(cls, meth, None)
        if orig is None or getattr(orig, "_numprobe_quiet", False):
            continue

        def make(orig):
            def quiet(*args, **kwargs):
                was = _busy()
                _set_busy(True)
                try:
                    return orig(*args, **kwargs)
                finally:
                    _set_busy(was)

            quiet._numprobe_quiet = True
            return quiet

        setattr(cls, meth, make(orig))


def _grad_tensors(v, out):
    """The tensors of a module's inputs or outputs that take part in the backward, as msprobe
    hands them to its backward hook: tensors requiring grad, found through lists, tuples and
    dicts (a ModelOutput is a dict of its non-None fields; other objects are not searched)."""
    if isinstance(v, torch.Tensor):
        if torch.is_grad_enabled() and v.requires_grad:
            out.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _grad_tensors(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _grad_tensors(x, out)
    return out


def _rebuild(v, it):
    """`v` with each tensor `_grad_tensors` found replaced by the next of `it` (lists and dicts
    in place, as the module's caller may hold them; tuples and namedtuples rebuilt)."""
    if isinstance(v, torch.Tensor):
        if torch.is_grad_enabled() and v.requires_grad:
            t = next(it)
            if t._base is not None:
                # BackwardHookFunction returns views; an in-place write on them by the model
                # (as on the original) must stay allowed.
                meta = torch._C._autograd
                if meta._get_creation_meta(t) != meta.CreationMeta(0):
                    meta._set_creation_meta(t, meta.CreationMeta(0))
            return t
        return v
    if isinstance(v, list):
        for i, x in enumerate(v):
            v[i] = _rebuild(x, it)
        return v
    if isinstance(v, dict):
        for k, x in list(v.items()):
            v[k] = _rebuild(x, it)
        return v
    if isinstance(v, tuple):
        items = [_rebuild(x, it) for x in v]
        return type(v)(*items) if hasattr(v, "_fields") else type(v)(items)
    return v


def _setup_backward(setup, value):
    """Routes the gradient-taking tensors of `value` through one of a BackwardHook's setup
    methods, so the module's backward hook sees exactly those gradients (no slot for a None or
    non-tensor output, none for a bool mask, and dict/ModelOutput outputs included)."""
    tensors = _grad_tensors(value, [])
    if not tensors:
        setup(())
        return value
    return _rebuild(value, iter(setup(tuple(tensors))))


def _backward_hook(module, rec, prefix, n):
    """The BackwardHook of forward call `n` of `module`: its backward entry is
    `{prefix}.backward.{n}`."""
    entry = f"{prefix}.backward.{n}"

    def backward_pre(mod, grad_output):
        if rec.enabled and rec.session is not None:
            # The backward's node goes into construct.json when its gradients arrive, as
            # msprobe's backward pre-hook puts it there: a module whose inputs get no gradient
            # from its outputs (an embedding of positions computed from an input's shape)
            # never reaches `backward` below, yet has its node.
            if rec.cfg.extra_info:
                _set_busy(True)
                try:
                    rec._construct(entry, rec.module_stack[-1] if rec.module_stack else None)
                finally:
                    _set_busy(False)
            rec.module_stack.append(entry)
        return None

    def backward(mod, grad_input, grad_output):
        if rec.module_stack and rec.module_stack[-1] == entry:
            rec.module_stack.pop()
        if not rec.enabled or rec.session is None:
            return None
        if rec.cfg.extra_info:
            rec._flush_nodes()  # a collect point, whether or not the filter keeps the entry
        if not rec.selected(entry):
            return None
        _set_busy(True)
        try:
            rec._begin_entry(entry)
            body = {}
            if "input" in rec.cfg.modes:
                body["input"] = [rec.value(g, entry, ("input", i))
                                 for i, g in enumerate(grad_output)]
            if "output" in rec.cfg.modes:
                body["output"] = [rec.value(g, entry, ("output", i))
                                  for i, g in enumerate(grad_input)]
            rec._entry(entry, body)
            if body:
                rec.modules_with_backward.add(prefix)
        finally:
            _set_busy(False)
        return None

    return BackwardHook(module, [backward], [backward_pre])


#: The phases of a training step msprobe names as construct.json parents of their APIs.
OPTIMIZER_PHASES = ("optimizer", "clip_grad")


def _clip_phase(rec, func):
    """`func` (a gradient clipping function) run as the `clip_grad` phase of `rec`."""
    @functools.wraps(func)
    def clip(*args, **kwargs):
        rec.optimizer_status = "clip_grad"
        try:
            return func(*args, **kwargs)
        finally:
            rec.optimizer_status = ""

    return clip


class ModuleHooks:
    """The recorder's module part (a mixin of ``Recorder``)."""

    def hook_model(self, model):
        """The hooks of level L0/mix on `model` (a module or a list of them)."""
        _quiet_backward_hook_setup()
        self.hook_models(model)
        self.hook_optimizer()

    def hook_optimizer(self):
        """At mix level msprobe marks the optimizer step and gradient clipping in
        construct.json: an `optimizer` or `clip_grad` node, parent of the APIs that phase
        calls (`optimizer_status`, read by ApiHooks._construct_api). Like msprobe's, the
        phase is one value, not a stack: an optimizer whose step clips its gradients calls
        the APIs after the clipping outside any phase."""
        if self.cfg.level != "mix" or getattr(self, "_optim_hooked", False):
            return
        self._optim_hooked = True
        rec = self

        def pre(opt, args, kwargs):
            rec.optimizer_status = "optimizer"

        def post(opt, args, kwargs):
            rec.optimizer_status = ""

        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)

        self.handles.append(register_optimizer_step_pre_hook(pre))
        self.handles.append(register_optimizer_step_post_hook(post))
        # torch.nn.utils' clipping functions, called through that namespace (as msprobe
        # patches them; a script that imported one by name before start() calls the original).
        import torch.nn.utils as nn_utils

        for fname in ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_"):
            orig = getattr(nn_utils, fname, None)
            if orig is not None:
                setattr(nn_utils, fname, _clip_phase(rec, orig))

    def hook_models(self, model):
        models = model if isinstance(model, (list, tuple)) else [model]
        for i, m in enumerate(models):
            if id(m) in self.hooked_models:
                continue
            self.hooked_models.add(id(m))
            index = f"{i}." if isinstance(model, (list, tuple)) else ""
            for path, sub in m.named_modules():
                if path == "":
                    continue
                prefix = f"Module.{index}{path}.{type(sub).__name__}"
                self._hook_module(sub, prefix)

    def _hook_module(self, module, prefix):
        rec = self
        use_backward = "backward" in self.cfg.modes
        calls = []  # per open forward call (LIFO): (entry, BackwardHook or None), or None

        def pre(mod, args, kwargs):
            if not rec.module_enabled or _busy() or rec.session is None:
                calls.append(None)
                return None
            n = rec.module_counters.get(prefix, 0)
            rec.module_counters[prefix] = n + 1
            entry = f"{prefix}.forward.{n}"
            parent = rec.module_stack[-1] if rec.module_stack else None
            rec.module_stack.append(entry)
            _set_busy(True)
            try:
                if rec.cfg.extra_info:
                    rec._construct(entry, parent)
                if rec.selected(entry):
                    rec._begin_entry(entry)
                    if "forward" in rec.cfg.modes and "input" in rec.cfg.modes:
                        rec._entry(entry, {
                            "input_args": [rec.value(a, entry, ("input", i))
                                           for i, a in enumerate(args)],
                            "input_kwargs": {k: rec.value(v, entry, ("kwargs", k), k)
                                             for k, v in kwargs.items()},
                        })
                    if "forward" in rec.cfg.modes and rec.cfg.extra_info:
                        rec._record_stack(entry, *rec.stack())
                if not use_backward:
                    calls.append((entry, None, sys.exc_info()[1]))
                    return None
                bw = _backward_hook(mod, rec, prefix, n)
                calls.append((entry, bw, sys.exc_info()[1]))
                new_args = _setup_backward(bw.setup_input_hook, args)
            finally:
                _set_busy(False)
            return new_args, kwargs

        def post(mod, args, kwargs, out):
            call = calls.pop() if calls else None
            if call is None:
                return None
            entry, bw, handled = call
            if rec.module_stack and rec.module_stack[-1] == entry:
                rec.module_stack.pop()
            # Called on the forward's exception too (`always_call`): an exception other than
            # the one being handled when the call began is the forward's own.
            raised = sys.exc_info()[1]
            raised = raised if raised is not handled else None
            if rec.session is None or (raised is not None
                                       and not isinstance(raised, _STOP_RECOMPUTATION)):
                return None
            _set_busy(True)
            try:
                if rec.module_enabled and rec.cfg.extra_info:
                    rec._flush_nodes()
                if use_backward and torch.is_grad_enabled():
                    rec._hook_param_grads(mod, prefix)
                if rec.module_enabled and rec.selected(entry, entering=False):
                    rec._begin_entry(entry)
                    body = {}
                    if "forward" in rec.cfg.modes and "output" in rec.cfg.modes:
                        body["output"] = rec.outputs(out, entry)
                        body["parameters"] = {
                            pn: rec.value(p, entry, ("parameters", pn))
                            for pn, p in mod.named_parameters(recurse=False)
                        }
                    if body:
                        rec._entry(entry, body, reinsert=True)
                if bw is None or raised is not None:
                    return None
                return _setup_backward(bw.setup_output_hook, out)
            finally:
                _set_busy(False)

        self.handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        try:
            handle = module.register_forward_hook(post, with_kwargs=True, always_call=True)
        except TypeError:  # a torch without `always_call`: the forward's exception skips it
            handle = module.register_forward_hook(post, with_kwargs=True)
        self.handles.append(handle)

    def _hook_param_grads(self, module, prefix):
        """Hooks the gradients of `module`'s own parameters at the end of each of its recorded
        forward calls, as msprobe does: on the parameter's gradient accumulator in this
        step's graph, so a module that was not called (one holding a weight that other
        modules share and call, or one whose weight is used without calling it) records
        none, and a hook lives as long as the graph. A call hooks its parameters again, after
        the hooks other modules sharing them set since (their entries follow that order)."""
        for pname, p in module.named_parameters(recurse=False):
            if p.requires_grad:
                self._hook_param_grad(p, pname, prefix)

    def _hook_param_grad(self, param, pname, prefix):
        rec = self
        key = (prefix, pname)
        node = _grad_accumulator(param)
        if node is None:
            return
        old = self.param_grad_hooks.pop(key, None)
        if old is not None:
            old.remove()  # nothing when the graph it was set on is gone

        def hook(grad_inputs, grad_outputs):
            p = param
            if not rec.enabled or rec.session is None or p.grad is None:
                return
            # msprobe numbers a module's gradient calls by its first parameter's arrivals.
            counts = rec.__dict__.setdefault("param_grad_counts", {})
            state = counts.get(prefix)
            if state is None:
                state = counts[prefix] = [0, pname]
            elif state[1] == pname:
                state[0] += 1
            entry = f"{prefix}.parameters_grad.{state[0]}"
            # msprobe decides on the module's name (not the entry's) and keeps the gradients of
            # a module whose backward was recorded; a refused gradient drops the whole entry of
            # this call, with the module's other gradients kept before it (a scope that closed
            # between them).
            if not rec.selected(prefix) and prefix not in rec.modules_with_backward:
                if rec.session.has_entry(entry):
                    rec.session.remove(entry)
                return
            _set_busy(True)
            try:
                rec._begin_entry(entry)
                rec.saving_entry = entry if rec.cfg.saves_tensors(entry) else None
                val = rec.value(p.grad, entry, (pname,))
                # msprobe moves a module entry to the end at each update.
                rec._entry(entry, {pname: [val]}, reinsert=True)
            finally:
                _set_busy(False)

        self.param_grad_hooks[key] = node.register_hook(hook)


def _grad_accumulator(param):
    """The node of this step's graph that accumulates `param`'s gradient (msprobe reaches it
    through `param.expand_as(param)`), or None when the graph does not hold one."""
    edge = getattr(torch.autograd.graph, "get_gradient_edge", None)
    if edge is not None:
        return edge(param).node
    tmp = param.expand_as(param)
    return tmp.grad_fn.next_functions[0][0] if tmp.grad_fn is not None else None
