"""Records of the values an entry holds: msprobe's record of each argument type, and of tensors
on the host path.

A tensor's statistics are computed by the Rust session on its bytes: contiguous CPU tensors are
read in place (no detach or copy) with the GIL released, float32 tensors in one fused pass whose
Mean/Norm follow torch's CPU summation order, so they equal msprobe's bit for bit
(capture/src/torch_order.rs). Tensors on other devices take _device_stats.py unless it is off,
and large CPU tensors may go to the statistics thread (_stats_thread.py).

The record of a large tensor whose memory is unchanged since it was summarised is reused
(``_cached_tensor``): an API's output is the next one's input, a parameter is read by several
calls, ``p.grad`` aliases the gradient the backward hook saw. The native walk of API values
(capture/py/src/walk.rs) keeps the same cache (``stats_cache``) by the same rule.
"""
import functools
import os
import warnings
import zlib
from typing import Dict

import torch

from .._native import dense as _dense
from .._native import dlpack_dtypes as _native_dlpack_dtypes
from .._native import fingerprint as _fingerprint
from .._native import shim_dtypes as _native_shim_dtypes

_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
# True inside DisableTorchFunction (torch 2.4 on): a caller that disabled torch functions for
# a whole entry spares each tensor its own context (≈ 0.8 µs a tensor).
_TF_ALL_OFF = getattr(torch._C, "_is_torch_function_all_disabled", None)
_STRIDED = torch.strided
_F32 = torch.float32
_vector_norm = torch.linalg.vector_norm


# Tensors at least this large have their records cached (below it a statistics pass costs
# less than the cache's checks).
_CACHE_MIN_BYTES = 64 << 10
# Float32 tensors below this many bytes (8 elements) take torch's own Mean/Norm (``_tensor``).
_TORCH_ORDER_BELOW_BYTES = 32
_DTYPE_NAMES: Dict[torch.dtype, str] = {}
_STORAGE = torch.UntypedStorage
# A tensor's device, shape, strides and data address in one call for the native walk
# (capture/py/src/dlpack.rs); None reads them as attributes (a torch without it, and tests).
TO_DLPACK = getattr(torch._C, "_to_dlpack", None)


@functools.lru_cache(maxsize=None)
def walker_types():
    """What the native walk (``_native.Walker``) needs of torch and of this module: the
    tensor types it reads itself, ``torch.strided``, ``torch.float32``, every dtype with its
    name, the sizes at which ``_tensor`` caches records (the walk uses ``stats_cache`` as
    ``_cached_tensor`` does) and takes torch's Mean/Norm, and the storage type whose weak
    references the cache holds."""
    dtypes = [(d, str(d)) for d in vars(torch).values() if isinstance(d, torch.dtype)]
    return (torch.Tensor, torch.nn.Parameter, _STRIDED, _F32, dtypes, _CACHE_MIN_BYTES,
            _TORCH_ORDER_BELOW_BYTES, _STORAGE)


@functools.lru_cache(maxsize=None)
def dlpack_dtypes(to_dlpack):
    """Which torch dtype each DLPack element type stands for (``_native.dlpack_dtypes``),
    learnt once per export function from torch's own exports; empty without one."""
    if to_dlpack is None:
        return []
    empty = getattr(torch.empty, "__wrapped__", torch.empty)  # never a recorded call
    with warnings.catch_warnings():
        # Making a tensor of an experimental or deprecated dtype warns; the user made none.
        warnings.simplefilter("ignore")
        return _native_dlpack_dtypes(to_dlpack, empty, [d for d, _ in walker_types()[4]])


@functools.lru_cache(maxsize=None)
def shim_dtypes(shim):
    """Which torch dtype each ``c10::ScalarType`` value of the torch reader stands for
    (``_native.shim_dtypes``), learnt once per reader as ``dlpack_dtypes``; empty without one."""
    if shim is None:
        return []
    empty = getattr(torch.empty, "__wrapped__", torch.empty)  # never a recorded call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _native_shim_dtypes(shim, empty, [d for d, _ in walker_types()[4]])


def _location(device):
    """The storage location torch.save writes for a tensor on `device` (msprobe saves device
    tensors from the device, so its .pt files name it: "cuda:0", "npu:1")."""
    if device.type == "cpu":
        return "cpu"
    return device.type if device.index is None else f"{device.type}:{device.index}"


def _int_or_none(x):
    try:
        return int(x) if x is not None else None
    except (TypeError, ValueError):
        return None


def _distributed_types():
    if not torch.distributed.is_available():
        return None, ()
    dist = torch.distributed
    ops = tuple(t for t in (dist.ReduceOp, getattr(dist.ReduceOp, "RedOpType", None)) if t)
    return dist.ProcessGroup, ops


