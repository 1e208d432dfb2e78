"""Types of ``numprobe._native``, the Rust extension module (capture/py/src).

Pointers are the integer addresses of contiguous CPU memory the caller keeps alive for the
call (``tensor.data_ptr()``, ``array.ctypes.data``), with its length in bytes."""
import os
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

_Path = Union[str, os.PathLike[str]]
#: A statistic handed to ``Session.fill``.
_Stat = Union[None, bool, int, float]
#: One side of an accuracy comparison: (data_ptr, numel, numpy dtype name, shape, torch dtype
#: name), e.g. ``(t.data_ptr(), t.numel(), "float32", [2, 3], "torch.bfloat16")``.
_Side = Tuple[int, int, str, Sequence[int], str]
#: (status, message, CSV record after the API Name cell) of one detail row.
_RowTexts = Tuple[str, str, str]

class TensorRec:
    """A finished tensor record, opaque to Python: placed inside entry bodies."""

class StackFrames:
    """A call stack's lines, rendered once for every step's journal and stack.json."""

    def __init__(self, lines: Sequence[str]) -> None: ...
    def lines(self) -> List[str]: ...
    def __len__(self) -> int: ...

class CallSites:
    """The stack lines of the call sites seen so far, by key, kept with their code objects."""
    def __init__(self) -> None: ...
    def get(self, key: bytes) -> Optional[StackFrames]: ...
    def insert(self, key: bytes, frames: StackFrames, codes: Any) -> None: ...
    def __len__(self) -> int: ...

class Walker:
    """What the native walk of API values needs of torch, built once per recorder settings."""
    def __init__(self, tensor: type, parameter: type, strided: Any, float32: Any,
                 dtypes: List[Tuple[Any, str]], cache_min_bytes: int,
                 torch_order_below_bytes: int, storage: type, tensors: bool,
                 torch_order: bool, async_min_bytes: Optional[int] = None,
                 to_dlpack: Any = None,
                 dlpack_dtypes: Sequence[Tuple[Tuple[int, int, int], int]] = (),
                 shim: Optional[TorchShim] = None,
                 shim_dtypes: Sequence[Tuple[int, int]] = ()) -> None: ...

class TorchShim:
    """numprobe's torch reader (numprobe/pytorch/torch_shim.cpp) built for the running torch."""
    @staticmethod
    def load(path: _Path, built_for: str, tensor_base: type) -> TorchShim: ...
    @property
    def path(self) -> str: ...
    def read(self, t: Any) -> Optional[Dict[str, Any]]: ...
    def add_post_hook(self, t: Any, hook: Any) -> Optional[bool]: ...
    def mean_norm(self, t: Any) -> Optional[Tuple[float, float]]: ...
    def grad_enabled(self) -> bool: ...
    def chunks_on_threads(self, n: int, grain: int) -> List[Tuple[int, int, bool]]: ...

class Session:
    """The capture of one rank directory: the crash-safe journal, statistics, tensor files."""

    def __init__(
        self,
        dir: _Path,
        task: str,
        level: str,
        framework: str,
        dump_data_dir: Optional[str],
        extra_info: bool,
        summary_mode: str,
        precision: str = "low",
        torch_threads: Optional[int] = None,
        *,
        fsync: bool = False,
        stats_thread_delay_ms: Optional[int] = None,
        keep_journal: bool = False,
    ) -> None: ...
    def tensor(
        self,
        ptr: int,
        nbytes: int,
        dtype: str,
        shape: Sequence[int],
        requires_grad: Optional[bool],
        data_name: Optional[str] = None,
        stats: bool = True,
        mean_norm: Optional[Tuple[float, float]] = None,
    ) -> TensorRec: ...
    def tensor_async(
        self,
        ptr: int,
        nbytes: int,
        dtype: str,
        shape: Sequence[int],
        requires_grad: Optional[bool],
        owner: object,
    ) -> Tuple[TensorRec, int]: ...
    def reap(
        self, wait_for: Optional[Sequence[int]] = None, all: bool = False
    ) -> List[Tuple[int, Optional[TensorRec]]]: ...
    def pending_tensor(
        self,
        dtype: str,
        shape: Sequence[int],
        requires_grad: Optional[bool],
        data_name: Optional[str] = None,
        crc: Optional[Tuple[int, int]] = None,
    ) -> Tuple[TensorRec, int]: ...
    def fill(self, rows: Sequence[Tuple[int, _Stat, _Stat, _Stat, _Stat]]) -> None: ...
    def pending_count(self) -> int: ...
    def save_tensor(
        self,
        path: _Path,
        ptr: int,
        nbytes: int,
        dtype: str,
        shape: Sequence[int],
        location: str = "cpu",
    ) -> None: ...
    def entry(self, name: str, body: Dict[str, Any], reinsert: bool = False,
              stack_group: Optional[int] = None) -> None: ...
    def set_walker(self, walker: Walker) -> None: ...
    def api_input(self, name: str, args: Sequence[Any], kwargs: Dict[str, Any], recorder: Any,
                  stack_group: Optional[int] = None, lazy_tf: Any = None) -> bool: ...
    def api_output(self, name: str, out: Any, recorder: Any, lazy_tf: Any = None) -> None: ...
    def lists_entry(self, name: str, lists: Sequence[Tuple[str, Sequence[Any]]],
                    recorder: Any, lazy_tf: Any = None) -> None: ...
    def remove(self, name: str) -> None: ...
    def stack(self, name: str, frames: Union[StackFrames, Sequence[str]]) -> int: ...
    def stack_ref(self, name: str, group: int) -> None: ...
    def site_group(self, key: bytes) -> Optional[int]: ...
    def stack_site(self, name: str, key: bytes, frames: StackFrames) -> int: ...
    def construct(self, name: str, parent: Optional[str] = None) -> None: ...
    def has_entry(self, name: str) -> bool: ...
    def write_json(self) -> bool: ...
    def close(self) -> None: ...

