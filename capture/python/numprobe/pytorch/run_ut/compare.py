"""Judging golden against device outputs: one detail row per output, computed by the Rust
metrics of the `ulp` crate (numprobe._native.check_outputs for all of an API's outputs at once
in the common case, or check_outputs_async for the small outputs of several APIs at once on
the metrics thread; else check_output / check_output_async one output at a time)."""
import csv
import io
import re

import torch

from numprobe import _native

SPACE = " "
N_CELLS = 22  # detail cells after the API Name column
NUMPY_NAME = {
    torch.float16: "float16", torch.float32: "float32", torch.float64: "float64", torch.bool: "bool",
    torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
    torch.int64: "int64",
}
for _n in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _n):
        NUMPY_NAME[getattr(torch, _n)] = _n
FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
# Deferred outputs go to the metrics thread only from numpy's reduction block (8192 elements)
# up: handing a smaller one over (waking the thread) costs about what its metrics cost here.
DEFER_MIN_NUMEL = 8192


# Characters that make Python's csv writer quote a cell (excel dialect, QUOTE_MINIMAL).
_QUOTED = re.compile('[,"\r\n]')


def csv_line(cells):
    """One record as Python's csv module writes it (msprobe's writer)."""
    if all(type(c) is str for c in cells) and not _QUOTED.search("".join(cells)) and cells != [""]:
        # Nothing to quote: the writer would join the cells as they are.
        return ",".join(cells) + "\r\n"
    buf = io.StringIO()
    csv.writer(buf).writerow(cells)
    return buf.getvalue()


def name_cell(name):
    """The API Name cell of a detail record, as the csv writer writes it before other cells."""
    if _QUOTED.search(name) is None:
        return name
    return csv_line([name, ""])[:-3]


class Batch:
    """The outputs of several APIs, judged in one job on the metrics thread: one hand-over
    for all of them (waking the thread costs about what judging one small output does).
    `add` the APIs, `submit()`, then `result(i)` waits for API i's rows."""

    __slots__ = ("_items", "_keep", "_pending", "_results")

    def __init__(self):
        self._items, self._keep = [], []
        self._pending = self._results = None

    def __len__(self):
        return len(self._items)

    def add(self, api_name, sides, pairs, fp8_input):
        """Queues one API's (bench, device) side tuples; `pairs` holds the tensors they point
        into (kept until the batch is done). Returns the API's index in the batch."""
        self._items.append((api_name, sides, fp8_input))
        self._keep.append(pairs)
        return len(self._items) - 1

    def submit(self, routing):
        self._pending = _native.check_outputs_async(self._items, self._keep, routing)
        self._items = self._keep = None

    def done(self):
        return self._results is not None or self._pending.done()

    def result(self, i):
        """(status, [(status, message, tail)]) of API i, as check_outputs returns them;
        raises what check_outputs would have raised for it."""
        if self._results is None:
            self._results = self._pending.wait()
            self._pending = None
        ok, status, rows = self._results[i]
        if not ok:
            raise ValueError(status)
        return status, rows


class Row:
    """A detail row: status, message and its CSV text: cells, a native row, or the finished
    record after the name cell (`tail`). A deferred row is computed on the metrics thread,
    alone (`pending`) or as output k of API i of a Batch (`batched` = (batch, i, k));
    `settle()` waits for it."""

    __slots__ = ("status", "message", "_native", "_cells", "_pending", "_tail", "_batched")

    def __init__(self, status, message, native=None, cells=None, pending=None, tail=None, batched=None):
        self.status, self.message, self._native, self._cells = status, message, native, cells
        self._pending, self._tail, self._batched = pending, tail, batched

    def settle(self):
        if self._pending is not None:
            native = self._pending.wait()
            self._pending = None
            self._native, self.status, self.message = native, native.status, native.message
        elif self._batched is not None:
            batch, i, k = self._batched
            self.status, self.message, self._tail = batch.result(i)[1][k]
            self._batched = None
        return self

    def ready(self):
        if self._batched is not None:
            return self._batched[0].done()
        return self._pending is None or self._pending.done()

    def line(self, row_name):
        if self._batched is not None:
            self.settle()
        if self._tail is not None:
            return name_cell(row_name) + self._tail
        if self._native is not None or self._pending is not None:
            return self.settle()._native.csv_line(row_name)
        return csv_line([row_name] + self._cells)


def blank_row(status, message, bench_type=SPACE, npu_type=SPACE, error_rate=SPACE):
    cells = [SPACE] * N_CELLS
    cells[0], cells[1], cells[8] = bench_type, npu_type, error_rate
    cells[20], cells[21] = status, message
    return Row(status, message, cells=cells)