def _distributed_value(v):
    """msprobe's records of a process group (its ranks, and the crc32 of their text as id) and
    of a reduce op (its text); None for anything else."""
    group_type, op_types = _distributed_types()
    if group_type is None:
        return None
    if isinstance(v, group_type):
        rec = {"type": "torch.ProcessGroup"}
        try:
            ranks = torch.distributed.get_process_group_ranks(v)
            rec["group_ranks"] = ranks
            rec["group_id"] = f"{zlib.crc32(str(ranks).encode('utf-8')):08x}"
        except Exception:  # as msprobe: a group whose ranks cannot be read keeps its type only
            pass
        return rec
    if op_types and isinstance(v, op_types):
        try:
            text = str(v)
        except Exception:
            text = None
        return {"type": "torch.distributed.ReduceOp", "value": text}
    return None


class Values:
    """The recorder's value records (a mixin of ``Recorder``)."""

    def _init_values(self):
        self.stats_cache = {}  # (storage, ptr, shape, dtype, rg) -> (weak storage, version, sample, rec)

    def value(self, v, entry, path, kwname=None, depth=0):
        if isinstance(v, torch.Tensor):
            return self.tensor(v, entry, path)
        if v is None:
            return None
        if isinstance(v, bool):
            return {"type": "bool", "value": v}
        if isinstance(v, int):
            return {"type": "int", "value": v}
        if isinstance(v, float):
            return {"type": "float", "value": v}
        if isinstance(v, str):
            if kwname == "device":
                return {"type": "torch.device", "value": v}
            return {"type": "str", "value": v}
        if isinstance(v, torch.Size):
            return {"type": "torch.Size", "value": [int(d) for d in v]}
        if isinstance(v, slice):
            return {"type": "slice", "value": [_int_or_none(v.start), _int_or_none(v.stop),
                                               _int_or_none(v.step)]}
        if v is Ellipsis:
            return {"type": "ellipsis", "value": "..."}
        if isinstance(v, torch.dtype):
            if kwname in ("dtype", "output_dtype"):
                return {"type": "torch.dtype", "value": str(v)}
            return {}
        if isinstance(v, torch.device):
            if kwname == "device":
                return {"type": "torch.device", "value": f"{v.type}:{v.index}"}
            return {}
        if isinstance(v, torch.memory_format):
            return {"type": "torch.memory_format", "format": str(v).split(".")[-1]}
        if depth > 400:
            raise ValueError("value nested deeper than 400 levels")
        # msprobe writes a namedtuple and a dataclass (a transformers ModelOutput too, whose
        # dict view leaves out its None fields) as a dict of all their fields.
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return {str(k): self.value(getattr(v, k), entry, path + (k,), None, depth + 1)
                    for k in v._fields}
        fields = getattr(v, "__dataclass_fields__", None)
        if fields is not None and not isinstance(v, type):
            return {str(k): self.value(getattr(v, k, None), entry, path + (k,), None, depth + 1)
                    for k in fields}
        if isinstance(v, (list, tuple)):
            return [self.value(x, entry, path + (i,), None, depth + 1) for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {str(k): self.value(x, entry, path + (k,), None, depth + 1)
                    for k, x in v.items()}
        dist_record = _distributed_value(v)
        if dist_record is not None:
            return dist_record
        item = getattr(v, "item", None)
        if type(v).__module__ == "numpy" and item is not None and getattr(v, "ndim", 1) == 0:
            return {"type": type(v).__name__, "value": item()}
        return None

    def outputs(self, out, entry):
        """The `output` list of an API or module call, as msprobe makes it: a tuple's members
        (a namedtuple as the dict of its fields), anything else (a list too) as one member."""
        if isinstance(out, tuple):
            if hasattr(out, "_fields"):
                return self.value(out, entry, ("output",))
            return [self.value(o, entry, ("output", i)) for i, o in enumerate(out)]
        return [self.value(out, entry, ("output", 0))]

    def tensor(self, v, entry, path):
        # Called from hooks and wrappers while the mode is on the stack: without this every
        # tensor attribute read below would go through __torch_function__.
        if _TF_ALL_OFF is not None and _TF_ALL_OFF():
            return self._tensor(v, entry, path)
        with _NO_TORCH_FUNCTION():
            return self._tensor(v, entry, path)

    def _tensor(self, v, entry, path):
        dtype = v.dtype
        dname = _DTYPE_NAMES.get(dtype)
        if dname is None:
            dname = _DTYPE_NAMES[dtype] = str(dtype)
        shape = v.shape
        # Fast path: contiguous CPU memory is read in place, without a detached alias.
        direct = (v.is_cpu and v.layout is _STRIDED and v.is_contiguous()
                  and not v.is_conj() and not v.is_neg())
        mean_norm = None
        if direct:
            t = v
            stats = True
        else:
            t = v.detach()
            stats = True
            if t.is_meta or t.layout != torch.strided:
                stats = False
            else:
                if t.device.type != "cpu":
                    if self._dev_auto:
                        rec = self._device_tensor(v, entry, path, dname, shape)
                        if rec is not None:
                            return rec
                    t = t.cpu()
                if t.is_conj():
                    t = t.resolve_conj()
                if t.is_neg():
                    t = t.resolve_neg()
                if not t.is_contiguous():
                    if (t.dtype is _F32 and self.torch_order and self.saving_entry != entry
                            and self.cfg.summary_mode == "statistics"
                            and t.numel() * 4 >= _TORCH_ORDER_BELOW_BYTES
                            and _dense(t.shape, t.stride())):
                        # A permutation of a contiguous layout (a transpose): torch reduces
                        # it in memory order, as a contiguous tensor, so its memory read in
                        # place gives torch's Max/Min/Mean/Norm (msprobe's) without a copy.
                        return self.session.tensor(t.data_ptr(), t.numel() * 4, dname, shape,
                                                   v.requires_grad, None, True, None)
                    if t.dtype is _F32 and t.dim() and t.numel() and self.torch_order:
                        # torch reduces a strided tensor in an order set by its strides;
                        # msprobe's Mean/Norm are torch's own, so take them from torch
                        # (torch.norm's own path for a whole tensor is this vector_norm).
                        mean_norm = (torch.mean(t).item(), _vector_norm(t).item())
                    t = t.contiguous()
        nbytes = t.nbytes if stats else 0
        ptr = t.data_ptr() if nbytes else 0
        if (mean_norm is None and 0 < nbytes < _TORCH_ORDER_BELOW_BYTES and dtype is _F32
                and self.torch_order and v.dim()):
            # Under 8 elements torch's norm takes a kernel whose order was not pinned down
            # (capture/src/torch_order.rs); such tensors cost torch next to nothing. (A
            # strided view's were taken above, on the view, as msprobe takes them.)
            mean_norm = (torch.mean(t).item(), _vector_norm(t).item())
        rg = v.requires_grad
        if nbytes and self.saving_entry == entry:
            data_name = entry + "." + ".".join(str(p) for p in path) + ".pt"
            self.session.save_tensor(os.path.join(self.tensor_dir, data_name), ptr, nbytes,
                                     dname, shape, _location(v.device))
            return self.session.tensor(ptr, nbytes, dname, shape, rg, data_name, stats,
                                       mean_norm)
        if not direct or nbytes < _CACHE_MIN_BYTES:
            return self.session.tensor(ptr, nbytes, dname, shape, rg, None, stats, mean_norm)
        return self._cached_tensor(v, ptr, nbytes, dname, shape, rg)

    def _cached_tensor(self, v, ptr, nbytes, dname, shape, rg):
        """The record of a large tensor, reused while its memory is unchanged: an API's output
        is the next one's input, a parameter is read by many calls, and ``p.grad`` is an alias
        of the gradient its backward hook saw. Unchanged means: the same live storage (held
        by a weak reference, so its address cannot have been reused), data pointer, shape,
        dtype and requires_grad, the same version counter value (aliases made by views and
        ``detach`` share the counter), and the same content sample, which catches most writes
        the counter misses (``.data``, numpy or DLPack aliases)."""
        try:
            version = v._version
            storage = v.untyped_storage()
        except RuntimeError:  # inference tensors have no version counter
            return self.session.tensor(ptr, nbytes, dname, shape, rg, None, True)
        key = (storage._cdata, ptr, shape, dname, rg)
        hit = self.stats_cache.get(key)
        if hit is not None:
            if (not _STORAGE._expired(hit[0]) and hit[1] == version
                    and hit[2] == _fingerprint(ptr, nbytes)):
                return hit[3]
            _STORAGE._free_weak_ref(hit[0])
            del self.stats_cache[key]
        if self.async_stats:
            rec = self._tensor_async(v, key, version, storage, ptr, nbytes, dname, shape, rg)
            if rec is not None:
                return rec
        rec = self.session.tensor(ptr, nbytes, dname, shape, rg, None, True)
        self.stats_cache[key] = (storage._weak_ref(), version, _fingerprint(ptr, nbytes), rec)
        return rec

    def _prune_stats_cache(self):
        """Forgets records whose storage is gone (called at step ends)."""
        dead = [k for k, hit in self.stats_cache.items() if _STORAGE._expired(hit[0])]
        for k in dead:
            _STORAGE._free_weak_ref(self.stats_cache.pop(k)[0])
