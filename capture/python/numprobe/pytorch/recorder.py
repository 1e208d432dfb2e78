"""The PyTorch adapter: sees API calls through a TorchFunctionMode, modules through module
hooks, gradients through autograd node hooks, and hands every value to the Rust session
(``numprobe._native.Session``), which journals it and writes msprobe's files.

Cost per recorded tensor is kept low by:
* reading contiguous CPU tensors in place (no detach/copy) and computing statistics in Rust
  with the GIL released; float32 tensors take one fused pass whose Mean/Norm follow torch's
  CPU summation order, so they equal msprobe's bit for bit (capture/src/torch_order.rs);
* reusing the record of a large tensor whose memory is unchanged since it was summarised
  (``_cached_tensor``: an API's output is the next one's input, a parameter is read by several
  calls, ``p.grad`` aliases the gradient the backward hook saw);
* caching call stacks by code object and line, and journaling a repeated stack as a reference
  to its group.

Statistics are computed on the training thread, before the API runs (inputs) and right after
it (outputs): the journal holds every entry whose hook has returned, so a process killed at any
point keeps every API recorded before the kill.

When torch leaves a core idle (fewer torch threads than cores; ``NUMPROBE_ASYNC_STATS=1``/``0``
forces it on/off), the statistics of large CPU tensors (``_ASYNC_MIN_BYTES``) in statistics mode
go to a second thread instead (``capture::stats_worker``): the entry is journaled at once with
a placeholder record, the training thread runs the next operators, and the statistics follow
as a fill record within milliseconds (a run killed in between keeps the entry, with ``null``
statistics, like device statistics below). Until its job is done the tensor's storage is held
and nothing may write into it: every call the mode sees that writes into its arguments
(``_guard_writes``: in-place methods and operators, ``out=``, ``inplace=True``, batch-norm
running statistics, collectives, ``backward``) first completes the jobs of the storages it
writes, running a job that has not started on the training thread. Writes the mode cannot see
(numpy views, a DDP reducer's thread) would race, so distributed runs keep the synchronous path.

Tensors on other devices (CUDA, NPU...) keep their statistics on the device
(``_device_tensor``): msprobe's Max/Min/Mean/Norm are computed there with the same torch ops
msprobe uses, each tensor's values go into a small device tensor, and the entry is journaled at
once with a placeholder record. All pending values are read back in one transfer per device
(``flush_device_stats``: at ``stop()``/step end, before the JSON files are written, and when
more than ``device_stats_bound`` tensors are pending), then journaled as one fill record, so a
step costs one host sync instead of one per tensor. A run killed between a hook and the
readback keeps those entries with ``null`` statistics (see capture/src/lib.rs).
``NUMPROBE_DEVICE_STATS`` (or ``Recorder.device_stats``) selects this: ``auto`` (default,
non-CPU tensors only), ``force`` (CPU tensors too: how the device path is tested on machines
without a GPU), ``off`` (copy every tensor to the host, as for CPU tensors).
``NUMPROBE_DEVICE_STATS_BOUND`` sets the bound (default 4096).
"""
import linecache
import os
import sys
import threading
import types

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .. import _settings
from .._native import fingerprint as _fingerprint
from . import _api_lists
from . import _ops_hooks
from .risk import is_recorded_at

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OVERRIDES_FILE = os.path.abspath(sys.modules["torch.overrides"].__file__)
_tls = threading.local()
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
# Tensors at least this large have their records cached (below it a statistics pass costs
# less than the cache's checks).
_CACHE_MIN_BYTES = 64 << 10
_DTYPE_NAMES = {}
_STORAGE = torch.UntypedStorage
# Statistics of float tensors (_DEV_FLOATS, whose placeholder and fill make the synchronous
# record) from this size on may go to the statistics thread (module docstring): below it the
# pass is shorter than handing it over.
_ASYNC_MIN_BYTES = 1 << 20
# Calls that write into their first argument although their name does not end in "_".
_INPLACE_DUNDERS = frozenset((
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
    "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__setitem__",
))
# Calls that may write into any tensor argument: running statistics and collectives.
_WRITES_ANY_ARG = frozenset((
    "batch_norm", "instance_norm", "_batch_norm_impl_index", "native_batch_norm",
    "_native_batch_norm_legit", "batch_norm_update_stats", "batch_norm_gather_stats",
    "batch_norm_gather_stats_with_counts", "all_reduce", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "_all_gather_base", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "recv",
    "irecv", "scatter", "gather", "batch_isend_irecv",
))
# Calls after which autograd may write into gradients it accumulates: every job completes.
_WAIT_ALL = frozenset(("backward", "grad", "run_backward", "_engine_run_backward"))
# Dtypes whose statistics are computed on the device (others, complex and float8 among them,
# are copied to the host as CPU tensors are read: msprobe itself uses numpy for complex).
_DEV_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_DEV_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_DEVICE_STATS_MODES = ("auto", "force", "off")


