"""Modules (levels L0 and mix): forward, backward and parameter-gradient hooks on every
sub-module of the models given to ``start``, and the optimizer step's node in construct.json.

Entries are named as msprobe names them: ``Module.{path}.{Class}.forward.{n}`` (with
``{index}.`` before the path when ``start`` got a list of models), ``….backward.{n}`` and
``….parameters_grad.{k}``.
"""
from ._reentry import busy as _busy
from ._reentry import set_busy as _set_busy


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


class ModuleHooks:
    """The recorder's module part (a mixin of ``Recorder``)."""

    def hook_model(self, model):
        """The hooks of level L0/mix on `model` (a module or a list of them)."""
        _quiet_backward_hook_setup()
        self.hook_models(model)
        self.hook_optimizer()

    def hook_optimizer(self):
        """At mix level msprobe marks the optimizer step in construct.json: an `optimizer`
        node, parent of the APIs the step calls."""
        if getattr(self, "_optim_hooked", False):
            return
        self._optim_hooked = True
        rec = self

        def pre(opt, args, kwargs):
            if rec.enabled and rec.session is not None and rec.cfg.level == "mix":
                if rec.cfg.extra_info:
                    _set_busy(True)
                    try:
                        rec.session.construct("optimizer", None)
                    finally:
                        _set_busy(False)
                rec.module_stack.append("optimizer")

        def post(opt, args, kwargs):
            if rec.module_stack and rec.module_stack[-1] == "optimizer":
                rec.module_stack.pop()

        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)

        self.handles.append(register_optimizer_step_pre_hook(pre))
        self.handles.append(register_optimizer_step_post_hook(post))

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
        pending = []  # forward call numbers awaiting their backward (LIFO)

        def pre(mod, args, kwargs):
            if not rec.module_enabled or _busy() or rec.session is None:
                return None
            n = rec.module_counters.get(prefix, 0)
            rec.module_counters[prefix] = n + 1
            entry = f"{prefix}.forward.{n}"
            parent = rec.module_stack[-1] if rec.module_stack else None
            rec.module_stack.append(entry)
            pending.append(n)
            _set_busy(True)
            try:
                if rec.cfg.extra_info:
                    rec.session.construct(entry, parent)
                if not rec.selected(entry):
                    return None
                rec._begin_entry(entry)
                if "forward" in rec.cfg.modes and "input" in rec.cfg.modes:
                    rec._entry(entry, {
                        "input_args": [rec.value(a, entry, ("input", i)) for i, a in enumerate(args)],
                        "input_kwargs": {k: rec.value(v, entry, ("kwargs", k), k)
                                         for k, v in kwargs.items()},
                    })
                if "forward" in rec.cfg.modes and rec.cfg.extra_info:
                    rec._record_stack(entry, *rec.stack())
            finally:
                _set_busy(False)
            return None

        def post(mod, args, kwargs, out):
            if not rec.module_stack or rec.session is None:
                return None
            entry = rec.module_stack.pop()
            if not rec.module_enabled or not rec.selected(entry, entering=False):
                return None
            _set_busy(True)
            try:
                rec._begin_entry(entry)
                body = {}
                if "forward" in rec.cfg.modes and "output" in rec.cfg.modes:
                    outs = list(out) if isinstance(out, (tuple, list)) else [out]
                    body["output"] = [rec.value(o, entry, ("output", i)) for i, o in enumerate(outs)]
                    body["parameters"] = {
                        pn: rec.value(p, entry, ("parameters", pn))
                        for pn, p in mod.named_parameters(recurse=False)
                    }
                if body:
                    rec._entry(entry, body, reinsert=True)
            finally:
                _set_busy(False)
            return None

        def backward_pre(mod, grad_output):
            if rec.enabled and rec.session is not None and pending:
                rec.bwd_stack.append(f"{prefix}.backward.{pending[-1]}")
            return None

        def backward(mod, grad_input, grad_output):
            if not rec.enabled or rec.session is None or not pending:
                return None
            n = pending.pop()
            entry = f"{prefix}.backward.{n}"
            if rec.bwd_stack and rec.bwd_stack[-1] == entry:
                rec.bwd_stack.pop()
            if not rec.selected(entry) or "backward" not in rec.cfg.modes:
                return None
            _set_busy(True)
            try:
                rec._begin_entry(entry)
                if rec.cfg.extra_info:
                    rec.session.construct(entry, rec.bwd_stack[-1] if rec.bwd_stack else None)
                body = {}
                if "input" in rec.cfg.modes:
                    body["input"] = [rec.value(g, entry, ("input", i))
                                     for i, g in enumerate(grad_output)]
                if "output" in rec.cfg.modes:
                    body["output"] = [rec.value(g, entry, ("output", i))
                                      for i, g in enumerate(grad_input) if g is not None]
                rec._entry(entry, body)
                if body:
                    rec.modules_with_backward.add(prefix)
            finally:
                _set_busy(False)
            return None

        self.handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        self.handles.append(module.register_forward_hook(post, with_kwargs=True))
        if "backward" in self.cfg.modes:
            self.handles.append(module.register_full_backward_pre_hook(backward_pre))
            self.handles.append(module.register_full_backward_hook(backward))
            for pn, p in module.named_parameters(recurse=False):
                if p.requires_grad:
                    self._hook_param_grad(p, pn, prefix)

    def _hook_param_grad(self, param, pname, prefix):
        rec = self

        def hook(p):
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

        self.handles.append(param.register_post_accumulate_grad_hook(hook))
