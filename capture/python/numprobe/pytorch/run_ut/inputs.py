"""Building an API's arguments from its dump records: the saved tensor when the dump has its
file (tensor mode), else random data drawn within the recorded Min/Max (statistics mode), the
way msprobe's checker generates them."""
import math

import numpy
import torch

from numprobe import _native

TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")
FLOAT_DTYPES = {
    "torch.float32", "torch.float", "torch.float64", "torch.double", "torch.float16",
    "torch.half", "torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e5m2",
}
# APIs whose integer inputs msprobe converts before running them on the CPU.
CONVERT_API = {"cross_entropy": ("torch.int32", "torch.int64"), "histc": ("torch.int64", "torch.float32")}


# APIs an NPU runs in HF32: msprobe rounds their fp32 inputs to HF32 for both sides.
HF32_APIS = {"conv1d", "conv2d"}


class InputError(Exception):
    pass


class Built:
    """What building the inputs of one call found out."""

    def __init__(self):
        self.all_real = True  # every tensor came from a saved file


def torch_dtype(name):
    dt = getattr(torch, name.split(".", 1)[1], None) if name and name.startswith("torch.") else None
    if not isinstance(dt, torch.dtype):
        raise InputError(f"unknown dtype {name!r}")
    return dt


def load_tensor(path):
    if path.endswith(".pt"):
        t = read_pt(path)
    elif path.endswith(".npy"):
        t = torch.from_numpy(numpy.load(path, allow_pickle=False))
    else:
        raise InputError(f"{path}: not a .pt or .npy file")
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{path}: holds a {type(t).__name__}, not a tensor")
    return t


def read_pt(path):
    """The tensor of a `.pt` file, read by numprobe's own reader (dumpfmt, in Rust): an order
    of magnitude cheaper than torch.load per file on dumps of many small tensors
    (benches/RESULTS.md), and nothing of the file is unpickled by Python."""
    try:
        dtype_name, shape, data = _native.read_pt(path)
    except (OSError, ValueError) as e:
        raise InputError(str(e)) from e
    dtype = torch_dtype(dtype_name)
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype).reshape(shape)


def to_hf32(t):
    """fp32 values rounded to HF32 (11 mantissa bits, round half up on the magnitude bits),
    still stored as fp32."""
    bits = t.contiguous().view(torch.int32)
    bits = (((bits >> 11) + 1) >> 1) << 12
    return bits.view(torch.float32)


def tensor_path(record, tensor_dir):
    """The saved tensor file of `record` in `tensor_dir`, or None when it has none there. The
    name comes from the dump, which may be a stranger's: it must name a file inside the tensor
    directory (dumpfmt's rule: no absolute path, no `..`, no link out, no FIFO), else the API
    is not replayed (its row says why) instead of reading another file of the machine."""
    name = record.get("data_name") or record.get("datapath")
    if not name or not tensor_dir:
        return None
    if not isinstance(name, str):
        raise InputError(f"data_name {name!r} is not a string")
    try:
        path = _native.resolve_data_name(tensor_dir, name)
    except (OSError, ValueError) as e:
        raise InputError(str(e)) from e
    return None if path is None else str(path)


def random_tensor(record):
    """Random data of the record's dtype and shape within [Min, Max]; the first element is Min
    and the last Max, so the extremes are always present (msprobe's rule)."""
    dtype_name = record.get("dtype")
    shape = tuple(record.get("shape") or ())
    dtype = torch_dtype(dtype_name)
    low = record.get("Min_except_inf_nan", record.get("Min"))
    high = record.get("Max_except_inf_nan", record.get("Max"))
    low_orig, high_orig = record.get("Min"), record.get("Max")
    gen_dtype = dtype
    if 0 in shape:
        return torch.empty(shape, dtype=dtype)
    if not isinstance(low, (int, float)) or not isinstance(high, (int, float)):
        raise InputError(f"Data info Min: {low} , Max: {high}, info type must be int or float.")
    if dtype == torch.bool:
        lo, hi = sorted((int(low), int(high)))
        return torch.randint(lo, hi + 1, shape) > 0
    if dtype_name in FLOAT_DTYPES:
        if math.isnan(high):
            return torch.full(shape, float("nan"), dtype=dtype)
        if high_orig and math.isinf(high):
            t = torch.full(shape, high, dtype=dtype)
            if t.dim() > 0:
                t[-1] = low
            return t
        gen_dtype = torch.float32 if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else dtype
        info = torch.finfo(gen_dtype)
        clip = lambda v: info.max if v == math.inf else info.min if v == -math.inf else v  # noqa: E731
        lo, hi = clip(low), clip(high)
        t = torch.rand(shape, dtype=gen_dtype) * (hi - lo) + lo
    elif "int" in dtype_name or "long" in dtype_name:
        t = torch.randint(int(low), int(high) + 1, shape, dtype=dtype)
    else:
        raise InputError(f"Dtype is not supported: {dtype_name}")
    flat = t.reshape(-1)
    if isinstance(high_orig, float) and math.isnan(high_orig):
        if flat.numel() <= 2:
            flat[0], flat[-1] = float("nan"), high
        else:
            flat[0], flat[1], flat[-1] = low, float("nan"), high
    else:
        flat[0], flat[-1] = low, high
        if isinstance(high_orig, float) and math.isinf(high_orig):
            flat[-1] = high_orig
        if isinstance(low_orig, float) and math.isinf(low_orig):
            flat[0] = low_orig
    t = flat.reshape(shape)
    if dtype != gen_dtype:
        t = t.to(dtype)
    return t