def _host(t):
    """Contiguous CPU memory numpy could read: bf16 (which numpy lacks, msprobe widens it when
    the device output is bf16) and fp8 become float32, exactly."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16 or (FP8 and t.dtype in FP8):
        t = t.to(torch.float32)
    return t.contiguous()


def _side(t, host):
    if host.dtype not in NUMPY_NAME:
        raise TypeError(f"{host.dtype} outputs cannot be compared")
    return (host.data_ptr(), host.numel(), NUMPY_NAME[host.dtype], list(host.shape), str(t.dtype))


def compare_tensor(api_name, bench, device, fp8_input, routing, defer=False):
    hb, hd = _host(bench), _host(device)
    if hb.is_complex() or hd.is_complex():
        return blank_row("error", f"{hd.dtype} outputs are not supported by numprobe's checker.",
                         str(bench.dtype), str(device.dtype))
    if defer and max(hb.numel(), hd.numel()) > DEFER_MIN_NUMEL:
        # The PendingRow holds hb/hd until the metrics thread is done reading them.
        pending = _native.check_output_async(api_name, _side(bench, hb), _side(device, hd), (hb, hd),
                                             fp8_input, routing)
        return Row(None, None, pending=pending)
    native = _native.check_output(api_name, _side(bench, hb), _side(device, hd), fp8_input, routing)
    # hb/hd stay alive until check_output returned: Rust read their memory in place.
    return Row(native.status, native.message, native=native)


def compare_one(api_name, bench, device, fp8_input, routing="26.2", defer=False):
    """msprobe's per-output dispatch (`_compare_core`); with `defer` a large tensor's row is
    computed on the metrics thread (its status is None until settled)."""
    if bench is None:
        return blank_row("SKIP", "Bench output is None, skip this test.")
    if not isinstance(bench, type(device)):
        return blank_row("error", "bench and npu output type is different.")
    if isinstance(bench, torch.Tensor):
        return compare_tensor(api_name, bench, device, fp8_input, routing, defer)
    if isinstance(bench, (bool, int, float, str)):
        if bench != device:
            return blank_row("error", "", str(type(bench)), str(type(device)))
        return blank_row("pass", "", str(type(bench)), str(type(device)), error_rate=0)
    return blank_row("error", f"Unexpected output type in compare_core: {type(bench)}")


# Tensor dtypes numpy reads in place: (numpy name, torch name).
PLAIN = {dt: (name, str(dt)) for dt, name in NUMPY_NAME.items()}
Tensor = torch.Tensor


def _plain_sides(pairs, limit=DEFER_MIN_NUMEL):
    """The (bench, device) side tuples of output pairs that are all contiguous CPU tensors of
    dtypes numpy reads in place (what `compare_tensor` judges without a host copy), none
    larger than `limit` elements (None: any size); None when one is not."""
    sides = []
    for b, d in pairs:
        if type(b) is not Tensor or type(d) is not Tensor:
            return None
        pb, pd = PLAIN.get(b.dtype), PLAIN.get(d.dtype)
        if pb is None or pd is None or not (b.is_cpu and d.is_cpu and b.is_contiguous() and d.is_contiguous()):
            return None
        nb, nd = b.numel(), d.numel()
        if limit is not None and (nb > limit or nd > limit):
            return None
        sides.append(((b.data_ptr(), nb, pb[0], b.shape, pb[1]), (d.data_ptr(), nd, pd[0], d.shape, pd[1])))
    return sides


def compare_outputs(api_name, bench, device, fp8_input, routing="26.2", defer=False, batch=None):
    """(status, rows) of an output or a list of outputs (`_compare_core_wrapper`); with
    `defer`, (None, rows) whose status `rollup(rows)` gives once the metrics are done (or
    the status at once when every row was computed inline). With a `batch` as well, plain
    outputs of any size join it instead of being judged here (the caller submits it)."""
    if isinstance(bench, (list, tuple)):
        if not isinstance(device, (list, tuple)) or len(bench) > len(device):
            return "error", [blank_row("error", "bench and npu output structure is different.")]
        pairs = list(zip(bench, device))
    else:
        pairs = [(bench, device)]
    batched = defer and batch is not None
    sides = _plain_sides(pairs, None if batched else DEFER_MIN_NUMEL) if pairs else None
    if sides is not None and batched:
        i = batch.add(api_name, sides, pairs, fp8_input)
        return None, [Row(None, None, batched=(batch, i, k)) for k in range(len(sides))]
    if sides is not None:
        # The common case in one native call: rows and CSV text, no per-output Python. The
        # tensors stay alive in `pairs` until it returned: Rust reads their memory in place.
        status, rows = _native.check_outputs(api_name, sides, fp8_input, routing)
        return status, [Row(s, m, tail=t) for s, m, t in rows]
    rows = [compare_one(api_name, b, d, fp8_input, routing, defer) for b, d in pairs]
    return (None if defer else rollup(rows)), rows


def rollup(rows):
    """The status of an API's outputs from their rows (waiting for deferred ones)."""
    return _native.rollup_statuses([r.settle().status for r in rows])


def compare_dropout(bench, device):
    """Dropout outputs are random: only the share of zeros is compared (no detail row)."""
    n = bench.numel()
    if n < 100:
        return "pass"
    zeros_b = int((bench == 0).sum())
    zeros_d = int((device.detach().cpu() == 0).sum())
    return "pass" if abs(zeros_b - zeros_d) / n < 0.1 else "error"
