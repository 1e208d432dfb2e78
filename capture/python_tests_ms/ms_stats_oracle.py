"""Test oracle: MindSpore-flavour statistics (dump-format §3.3, §3.5) computed with numpy on a
tensor's host copy. numprobe's adapter used these until the Rust core took them over; they were
checked against live msprobe then, and now check `_native.Session.tensor` in a MindSpore session.

Statistics follow msprobe 26.2's MindSpore rules: Float16/Float32 in their own dtype; integers,
Float64 and `precision: high` cast to float32 first; Bool gives max/min as booleans; complex uses
the magnitudes; a 0-dim tensor repeats its value; Max/Min skip NaN as MindSpore's CPU kernels do. BFloat16 is widened to float32 for checksums
and files, as msprobe does.
"""
import zlib

import numpy as np

try:  # bf16 results are rounded with ml_dtypes, which MindSpore depends on
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

_NO_STATS = {"Max": None, "Min": None, "Mean": None, "Norm": None}


def _round_to(value, dtype_name):
    """Rounds a float32 result to the tensor's own low-precision dtype, as the device ops do."""
    if dtype_name == "Float16":
        return float(np.float16(value))
    if dtype_name == "BFloat16" and ml_dtypes is not None:
        return float(np.array(value, np.float32).astype(ml_dtypes.bfloat16))
    return float(np.float32(value))


def _float_stats(a32, dtype_name):
    """Max/Min/Mean/Norm of a float32 array, each rounded to `dtype_name`'s precision."""
    flat = a32.reshape(-1)
    # MindSpore's max/min kernels skip NaN (NaN only when every element is NaN); mean and
    # norm propagate it.
    mx = np.fmax.reduce(flat)
    mn = np.fmin.reduce(flat)
    mean = flat.mean(dtype=np.float32)
    norm = np.sqrt(np.dot(flat, flat)) if np.isfinite(mx) and np.isfinite(mn) else np.linalg.norm(flat)
    if dtype_name == "Float16":
        # MindSpore squares and sums a float16 tensor's norm in float16 precision: the rounded
        # sum overflows to inf above 65504 (the float64 accumulation inside does not matter).
        f16 = flat.astype(np.float16)
        sq = (f16 * f16).astype(np.float64).sum()
        norm = np.sqrt(np.float32(np.float16(sq)))
    return {
        "Max": _round_to(mx, dtype_name),
        "Min": _round_to(mn, dtype_name),
        "Mean": _round_to(mean, dtype_name),
        "Norm": _round_to(norm, dtype_name),
    }


def statistics(arr, dtype_name, precision="low"):
    """msprobe's MindSpore statistics of `arr` (the tensor's host copy; bf16 already widened)."""
    if arr.size == 0:
        return dict(_NO_STATS)
    if arr.dtype == np.bool_:
        return {"Max": bool(arr.max()), "Min": bool(arr.min()), "Mean": None, "Norm": None}
    if arr.ndim == 0:
        v = arr.item()
        if isinstance(v, complex):
            v = abs(v)
        return {"Max": v, "Min": v, "Mean": v, "Norm": v}
    if np.iscomplexobj(arr):
        mag = np.abs(arr)
        return {
            "Max": mag.max().item(),
            "Min": mag.min().item(),
            "Mean": np.mean(mag).item(),
            "Norm": np.linalg.norm(mag).item(),
        }
    if precision == "low" and dtype_name in ("Float16", "Float32", "BFloat16"):
        return _float_stats(np.ascontiguousarray(arr, dtype=np.float32), dtype_name)
    # Integers, Float64 and high precision: msprobe casts to Float32 before reducing.
    return _float_stats(np.ascontiguousarray(arr, dtype=np.float32), "Float32")


def crc32_hex(arr):
    return format(zlib.crc32(arr) if arr.size else 0, "08x")