def build_tensor(record, tensor_dir, api_name, built):
    path = tensor_path(record, tensor_dir)
    if path:
        t = load_tensor(path)
    else:
        built.all_real = False
        t = random_tensor(record)
    conv = CONVERT_API.get(api_name)
    if conv and str(t.dtype) == conv[0]:
        t = t.to(torch_dtype(conv[1]))
    if api_name in HF32_APIS and t.dtype == torch.float32:
        t = to_hf32(t)
    # Gradients are attached later (executor), on per-side copies.
    t.requires_grad_(False)
    t._numprobe_requires_grad = bool(record.get("requires_grad"))
    return t


def build_value(value, tensor_dir, api_name, built, depth=0):
    """One argument from its record (tensor, scalar record, list, dict or None)."""
    if depth > 400:
        raise InputError("argument nested deeper than 400 levels")
    if value is None:
        return None
    if isinstance(value, list):
        return [build_value(v, tensor_dir, api_name, built, depth + 1) for v in value]
    if not isinstance(value, dict):
        raise InputError(f"Warning: {value} is not supported")
    kind = value.get("type")
    if kind in TENSOR_TYPES:
        return build_tensor(value, tensor_dir, api_name, built)
    if kind == "torch.Size":
        return torch.Size(value.get("value"))
    if kind == "slice":
        return slice(*value.get("value"))
    if kind == "ellipsis":
        return Ellipsis
    if kind == "torch.dtype":
        return torch_dtype(value.get("value"))
    if kind == "torch.device":
        # The replay runs on the CPU whatever device the run used.
        return "cpu"
    if kind == "numpy.ndarray":
        raise InputError("numpy.ndarray arguments are not supported")
    if isinstance(kind, str) and kind.startswith("numpy."):
        return getattr(numpy, kind.split(".", 1)[1])(value.get("value"))
    if kind is None and "value" not in value:
        # A record msprobe could not describe ({}): nothing to rebuild it from.
        raise InputError(f"Warning: {value} is not supported")
    return value.get("value")


def build_inputs(entry, tensor_dir, api_name):
    """(args, kwargs, built) of a forward entry."""
    built = Built()
    entry_args = list(entry.get("input_args") or [])
    if api_name == "cross_entropy" and len(entry_args) > 1 and isinstance(entry_args[1], dict):
        # Random targets must be valid class indices (or the ignore index).
        rec = dict(entry_args[1])
        if isinstance(rec.get("Min"), (int, float)) and rec["Min"] <= 0:
            rec["Min"] = 0
        entry_args[1] = rec
    # Keyword arguments are drawn before positional ones: msprobe's order, so a statistics-mode
    # API's random inputs are the ones msprobe draws from the same generator state.
    kwargs = {
        k: build_value(v, tensor_dir, api_name, built)
        for k, v in (entry.get("input_kwargs") or {}).items()
    }
    args = [build_value(a, tensor_dir, api_name, built) for a in entry_args]
    return args, kwargs, built


def build_outputs(records, tensor_dir):
    """The saved outputs of an entry, or None when any tensor output has no readable file."""
    out = []
    for rec in records or []:
        if isinstance(rec, dict) and rec.get("type") in TENSOR_TYPES:
            path = tensor_path(rec, tensor_dir)
            if path is None:
                return None
            out.append(load_tensor(path))
        elif isinstance(rec, dict) and "value" in rec and rec.get("type") in ("int", "float", "bool", "str"):
            out.append(rec["value"])
        elif rec is None:
            out.append(None)
        else:
            return None
    return out
