"""APIs that msprobe 26.2 hooks outside torch's own Python namespaces: `torch_npu`'s fused ops
(prefix `NPU`) and the operators of the `torch.ops` namespaces named by the config's
`custom_op_namespaces` (prefix: the namespace's name, e.g. `aten.relu.0.forward`).

What msprobe 26.2 does, measured on CPU (the `aten` list of its support_wrap_ops.yaml is not
used by its PrecisionDebugger; the `Aten` prefix belongs to its ACL-graph dumper only):
* `torch.ops.aten.*` calls are not recorded by default, at any level or risk level;
* `custom_op_namespaces` (default `["_C_ascend"]`) wraps, in each listed `torch.ops`
  namespace, every operator that has a schema without an overload name; a call of the packet
  (`torch.ops.aten.relu(x)`) is recorded as `{namespace}.{op}.{n}.forward` (and `.backward`),
  counted per name like any other API; msprobe puts a plain function in the packet's place, so
  its overloads are gone there (`torch.ops.aten.add.Tensor` raises). numprobe keeps them
  reachable and runs them unrecorded;
* when `torch_npu` imports, every name of the yaml's `torch_npu` list found on `torch.ops.npu`
  or on `torch_npu` (dotted names such as `atb.npu_ring_mla` on its submodule) is wrapped in
  the namespace it was found in (one wrapper where both hold the same object) and recorded as
  `NPU.{last dotted part}.{n}.forward`; the torch calls an NPU op makes inside are not
  recorded. A packet's `.default` overload stays callable there, unrecorded (numprobe: every
  overload).

The wrappers are set once, like the recorder's namespace wrappers, and cost nothing to code that
never calls these APIs; a wrapped call goes through `Recorder.call_api`, so counters, filters
(scope, list, risk level) and backward entries follow the other prefixes.
"""
import importlib
import sys
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from . import _api_lists

DEFAULT_CUSTOM_OP_NAMESPACES = ("_C_ascend",)

_PATCHED: List[Tuple[Any, str, Any]] = []  # (owner, attribute, original), in patching order
_WRAPPED_NAMESPACES: Set[str] = set()
_NPU_DONE = [False]
# namespace -> operator names without an overload name
_SCHEMA_OPS: Dict[Optional[str], List[str]] = {}
_rec = None  # the recorder's API module (it imports this one), bound at install()


class _PacketWrapper:
    """Stands in for an `OpOverloadPacket`: a call of the packet is recorded, attribute access
    (overloads, `overloads()`, `_schema`...) reaches the original packet."""

    __slots__ = ("_orig", "_api", "__wrapped__")

    def __init__(self, orig, api):
        self._orig = orig
        self._api = api
        self.__wrapped__ = orig

    def __call__(self, *args, **kwargs):
        rec = _rec._ACTIVE[0]
        if rec is None or not rec.api_enabled or _rec._busy():
            return self._orig(*args, **kwargs)
        return rec.call_api(self._api, self._orig, args, kwargs, inner_busy=True)

    def __getattr__(self, name):
        return getattr(self._orig, name)

    def __repr__(self):
        return f"<numprobe wrapper of {self._orig!r}>"


def _wrap(orig, api):
    if isinstance(orig, torch._ops.OpOverloadPacket):
        return _PacketWrapper(orig, api)
    return _rec._make_api_wrapper(orig, api)


def _set(owner, attr, wrapper, orig):
    _PATCHED.append((owner, attr, orig))
    setattr(owner, attr, wrapper)


def _schema_ops(namespace):
    """Operator names of `namespace` that have a schema without an overload name. All schemas
    are scanned once per process (about 15 ms), at the first start, as msprobe scans them once:
    operators registered later are not wrapped."""
    if not _SCHEMA_OPS:
        by_ns = {}
        for schema in torch._C._jit_get_all_schemas():
            if schema.overload_name:
                continue
            ns, sep, op = schema.name.partition("::")
            if sep:
                by_ns.setdefault(ns, set()).add(op)
        _SCHEMA_OPS.update((ns, sorted(ops)) for ns, ops in by_ns.items())
        _SCHEMA_OPS[None] = []  # marks the scan as done even when nothing was found
    return _SCHEMA_OPS.get(namespace, ())


def _install_namespace(namespace):
    if namespace in _WRAPPED_NAMESPACES:
        return
    _WRAPPED_NAMESPACES.add(namespace)
    ops = _schema_ops(namespace)
    if not ops:
        return
    ns_obj = getattr(torch.ops, namespace)
    for op in ops:
        try:
            orig = getattr(ns_obj, op)
        except (AttributeError, RuntimeError):
            continue
        if isinstance(orig, _PacketWrapper) or not callable(orig):
            continue
        _set(ns_obj, op, _wrap(orig, (namespace, op)), orig)


def _resolve(owner, dotted):
    """(object holding the attribute, attribute name, value) for `a.b` names, or None."""
    head, _, attr = dotted.rpartition(".")
    if head:
        try:
            owner = getattr(owner, head, None)
        except (AttributeError, RuntimeError):
            return None
        if owner is None:
            return None
    try:
        value = getattr(owner, attr, None)
    except (AttributeError, RuntimeError):
        return None
    if value is None or not callable(value):
        return None
    return owner, attr, value


def _torch_npu():
    mod = sys.modules.get("torch_npu")
    if mod is not None:
        return mod
    try:
        return importlib.import_module("torch_npu")
    except Exception:  # absent, or present but unusable on this machine
        return None


def _install_npu():
    if _NPU_DONE[0]:
        return
    _NPU_DONE[0] = True
    mod = _torch_npu()
    if mod is None:
        return
    sources = (torch.ops.npu, mod)
    for dotted in _api_lists.TORCH_NPU:
        api = ("NPU", dotted.rsplit(".", 1)[-1])
        seen = []  # one wrapper per distinct original, set where that original was found
        for src in sources:
            found = _resolve(src, dotted)
            if found is None:
                continue
            owner, attr, orig = found
            for prev_orig, prev_wrapper in seen:
                if prev_orig is orig:
                    _set(owner, attr, prev_wrapper, orig)
                    break
            else:
                wrapper = _wrap(orig, api)
                seen.append((orig, wrapper))
                _set(owner, attr, wrapper, orig)


def install(cfg):
    """Wraps the torch_npu APIs (when torch_npu imports) and the configured `torch.ops`
    namespaces; repeated calls only add what is new."""
    global _rec
    from . import _api_hooks as _rec

    _install_npu()
    namespaces = getattr(cfg, "custom_op_namespaces", None)
    if namespaces is None:
        namespaces = DEFAULT_CUSTOM_OP_NAMESPACES
    for ns in namespaces:
        _install_namespace(ns)


def uninstall():
    while _PATCHED:
        owner, attr, orig = _PATCHED.pop()
        setattr(owner, attr, orig)
    _WRAPPED_NAMESPACES.clear()
    _NPU_DONE[0] = False