class ApiCalls:
    def __init__(self, recorder: Any, counters: Dict[str, int], extra_info: bool,
                 risk_level: str, core: FrozenSet[str], low_risk: FrozenSet[str],
                 device_stats_bound: int, tensor: type,
                 torch_c: Tuple[Any, Any, Any, Any, Any, Any, Any],
                 sites: CallSites, shim: Optional[TorchShim] = None) -> None: ...
    def call(self, orig: Any, code: Any, prefix: str, name: str, key: str,
             args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any: ...

def backward_node(out: Any, tensor: type, prefix: str, name: str, args: Sequence[Any],
                  kwargs: Dict[str, Any]) -> Any: ...

def busy() -> bool: ...
def set_busy(v: bool) -> None: ...
#: (stage, nanoseconds, laps) of each stage of a recorded call since the last call, reset;
#: empty unless the module was built with the ``stage-timers`` feature.
def stage_times() -> List[Tuple[str, int, int]]: ...
def dense(shape: Sequence[int], strides: Sequence[int]) -> bool: ...
def fingerprint(ptr: int, nbytes: int) -> int: ...
def stack_key(frame: Any, skip: int) -> bytes: ...
def torch_order_mean_norm(ptr: int, nbytes: int, threads: int) -> Tuple[float, float]: ...
def recover(dir: _Path) -> List[Tuple[str, int, int, int]]: ...
def wait_durable() -> None: ...
def shim_dtypes(shim: TorchShim, empty: Any, dtypes: Sequence[Any]) -> List[Tuple[int, int]]: ...
def dlpack_dtypes(to_dlpack: Any, empty: Any, dtypes: Sequence[Any]
                  ) -> List[Tuple[Tuple[int, int, int], int]]: ...
def kernel_statistics(dir: _Path, md5: bool = False) -> int: ...

class DetailRow:
    """The detail row of one output (``accuracy_checking_details_*.csv``)."""

    @property
    def status(self) -> str: ...
    @property
    def message(self) -> str: ...
    def cells(self) -> List[str]: ...
    def csv_line(self, row_name: str) -> str: ...
    def as_dict(self) -> List[Tuple[str, str]]: ...

class PendingRow:
    """A detail row computed on the metrics thread."""

    def wait(self) -> DetailRow: ...
    def done(self) -> bool: ...

class PendingBatch:
    """The detail rows of several APIs computed on the metrics thread."""

    def wait(self) -> List[Tuple[bool, str, List[_RowTexts]]]: ...
    def done(self) -> bool: ...

def check_output(
    api_name: str, bench: _Side, device: _Side, fp8_input: bool = False, routing: str = "26.2"
) -> DetailRow: ...
def check_output_async(
    api_name: str,
    bench: _Side,
    device: _Side,
    keep: object,
    fp8_input: bool = False,
    routing: str = "26.2",
) -> PendingRow: ...
def check_outputs(
    api_name: str,
    pairs: Sequence[Tuple[_Side, _Side]],
    fp8_input: bool = False,
    routing: str = "26.2",
) -> Tuple[str, List[_RowTexts]]: ...
def check_outputs_async(
    items: Sequence[Tuple[str, Sequence[Tuple[_Side, _Side]], bool]],
    keep: object,
    routing: str = "26.2",
) -> PendingBatch: ...
def rollup_statuses(statuses: Sequence[str]) -> str: ...
def standard_for(
    api_name: str, out_dtype: str, in_dtype: str = "torch.float32", routing: str = "26.2"
) -> str: ...
def bare_api_name(full: str) -> Optional[str]: ...
def detail_header() -> List[str]: ...
def read_pt(path: _Path) -> Tuple[str, List[int], bytearray]: ...

#: One planned pair of a whole-run compare: (step or None, rank, target rank dir, golden rank
#: dir, bytes the pair reads, done by an earlier run).
_RunPair = Tuple[Optional[int], int, str, str, int, bool]

def run_compare_plan(
    options: Dict[str, Any], timestamp: Optional[str] = None
) -> Tuple[str, List[_RunPair]]:
    """Plans a whole-run compare (options: target, golden, out, steps, ranks, resume,
    fuzzy_match, tolerance, pandas, xlsx, data_mapping, api_mapping): (timestamp, pairs)."""
def run_compare_pair(
    options: Dict[str, Any], timestamp: str, pair: _RunPair
) -> Tuple[bool, str, int]:
    """Compares one pair and writes its files and result record: (compared, table path or
    why not, error rows)."""
def run_compare_finish(
    options: Dict[str, Any], timestamp: str
) -> Tuple[str, str, int, List[str]]:
    """Writes summary.md, run_summary.json and the -da JSON from the pairs' records:
    (origin line, summary path, exit status, per-pair lines)."""