def _busy():
    return getattr(_tls, "busy", False)


def _set_busy(v):
    _tls.busy = v


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
_PATCHED = []  # (namespace, attribute, original)


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


_ACTIVE = [None]


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


def _first_tensor(v):
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (list, tuple)):
        for x in v:
            t = _first_tensor(x)
            if t is not None:
                return t
    return None


class Recorder:
    """State of one PrecisionDebugger: the current step's session, counters, hooks."""

    #: Pause of the statistics thread before each job, in ms, applied to the sessions opened
    #: afterwards. Tests only: holding the thread back makes a missing write guard show as
    #: wrong statistics instead of depending on timing.
    stats_thread_delay_ms = None

    def __init__(self, cfg):
        self.cfg = cfg
        self.session = None
        self.step = 0
        self.api_enabled = False
        self.module_enabled = False
        self.enabled = False
        self.counters = {}
        self.module_counters = {}
        self.module_stack = []
        self.bwd_stack = []
        self.modules_with_backward = set()  # modules whose backward entry got data this step
        self.scope_state = "before"
        self.scope_taken = set()
        self.stack_cache = {}  # call-site key -> (frames, code objects)
        self.stack_gids = {}  # call-site key -> stack group of the current session
        self.stats_cache = {}  # (storage, ptr, shape, dtype, rg) -> (weak storage, version, sample, rec)
        self.cache_hits = 0
        # Statistics thread (module docstring): on for the current session; jobs in flight by
        # id, the placeholder of each cache key in flight, job ids by storage (_cdata).
        self.async_stats = False
        self.async_jobs = {}  # id -> (cache key, version, sample, weak storage, storage cdata)
        self.async_keys = {}  # cache key -> (id, version, placeholder rec)
        self.async_storages = {}  # storage cdata -> [ids]
        self.may_save = cfg.task == "tensor" or bool(cfg.tensor_list)
        # msprobe takes float32 Mean/Norm from torch under precision low.
        self.torch_order = cfg.precision == "low" and cfg.summary_mode != "xor"
        self.mode = None
        self.hooked_models = set()
        self.handles = []
        self.rank_dir_name = None
        self.dir = None
        self.tensor_dir = None
        # Device statistics (module docstring): pending rows per device, their (pending id,
        # kind) in the same order, and how many host readbacks were made (tests count them).
        self._dev_pending = {}
        self._dev_count = 0
        self.device_readbacks = 0
        self.device_stats_bound = _settings.device_stats_bound()
        self.device_stats = _settings.device_stats()

    @property
    def device_stats(self):
        return self._device_stats

    @device_stats.setter
    def device_stats(self, mode):
        if mode not in _DEVICE_STATS_MODES:
            raise ValueError(f"device_stats must be one of {_DEVICE_STATS_MODES}, not {mode!r}")
        self._device_stats = mode
        self._dev_auto = mode != "off"
        # "force" swaps the per-tensor entry point, so the CPU fast path of `_tensor` carries
        # no extra test for it.
        if mode == "force":
            self._tensor = self._tensor_forced
        else:
            self.__dict__.pop("_tensor", None)

    # ------------------------------------------------------------------ session lifecycle

    def _rank(self):
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank()
        return None

    def ensure_session(self):
        if self.session is not None:
            return True
        cfg = self.cfg
        if cfg.step and self.step not in cfg.step:
            return False
        rank = self._rank()
        if cfg.rank and (rank if rank is not None else 0) not in cfg.rank:
            return False
        rank_name = f"rank{rank}" if rank is not None else f"proc{os.getpid()}"
        from .._native import Session

        self.dir = os.path.join(cfg.dump_path, f"step{self.step}", rank_name)
        saves = cfg.task == "tensor" or bool(cfg.tensor_list)
        dump_data_dir = os.path.join(self.dir, "dump_tensor_data") if saves else None
        self.tensor_dir = dump_data_dir
        if saves:
            os.makedirs(dump_data_dir, exist_ok=True)
        self.stack_gids = {}
        self.session = Session(
            self.dir, cfg.task, cfg.level, "pytorch", dump_data_dir, cfg.extra_info,
            cfg.summary_mode, cfg.precision, torch.get_num_threads(), fsync=_settings.fsync(),
            stats_thread_delay_ms=self.stats_thread_delay_ms,
        )
        self.async_stats = self._async_stats_wanted()
        return True

    def _async_stats_wanted(self):
        cfg = self.cfg
        # The mode guards writes (module docstring), so only levels that install it qualify;
        # fills carry statistics, not checksums.
        if cfg.summary_mode != "statistics" or cfg.level not in ("L1", "mix"):
            return False
        forced = _settings.async_stats()
        if forced is not None:
            return forced
        if (torch.distributed.is_available() and torch.distributed.is_initialized()
                and torch.distributed.get_world_size() > 1):
            return False
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = os.cpu_count() or 1
        return torch.get_num_threads() < cores

    def start(self, model=None):
        if not self.ensure_session():
            return
        cfg = self.cfg
        if model is not None and cfg.level in ("L0", "mix"):
            _quiet_backward_hook_setup()
            self.hook_models(model)
            self.hook_optimizer()
        self.enabled = True
        self.module_enabled = cfg.level in ("L0", "mix")
        if cfg.level in ("L1", "mix"):
            self.api_enabled = True
            if self.mode is None:
                api_map()
                _patch_namespaces()
                _ops_hooks.install(self.cfg)
                _ACTIVE[0] = self
                self.mode = _Mode(self)
                self.mode.__enter__()

    def stop(self):
        self.enabled = False
        self.api_enabled = False
        self.module_enabled = False
        if self.mode is not None:
            mode, self.mode = self.mode, None
            try:
                mode.__exit__(None, None, None)
            except Exception:  # popped by someone else already
                pass
        if self.session is not None:
            if self.async_jobs:
                self._reap(all_jobs=True)
            self.flush_device_stats()
            self.session.write_json()

    def end_step(self):
        self.stop()
        if self.session is not None:
            s, self.session = self.session, None
            s.close()
        self.step += 1
        self.counters.clear()
        self.module_counters.clear()
        self.module_stack.clear()
        self.bwd_stack.clear()
        self.scope_state = "before"
        self.scope_taken = set()
        self.param_grad_counts = {}
        self.modules_with_backward.clear()
        self._prune_stats_cache()

    # ------------------------------------------------------------------ values

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
        if isinstance(v, (list, tuple)):
            return [self.value(x, entry, path + (i,), None, depth + 1) for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {str(k): self.value(x, entry, path + (k,), None, depth + 1)
                    for k, x in v.items()}
        item = getattr(v, "item", None)
        if type(v).__module__ == "numpy" and item is not None and getattr(v, "ndim", 1) == 0:
            return {"type": type(v).__name__, "value": item()}
        return None

    def tensor(self, v, entry, path):
        # Called from hooks and wrappers while the mode is on the stack: without this every
        # tensor attribute read below would go through __torch_function__.
        with _NO_TORCH_FUNCTION():
            return self._tensor(v, entry, path)

    def _tensor(self, v, entry, path):
        dtype = v.dtype
        dname = _DTYPE_NAMES.get(dtype)
        if dname is None:
            dname = _DTYPE_NAMES[dtype] = str(dtype)
        shape = v.shape
        # Fast path: contiguous CPU memory is read in place, without a detached alias.
        direct = (v.is_cpu and v.layout == torch.strided and v.is_contiguous()
                  and not v.is_conj() and not v.is_neg())
        mean_norm = None
        if direct:
            t = v
            stats = True
        else:
            # Other devices are copied to the host here; statistics on the device (one
            # readback per step) would plug in at this point.
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
                    if t.dtype == torch.float32 and t.dim() and t.numel() and self.torch_order:
                        # torch reduces a strided tensor in an order set by its strides;
                        # msprobe's Mean/Norm are torch's own, so take them from torch.
                        mean_norm = (torch.mean(t).item(), torch.norm(t).item())
                    t = t.contiguous()
        nbytes = t.numel() * t.element_size() if stats else 0
        ptr = t.data_ptr() if nbytes else 0
        if 0 < nbytes < 32 and dtype is torch.float32 and self.torch_order and v.dim():
            # Under 8 elements torch's norm takes a kernel whose order was not pinned down
            # (capture/src/torch_order.rs); such tensors cost torch next to nothing.
            mean_norm = (torch.mean(t).item(), torch.norm(t).item())
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

    def _tensor_forced(self, v, entry, path):
        """`_tensor` under ``device_stats == "force"``: CPU tensors take the device path too."""
        dtype = v.dtype
        dname = _DTYPE_NAMES.get(dtype)
        if dname is None:
            dname = _DTYPE_NAMES[dtype] = str(dtype)
        rec = self._device_tensor(v, entry, path, dname, v.shape)
        if rec is None:
            return Recorder._tensor(self, v, entry, path)
        return rec

    def _device_tensor(self, v, entry, path, dname, shape):
        """The record of `v` with its statistics computed on its own device and read back
        later (module docstring); None where the host path must take it (xor mode, meta or
        sparse tensors, dtypes without device rules). The ops and their order of cases are
        msprobe 26.2's for PyTorch (spec section 3.1): bool -> any/all, 0-dim -> the value four
        times, float16/bfloat16/float32 -> max/min/mean/norm in the tensor's dtype (Mean/Norm
        null under precision high), float64 and integers -> max/min."""
        if self.cfg.summary_mode == "xor" or v.is_meta or v.layout != torch.strided:
            return None
        dtype = v.dtype
        if not (dtype is torch.bool or dtype in _DEV_INTS or dtype in _DEV_FLOATS
                or dtype is torch.float64):
            return None
        rg = v.requires_grad
        if v.numel() == 0:
            # No bytes to read (nor to save, as on the host path): the null statistics (and
            # md5 "00000000") come from the host path's record.
            return self.session.tensor(0, 0, dname, shape, rg, None, True)
        t = v.detach()
        f64, i64 = torch.float64, torch.int64
        if dtype is torch.bool:
            row, kind = torch.stack((torch.any(t), torch.all(t))).to(i64), "b"
        elif dtype in _DEV_INTS:
            if t.dim() == 0:
                # A copy: `to` would return an int64 tensor itself, which may change later.
                row, kind = t.reshape(1).to(i64, copy=True), "i1"
            else:
                row, kind = torch.stack((torch.max(t), torch.min(t))).to(i64), "i2"
        elif t.dim() == 0:
            row, kind = t.reshape(1).to(f64, copy=True).view(i64), "f1"
        elif dtype is not torch.float64 and self.cfg.precision != "high":
            row = torch.stack((torch.max(t), torch.min(t), torch.mean(t), torch.norm(t)))
            row, kind = row.to(f64).view(i64), "f4"
        else:
            row, kind = torch.stack((torch.max(t), torch.min(t))).to(f64).view(i64), "f2"
        data_name = crc = None
        saving = self.saving_entry == entry
        if saving or self.cfg.summary_mode == "md5":
            # A tensor file and the CRC-32 of md5 mode need the bytes on the host: those modes
            # copy each device tensor (a sync per tensor, as msprobe's own); the statistics
            # stay on the device, so they are the same as in statistics mode.
            h = t if t.is_cpu else t.cpu()
            if h.is_neg():
                h = h.resolve_neg()
            if not h.is_contiguous():
                h = h.contiguous()
            nbytes = h.numel() * h.element_size()
            ptr = h.data_ptr() if nbytes else 0
            if saving:
                data_name = entry + "." + ".".join(str(p) for p in path) + ".pt"
                self.session.save_tensor(os.path.join(self.tensor_dir, data_name), ptr, nbytes,
                                         dname, shape, _location(v.device))
            if self.cfg.summary_mode == "md5":
                crc = (ptr, nbytes)
        rec, pid = self.session.pending_tensor(dname, shape, rg, data_name, crc)
        slot = self._dev_pending.get(row.device)
        if slot is None:
            slot = self._dev_pending[row.device] = ([], [])
        slot[0].append(row)
        slot[1].append((pid, kind))
        self._dev_count += 1
        return rec

    def flush_device_stats(self):
        """Reads back every pending device statistic (one transfer per device) and journals
        them as one fill record. Called where every pending record's entry is journaled
        already: step end, stop(), and after an entry once the bound is passed."""
        if not self._dev_count:
            return
        pending, self._dev_pending, self._dev_count = self._dev_pending, {}, 0
        fills = []
        add = fills.append
        with _NO_TORCH_FUNCTION():
            for rows, metas in pending.values():
                host = torch.cat(rows).cpu()  # the readback: one host sync for all of them
                self.device_readbacks += 1
                ints = host.tolist()
                floats = host.view(torch.float64).tolist()
                at = 0
                for pid, kind in metas:
                    if kind == "f4":
                        add((pid, *floats[at:at + 4]))
                        at += 4
                    elif kind == "f2":
                        add((pid, floats[at], floats[at + 1], None, None))
                        at += 2
                    elif kind == "i2":
                        add((pid, ints[at], ints[at + 1], None, None))
                        at += 2
                    elif kind == "b":
                        add((pid, bool(ints[at]), bool(ints[at + 1]), None, None))
                        at += 2
                    else:  # 0-dim: the value is all four statistics
                        x = floats[at] if kind == "f1" else ints[at]
                        add((pid, x, x, x, x))
                        at += 1
        if self.session is not None:
            self.session.fill(fills)

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
                self.cache_hits += 1
                return hit[3]
            _STORAGE._free_weak_ref(hit[0])
            del self.stats_cache[key]
        if self.async_stats and nbytes >= _ASYNC_MIN_BYTES and v.dtype in _DEV_FLOATS:
            pend = self.async_keys.get(key)
            if pend is not None and pend[1] == version:
                # The same unchanged tensor again while its statistics are computed: its
                # placeholder serves both entries (one fill completes both).
                return pend[2]
            rec, jid = self.session.tensor_async(ptr, nbytes, dname, list(shape), rg, storage)
            cd = storage._cdata
            self.async_jobs[jid] = (key, version, _fingerprint(ptr, nbytes), storage._weak_ref(), cd)
            self.async_keys[key] = (jid, version, rec)
            ids = self.async_storages.get(cd)
            if ids is None:
                self.async_storages[cd] = [jid]
            else:
                ids.append(jid)
            return rec
        rec = self.session.tensor(ptr, nbytes, dname, shape, rg, None, True)
        self.stats_cache[key] = (storage._weak_ref(), version, _fingerprint(ptr, nbytes), rec)
        return rec

    def _reap(self, wait_for=None, all_jobs=False):
        """Takes the statistics thread's finished jobs (completing `wait_for` ids, or every
        job, first): their fills are journaled by the session, their records enter the cache."""
        for jid, final in self.session.reap(wait_for, all_jobs):
            key, version, sample, wref, cd = self.async_jobs.pop(jid)
            ids = self.async_storages.get(cd)
            if ids is not None:
                ids.remove(jid)
                if not ids:
                    del self.async_storages[cd]
            pend = self.async_keys.get(key)
            if pend is not None and pend[0] == jid:
                del self.async_keys[key]
            elif pend is not None:
                final = None  # a newer job for the same key will supply the cached record
            if final is None:
                _STORAGE._free_weak_ref(wref)
                continue
            old = self.stats_cache.get(key)
            if old is not None:
                _STORAGE._free_weak_ref(old[0])
            self.stats_cache[key] = (wref, version, sample, final)

    def _guard_writes(self, func, args, kwargs):
        """Completes the statistics jobs of every storage `func` may write into (module
        docstring) before it runs."""
        name = getattr(func, "__name__", None) or ""
        if name.endswith("_"):
            if name.endswith("__"):
                if name not in _INPLACE_DUNDERS:
                    return
                targets = args[:1]
            elif name.startswith("_fused"):
                targets = args  # fused optimizers update several tensor lists
            else:
                targets = args[:1]
        elif name in _WAIT_ALL:
            self._reap(all_jobs=True)
            return
        elif name in _WRITES_ANY_ARG:
            targets = args + tuple(kwargs.values())
        elif kwargs.get("out") is not None:
            targets = (kwargs["out"],)
        elif kwargs.get("inplace") is True or (
                getattr(func, "__module__", None) == "torch.nn.functional"
                and any(a is True for a in args[1:])):
            targets = args[:1]  # F.relu(x, True) and friends
        else:
            return
        ids = []
        storages = self.async_storages
        with _NO_TORCH_FUNCTION():
            for t in targets:
                for x in (t if isinstance(t, (list, tuple)) else (t,)):
                    if isinstance(x, torch.Tensor) and x.layout == torch.strided:
                        try:
                            found = storages.get(x.untyped_storage()._cdata)
                        except (RuntimeError, NotImplementedError):  # no storage of its own
                            continue
                        if found:
                            ids.extend(found)
        if ids:
            self._reap(wait_for=ids)

    def _prune_stats_cache(self):
        """Forgets records whose storage is gone (called at step ends)."""
        dead = [k for k, hit in self.stats_cache.items() if _STORAGE._expired(hit[0])]
        for k in dead:
            _STORAGE._free_weak_ref(self.stats_cache.pop(k)[0])

    saving_entry = None

    def _begin_entry(self, entry):
        if self.may_save:
            self.saving_entry = entry if self.cfg.saves_tensors(entry) else None

    # ------------------------------------------------------------------ stacks

    def stack(self, skip_code=None):
        """The caller's frames (from two levels up) as stack.json lines, and the key they are
        cached under: the ids of the frames' code objects and their line numbers (the cached
        value keeps the code objects alive, so an id cannot be reused while it is a key)."""
        f = sys._getframe(2)
        ids = [id(skip_code)]
        add = ids.append
        while f is not None:
            add(id(f.f_code))
            add(f.f_lineno)
            f = f.f_back
        key = tuple(ids)
        hit = self.stack_cache.get(key)
        if hit is not None:
            return key, hit[0]
        frames, codes = [], [skip_code]
        f = sys._getframe(2)
        while f is not None:
            code = f.f_code
            codes.append(code)
            fn = code.co_filename
            if code is not skip_code and not fn.startswith(_PKG_DIR) and fn != _OVERRIDES_FILE:
                src = linecache.getline(fn, f.f_lineno).strip()
                if src:
                    frames.append(f"File {fn}, line {f.f_lineno}, in {code.co_name}, \n {src}")
            f = f.f_back
        self.stack_cache[key] = (frames, codes)
        return key, frames

    def _record_stack(self, entry, key, frames):
        # A call site seen before in this session is journaled as a reference to its group.
        gid = self.stack_gids.get(key)
        if gid is None:
            self.stack_gids[key] = self.session.stack(entry, frames)
        else:
            self.session.stack_ref(entry, gid)

    # ------------------------------------------------------------------ APIs

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

    def _entry(self, name, body, reinsert=False):
        # task structure: construct.json and stack.json only, dump.json keeps "data": {}.
        if self.cfg.task != "structure":
            self.session.entry(name, body, reinsert)
        # Past the bound, pending device statistics are read back here, where the entries of
        # all of them are journaled (a fill must follow its placeholder in the journal).
        if self._dev_count >= self.device_stats_bound:
            self.flush_device_stats()

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

    # ------------------------------------------------------------------ modules (L0 / mix)

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
