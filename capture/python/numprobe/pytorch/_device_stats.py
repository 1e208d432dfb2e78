"""Statistics computed on the tensor's own device (CUDA, NPU...), read back once per step.

msprobe's Max/Min/Mean/Norm are computed there with the same torch ops msprobe uses
(``_device_tensor``), each tensor's values go into a small device tensor, and the entry is
journaled at once with a placeholder record. All pending values are read back in one transfer
per device (``flush_device_stats``: at ``stop()``/step end, before the JSON files are written,
and when more than ``device_stats_bound`` tensors are pending), then journaled as one fill
record, so a step costs one host sync instead of one per tensor. A run killed between a hook
and the readback keeps those entries with ``null`` statistics (see capture/src/lib.rs).

``NUMPROBE_DEVICE_STATS`` (or ``Recorder.device_stats``) selects this: ``auto`` (default,
non-CPU tensors only), ``force`` (CPU tensors too: how the device path is tested on machines
without a GPU), ``off`` (copy every tensor to the host, as for CPU tensors).
``NUMPROBE_DEVICE_STATS_BOUND`` sets the bound (default 4096).
"""
import os

import torch

from .. import _settings
from ._values import _DTYPE_NAMES, _location

_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
# Dtypes whose statistics are computed on the device (others, complex and float8 among them,
# are copied to the host as CPU tensors are read: msprobe itself uses numpy for complex).
_DEV_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_DEV_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_DEVICE_STATS_MODES = ("auto", "force", "off")


class DeviceStats:
    """The recorder's device-statistics part (a mixin of ``Recorder``)."""

    def _init_device_stats(self):
        # Pending rows per device, their (pending id, kind) in the same order, and how many
        # host readbacks were made (tests count them).
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

    def _tensor_forced(self, v, entry, path):
        """`_tensor` under ``device_stats == "force"``: CPU tensors take the device path too."""
        dtype = v.dtype
        dname = _DTYPE_NAMES.get(dtype)
        if dname is None:
            dname = _DTYPE_NAMES[dtype] = str(dtype)
        rec = self._device_tensor(v, entry, path, dname, v.shape)
        if rec is None:
            return type(self)._tensor(self, v, entry, path)
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
