"""Running one dumped API call with torch on the CPU: the golden with msprobe's upcasting and the
device side in the original dtypes."""
import contextlib
import functools
import operator

import torch

# Raising the precision of the golden's floating inputs.
RAISE = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}
FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
KEEP_FP32_APIS = {"conv1d", "conv2d"}  # msprobe's HF32 APIs keep fp32 inputs in fp32
NOT_RAISED_APIS = {"type_as"}
NOT_DETACHED_APIS = {"resize_", "resize_as_", "set_", "transpose_", "t_", "squeeze_", "unsqueeze_"}
# Names msprobe refuses to replay (always added to the black list).
UNSUPPORTED_APIS = ["to", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                    "empty_with_format"]
UNSUPPORTED_PREFIXES = ("Distributed", "MindSpeed")
# Backward is replayed through this output of a tuple-returning API.
GRAD_INDEX = {"topk": 0, "npu_fusion_attention": 0}
NO_BACKWARD_APIS = {"repeat_interleave"}
NO_BACKWARD_UT_APIS = {"masked_select"}


class UnsupportedApi(Exception):
    pass


def _attr_path(root, dotted):
    try:
        return functools.reduce(getattr, dotted.split("."), root)
    except AttributeError:
        return None


def resolve(api_type, api_name):
    """The torch callable of a dump name's prefix and API name, or None."""
    if api_type == "Functional":
        fn = _attr_path(torch.nn.functional, api_name)
    elif api_type == "Torch":
        fn = _attr_path(torch, api_name)
    elif api_type == "Tensor":
        fn = _attr_path(torch.Tensor, api_name)
        if fn is None and api_name.startswith("__r") and hasattr(operator, "__" + api_name[3:]):
            # Reflected dunders missing on torch.Tensor: swap the operands.
            fwd = getattr(operator, "__" + api_name[3:])
            fn = lambda self, other: fwd(other, self)  # noqa: E731
    elif api_type == "Aten":
        fn = _attr_path(torch.ops.aten, api_name)
    elif api_type == "VF":
        fn = _attr_path(torch._VF, api_name)
    elif api_type == "NPU":
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            return None
        fn = _attr_path(torch.ops.npu, api_name) or _attr_path(torch_npu, api_name)
    else:
        fn = None
    return fn if callable(fn) else None


def _map(fn, value, depth=0):
    if isinstance(value, (list, tuple)):
        return type(value)(_map(fn, v, depth + 1) for v in value)
    if isinstance(value, torch.Tensor):
        return fn(value)
    return value


def _float_dtypes(value, in_kwargs, found, depth=0):
    if isinstance(value, (list, tuple)):
        for v in value:
            _float_dtypes(v, in_kwargs, found, depth + 1)
    elif isinstance(value, dict) and in_kwargs:
        for v in value.values():
            _float_dtypes(v, in_kwargs, found, depth + 1)
    elif isinstance(value, torch.Tensor) and value.dtype in RAISE:
        found.add(value.dtype)


def has_fp8(args, kwargs):
    found = []
    _map(lambda t: found.append(t.dtype in FP8) or t, [args, list(kwargs.values())])
    return any(found)


def golden_dtypes(args, kwargs, api_name):
    """(raise_dtype, autocast_dtype, mixed) msprobe derives from the call's floating inputs."""
    found = set()
    _float_dtypes(args, False, found)
    _float_dtypes(kwargs, True, found)
    raise_dtype = autocast = None
    mixed = False
    if len(found) == 1:
        (autocast,) = found
        raise_dtype = RAISE[autocast]
    elif len(found) >= 2:
        raise_dtype = torch.float32
        found.discard(torch.float32)
        # Deterministic choice where msprobe pops from a set.
        autocast = sorted(found, key=str)[0]
        mixed = True
    if api_name in NOT_RAISED_APIS:
        raise_dtype = None
    return raise_dtype, autocast, mixed


class Side:
    """Arguments of one side (golden or device) and the tensors whose grads are read back."""

    def __init__(self, args, kwargs, grad_args):
        self.args = args
        self.kwargs = kwargs
        self.grad_args = grad_args  # positional tensors in order, for backward

    def input_grads(self):
        return [t.grad if t is not None else None for t in self.grad_args]


def prepare(args, kwargs, api_name, need_backward, raise_dtype=None, golden=False):
    """Copies of the inputs for one side: cast (golden), detached, and for backward made
    non-leaf with retained grads so in-place APIs can run on them."""
    detach = api_name not in NOT_DETACHED_APIS
    grad_args = []

    def one(t, key=None, positional=False):
        wants_grad = need_backward and getattr(t, "_numprobe_requires_grad", False)
        c = t.clone()
        if FP8 and c.dtype in FP8:
            c = c.to(torch.float32) if golden else c
        elif raise_dtype is not None and c.dtype in RAISE and c.dtype != raise_dtype and not (
            api_name in KEEP_FP32_APIS and c.dtype == torch.float32
        ):
            c = c.to(raise_dtype)
        if detach and key != "out":
            c = c.detach()
        if wants_grad and c.is_floating_point():
            c.requires_grad_(True)
            c = (c * 1).type_as(c)
            c.retain_grad()
        if positional:
            grad_args.append(c)
        return c

    new_args = _map(lambda t: one(t, positional=True), args)
    new_kwargs = {k: _map(lambda t, k=k: one(t, key=k), v) for k, v in kwargs.items()}
    return Side(new_args, new_kwargs, grad_args)


def call(fn, side, autocast_dtype=None):
    ctx = contextlib.nullcontext()
    if autocast_dtype in (torch.float16, torch.bfloat16):
        ctx = torch.autocast("cpu", dtype=autocast_dtype)
    with ctx:
        return fn(*side.args, **side.kwargs)


def backward(out, grad, grad_index):
    target = out[grad_index] if grad_index is not None else out
    target.backward(grad)
