"""`_native.Session.tensor` in a MindSpore session against the numpy oracle of msprobe's
MindSpore rules (`ms_stats_oracle.py`), on `asnumpy()`-like buffers of every dtype the adapter
hands over: Max/Min, checksums and record keys equal, Mean/Norm within the rounding of the
tensor's dtype (the oracle reduces in float32 in numpy's order, the Rust core in MindSpore's
CPU order, which test_ms_order.py checks bit for bit against MindSpore).
Complex64 magnitudes: numpy's SIMD `abs` is not correctly rounded (about a third of the values
are one float32 ulp off on AVX-512 machines), the Rust core's `hypot` is, so their Max/Min may
differ by that ulp."""
import json
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ms_stats_oracle import crc32_hex, ml_dtypes, statistics  # noqa: E402

from numprobe import _native  # noqa: E402

# Relative tolerance of Mean/Norm: a few float32 ulps of the magnitude, or one ulp of the
# half-precision dtype the result is rounded to (one rounding against two).
REL = {"Float16": 2.0 ** -10, "BFloat16": 2.0 ** -7}


def _cases():
    rng = np.random.default_rng(7)
    big = rng.standard_normal(40_000).astype(np.float32) * 3
    with_nan = big[:1000].copy()
    with_nan[[3, 500]] = np.nan
    with_nan[7] = np.inf
    cases = [
        ("Float32", big.reshape(200, 200)),
        ("Float32", with_nan),
        ("Float32", np.array([np.nan, np.nan], np.float32)),
        ("Float32", np.array([-np.inf, 2.0, np.inf], np.float32)),
        ("Float32", np.float32(2.5).reshape(())),
        ("Float32", np.float32("nan").reshape(())),
        ("Float32", np.zeros((0, 3), np.float32)),
        ("Float16", (rng.standard_normal(3000) * 10).astype(np.float16)),
        ("Float16", np.array([1.1, np.nan, -2.2], np.float16)),
        ("Float64", rng.standard_normal((30, 7)) * 1e3),
        ("Float64", np.array([1.5, np.nan, -1e300], np.float64)),
        ("Int32", rng.integers(-1000, 1000, (17, 5), dtype=np.int32)),
        ("Int64", np.array([[40, -20], [30, 10]], np.int64)),
        ("Int64", np.int64(-7).reshape(())),
        ("UInt8", rng.integers(0, 255, 999, dtype=np.uint8)),
        ("Int8", rng.integers(-128, 127, 64, dtype=np.int8)),
        ("Int16", rng.integers(-3000, 3000, 64, dtype=np.int16)),
        ("Bool", np.array([True, False, True])),
        ("Bool", np.array(True)),
        ("Complex64", (rng.standard_normal(50) + 1j * rng.standard_normal(50)).astype(np.complex64)),
        ("Complex128", rng.standard_normal(20) + 1j * rng.standard_normal(20)),
        ("Complex64", np.complex64(3 + 4j).reshape(())),
        ("Complex64", np.complex64(0.1 + 0.2j).reshape(())),
        # Float8 arrives as its float32 copy (msprobe casts before numpy sees it).
        ("Float8E4M3FN", np.array([0.5, -1.0, 448.0], np.float32)),
    ]
    if ml_dtypes is not None:
        b = (rng.standard_normal(5000) * 4).astype(ml_dtypes.bfloat16).astype(np.float32)
        cases.append(("BFloat16", b.reshape(50, 100)))
        cases.append(("BFloat16", np.array([1.5, np.nan, -2.25], np.float32)))
        cases.append(("BFloat16", np.float32(0.375).reshape(())))
    return cases


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(b):
        return math.isnan(a)
    return a == b and type(a) is type(b)


def _near(a, b, rel, scale):
    if not (isinstance(a, float) and isinstance(b, float)):
        return _same(a, b)
    if not (math.isfinite(a) and math.isfinite(b)):
        return _same(a, b)
    return abs(a - b) <= rel * max(abs(a), abs(b), scale)


# The oracle's numpy reductions warn on the NaN/inf and float64-overflow cases on purpose.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("mode", ["statistics", "md5"])
@pytest.mark.parametrize("precision", ["low", "high"])
def test_native_records_match_numpy_oracle(tmp_path, mode, precision):
    cases = _cases()
    s = _native.Session(str(tmp_path), "statistics", "L1", "mindspore", None, True, mode,
                        precision)
    for i, (dtype, arr) in enumerate(cases):
        arr = np.ascontiguousarray(arr).reshape(arr.shape)
        rec = s.tensor(arr.ctypes.data, arr.nbytes, dtype, list(arr.shape), None,
                       f"T.{i}.npy" if i % 2 else None)
        s.entry(f"T.{i}.forward", {"input_args": [rec]})
    s.close()
    with open(tmp_path / "dump.json") as f:
        data = json.load(f)["data"]
    errs = []
    for i, (dtype, arr) in enumerate(cases):
        got = data[f"T.{i}.forward"]["input_args"][0]
        want = {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(arr.shape)}
        want.update(statistics(arr, dtype, precision))
        if i % 2:
            want["data_name"] = f"T.{i}.npy"
        if mode == "md5":
            want["md5"] = crc32_hex(np.ascontiguousarray(arr))
        if list(got) != list(want):
            errs.append(f"{i} {dtype}: keys {list(got)} != {list(want)}")
            continue
        mags = [abs(v) for v in (want["Max"], want["Min"])
                if isinstance(v, float) and math.isfinite(v)]
        scale = max(mags, default=0.0)
        rel = REL.get(dtype, 4e-7) if precision == "low" else 4e-7
        for k, v in want.items():
            if k in ("Mean", "Norm"):
                ok = _near(got[k], v, rel, scale)
            elif k in ("Max", "Min") and dtype == "Complex64" and arr.ndim:
                ok = _near(got[k], v, 2.0 ** -23, 0.0)
            else:
                ok = _same(got[k], v)
            if not ok:
                errs.append(f"{i} {dtype} {arr.shape}.{k}: {got[k]!r} != {v!r}")
    assert not errs, errs


def test_buffer_of_the_wrong_size_is_refused(tmp_path):
    s = _native.Session(str(tmp_path), "statistics", "L1", "mindspore", None, True,
                        "statistics", "low")
    arr = np.zeros(3, np.float32)
    with pytest.raises(ValueError):
        s.tensor(arr.ctypes.data, arr.nbytes, "Float64", [3], None)
    s.close()
