"""Single API calls over MindSpore dtypes and argument kinds (statistics rules of dump-format
§3.3 and the records of §2.6.2), under numprobe's or msprobe's PrecisionDebugger.

usage: python ms_dtypes.py --tool numprobe|msprobe
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--tool", choices=["numprobe", "msprobe"], required=True)
args = p.parse_args()

import numpy as np
import mindspore as ms
from mindspore import Tensor, ops

ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
if args.tool == "msprobe":
    from mindspore import mint

    delattr(mint, "norm")  # msprobe's CPU fallback to ops.norm (see ms_tiny.py)
    from msprobe.mindspore import PrecisionDebugger
else:
    from numprobe.mindspore import PrecisionDebugger

dbg = PrecisionDebugger(config_path="config.json")
dbg.start()
ops.abs(Tensor(np.array([[3, -1], [4, 7]], np.int32)))  # integers: cast to float32, all four
ops.abs(Tensor(np.int32(-7)))  # 0-dim integer
ops.logical_not(Tensor(np.array([True, False])))  # Bool: max/min as booleans
ops.abs(Tensor(np.float32(2.5)))  # 0-dim float
ops.abs(Tensor(np.zeros((0, 3), np.float32)))  # empty
ops.abs(Tensor(np.array([1.1, 2.2, 3.3], np.float16)))  # results rounded to float16
x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
ops.cast(x, ms.float16)  # positional MindSpore dtype
ops.ones((2, 2), dtype=ms.int32)  # dtype keyword
ops.sum(x, dim=(0,), keepdim=True)  # tuple and bool keywords
ops.abs(Tensor(np.array([1.5, -2.0], np.float64)))  # Float64: cast to float32
ops.abs(Tensor(np.array([3 + 4j, 1j], np.complex64)))  # complex: magnitudes, Norm too
ops.abs(Tensor(np.array([1.0, np.nan, np.inf], np.float32)))  # NaN propagates
ops.clip_by_value(x, Tensor(np.float32(-1.0)), Tensor(np.float32(1.0)))
dbg.stop()
dbg.step()
