"""The statistics thread (``capture::stats_worker``): statistics of large CPU tensors computed
while the training thread runs the next operators.

When torch leaves a core idle (fewer torch threads than cores; ``NUMPROBE_ASYNC_STATS=1``/``0``
forces it on/off), the statistics of large CPU tensors (``_ASYNC_MIN_BYTES``) in statistics mode
go to a second thread instead of being computed on the training thread: the entry is journaled
at once with a placeholder record, the training thread runs the next operators, and the
statistics follow as a fill record within milliseconds (a run killed in between keeps the
entry, with ``null`` statistics, like device statistics). Until its job is done the tensor's
storage is held and nothing may write into it: every call the mode sees that writes into its
arguments (``_guard_writes``: in-place methods and operators, ``out=``, ``inplace=True``,
batch-norm running statistics, collectives, ``backward``) first completes the jobs of the
storages it writes, running a job that has not started on the training thread. Writes the mode
cannot see (numpy views, a DDP reducer's thread) would race, so distributed runs keep the
synchronous path. The mode goes on the torch-function stack with the first job and comes off
once no job holds a storage; jobs are made only on the thread that called start(), whose stack
it is on.
"""
import os

import torch

from .. import _settings
from .._native import fingerprint as _fingerprint
from ._device_stats import _DEV_FLOATS

_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
_STORAGE = torch.UntypedStorage
# Statistics of float tensors (_device_stats._DEV_FLOATS, whose placeholder and fill make the
# synchronous record) from this size on may go to the statistics thread: below it the pass is
# shorter than handing it over.
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


class StatsThread:
    """The recorder's statistics-thread part (a mixin of ``Recorder``)."""

    #: Pause of the statistics thread before each job, in ms, applied to the sessions opened
    #: afterwards. Tests only: holding the thread back makes a missing write guard show as
    #: wrong statistics instead of depending on timing.
    stats_thread_delay_ms = None

    def _init_stats_thread(self):
        # On for the current session; jobs in flight by id, the placeholder of each cache key
        # in flight, job ids by storage (_cdata).
        self.async_stats = False
        self.async_jobs = {}  # id -> (cache key, version, sample, weak storage, storage cdata)
        self.async_keys = {}  # cache key -> (id, version, placeholder rec)
        self.async_storages = {}  # storage cdata -> [ids]

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

    def _tensor_async(self, v, key, version, storage, ptr, nbytes, dname, shape, rg):
        """A placeholder record of `v`, whose statistics the thread computes, or None if it is
        too small or of another dtype (the caller, ``_cached_tensor``, found no cached record
        under `key`)."""
        if nbytes < _ASYNC_MIN_BYTES or v.dtype not in _DEV_FLOATS:
            return None
        if not self._want_mode():
            # Writes on this thread would go unguarded: statistics taken here, now.
            return None
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
