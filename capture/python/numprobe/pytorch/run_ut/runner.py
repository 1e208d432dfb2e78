"""The replay of a dump's APIs: per API, golden and device outputs, their judgement and the CSV
records, run in order or on several worker processes."""
import collections
import multiprocessing
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ... import _settings
from . import compare as cmp
from . import executor as ex
from .dump import split_api_name
from .inputs import build_inputs, build_outputs, build_value

SEED = 1234
UNSUPPORTED_BACKWARD = "function with out=... arguments don't support automatic differentiation, skip backward."
NO_BACKWARD_RESULT = "This API does not have backward input data, skip backward."
NO_BACKWARD_UT = "This API does not support backward ut, skip backward."
MULTIPLE_BACKWARD = "Multiple backward is not supported."
FLOAT_OUT = {"torch.float16", "torch.bfloat16", "torch.float32", "torch.float64"}


class ApiResult:
    """The verdict of one API and what -save_error_data keeps of it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fwd_status = self.bwd_status = cmp.SPACE
        self.fwd_rows: List[Any] = []
        self.bwd_rows: List[Any] = []
        self.tensors: Dict[str, Any] = {}

    @classmethod
    def skipped(cls, name: str, message: str) -> "ApiResult":
        r = cls(name)
        r.fwd_status = r.bwd_status = "SKIP"
        r.fwd_rows = [cmp.blank_row("SKIP", message)]
        return r

    def settle(self) -> "ApiResult":
        """Waits for deferred detail rows and rolls their statuses up; raises what computing
        them raised."""
        if self.fwd_status is None:
            self.fwd_status = cmp.rollup(self.fwd_rows)
        if self.bwd_status is None:
            self.bwd_status = cmp.rollup(self.bwd_rows)
        return self

    def ready(self) -> bool:
        """Whether settle() would not wait."""
        return all(r.ready() for r in self.fwd_rows) and all(r.ready() for r in self.bwd_rows)

    def result_cells(self) -> List[str]:
        cells = [self.name, self.fwd_status, self.bwd_status]
        if self.fwd_status == "SKIP":
            cells.append(self.fwd_rows[0].message)
        elif self.bwd_status == "SKIP":
            cells.append(self.bwd_rows[0].message)
        return cells

    def lines(self) -> Tuple[str, List[str]]:
        """(result CSV record, detail CSV records) as text."""
        details = [r.line(f"{self.name}.forward.output.{i}") for i, r in enumerate(self.fwd_rows)]
        details += [r.line(f"{self.name}.backward.output.{i}") for i, r in enumerate(self.bwd_rows)]
        return cmp.csv_line(self.result_cells()), details

    def failed(self) -> bool:
        return self.fwd_status != "pass" or self.bwd_status not in ("pass", cmp.SPACE)


class Timer:
    """Seconds spent re-executing APIs versus judging them (for the overhead check)."""

    def __init__(self) -> None:
        self.execute = 0.0
        self.judge = 0.0


def _first_out_dtype(entry):
    outs = entry.get("output") or []
    if outs and isinstance(outs[0], dict) and outs[0].get("dtype") in FLOAT_OUT:
        return getattr(torch, outs[0]["dtype"].split(".", 1)[1])
    return None


class Replayed:
    """An API re-executed but not yet judged: what judging it needs."""

    __slots__ = ("name", "api_name", "message", "fp8_input", "bench_out", "device_out",
                 "bench_grads", "device_grads", "args", "kwargs", "grad")


def _seed():
    """torch.manual_seed(SEED) for a replay on the CPU: the CPU generator is the only one the
    replay draws from. (torch.manual_seed also queues the seed for CUDA, XPU and MTIA until
    they start, each time with a formatted copy of the call stack: tens of microseconds per
    API, more the deeper the caller.)

    By default seeded once per API, before its first draw: every later draw of the API (random
    APIs run on the golden and on the device, then the output gradients) continues the same
    stream in msprobe's order, so none repeats the input draws, and an API's rows do not depend
    on which APIs ran before it (-n, -f, -csv_path and white lists leave them unchanged).
    msprobe seeds once per process; seed scope "run" (Job) does the same."""
    torch.default_generator.manual_seed(SEED)


def execute_api(name, entry, bwd_entry, tensor_dir, timer=None, seed=True, device_output="saved"):
    """Re-runs one forward entry (and its backward); raises on failure. Without `seed` the
    draws continue the generator's stream (seed scope "run"). With `device_output` "rerun" the
    device output is always the re-run's, as in msprobe's acc_check, never the saved one."""
    t0 = time.perf_counter()
    api_type, api_name = split_api_name(name)
    fn = ex.resolve(api_type, api_name)
    if fn is None:
        raise ex.UnsupportedApi(f"API {name} not support for acc_check. SKIP.")
    if seed:
        _seed()
    args, kwargs, built = build_inputs(entry, tensor_dir, api_name)
    message = ""
    need_grad = "out" not in (entry.get("input_kwargs") or {})
    if not need_grad:
        message += UNSUPPORTED_BACKWARD
    if api_name in ex.NO_BACKWARD_APIS:
        need_grad = False
        message += NO_BACKWARD_RESULT
    if api_name in ex.NO_BACKWARD_UT_APIS:
        need_grad = False
        message += NO_BACKWARD_UT
    need_backward = bwd_entry is not None and need_grad
    fp8_input = ex.has_fp8(args, kwargs)

    raise_dtype, autocast_dtype, mixed = ex.golden_dtypes(args, kwargs, api_name)
    device_autocast = autocast_dtype if mixed else None
    out_dtype = _first_out_dtype(entry)
    if not mixed and out_dtype is not None and out_dtype != autocast_dtype:
        device_autocast = out_dtype

    golden = ex.prepare(args, kwargs, api_name, need_backward, raise_dtype, golden=True)
    bench_out = ex.call(fn, golden)
    saved = None
    if built.all_real and device_output == "saved":
        saved = build_outputs(entry.get("output"), tensor_dir)
    device = rerun_out = None
    if saved is None or need_backward:
        # Re-run in the original dtypes: the device output when none was saved, and the graph
        # the device gradients come from. Not re-seeded: a random API draws on from where the
        # golden left the stream, as msprobe's device run does after its CPU golden.
        device = ex.prepare(args, kwargs, api_name, need_backward)
        rerun_out = ex.call(fn, device, device_autocast)
    device_out = rerun_out
    if saved is not None:
        if isinstance(bench_out, (list, tuple)):
            device_out = saved
        elif saved:
            device_out = saved[0]

    bench_grads = device_grads = grad = None
    if need_backward and bench_out is not None:
        grad_index = ex.GRAD_INDEX.get(api_name)
        if grad_index is None and isinstance(bench_out, (list, tuple)):
            message += MULTIPLE_BACKWARD
        else:
            # Drawn after the forward runs, from the stream the inputs left off (not from a
            # re-seeded one: that would make the gradient an affine copy of the first input).
            # Every record is built, as msprobe does, and the first one is used.
            records = bwd_entry.get("input") or []
            grads = build_value(records if isinstance(records, list) else [records], tensor_dir, api_name, built)
            grad = grads[0] if grads else None
            bench_grad = grad
            if isinstance(grad, torch.Tensor) and grad.dtype in ex.RAISE:
                bench_grad = grad.to(ex.RAISE[grad.dtype])
            ex.backward(bench_out, bench_grad, grad_index)
            bench_grads = golden.input_grads()
            ex.backward(rerun_out, grad.clone() if isinstance(grad, torch.Tensor) else grad, grad_index)
            # The device gradients always come from the re-run: a backward entry's "output"
            # holds the gradients of the first output's autograd node, which for composite
            # APIs are inner tensors (a 3-D linear's 2-D matmul, cross_entropy's log_softmax),
            # not the gradients of the API's inputs.
            device_grads = device.input_grads()
    r = Replayed()
    r.name, r.api_name, r.message, r.fp8_input = name, api_name, message, fp8_input
    r.bench_out, r.device_out, r.bench_grads, r.device_grads = bench_out, device_out, bench_grads, device_grads
    r.args, r.kwargs, r.grad = args, kwargs, grad
    if timer is not None:
        timer.execute += time.perf_counter() - t0
    return r


def judge_api(r, routing="26.2", timer=None, defer=False, batch=None):
    """The ApiResult of a re-executed API; raises on failure. With `defer` the metrics of its
    tensors run on the metrics thread and the result needs `settle()` before use; its plain
    CPU outputs join `batch` when one is given (see compare.Batch)."""
    t0 = time.perf_counter()
    result = ApiResult(r.name)
    name, api_name = r.name, r.api_name
    if "dropout" in name:
        result.fwd_status = cmp.compare_dropout(r.bench_out, r.device_out)
    else:
        result.fwd_status, result.fwd_rows = cmp.compare_outputs(
            api_name, r.bench_out, r.device_out, r.fp8_input, routing, defer, batch)
    if r.bench_grads and r.device_grads:
        if "dropout" in name:
            result.bwd_status = cmp.compare_dropout(r.bench_grads[0], r.device_grads[0])
        else:
            result.bwd_status, result.bwd_rows = cmp.compare_outputs(
                api_name, r.bench_grads, r.device_grads, r.fp8_input, routing, defer, batch)
    if r.message:
        result.bwd_status = "SKIP"
        result.bwd_rows = [cmp.blank_row("SKIP", r.message)]
    result.tensors = {
        "forward.input": [r.args, list(r.kwargs.values())],
        "forward.output.bench": r.bench_out,
        "forward.output.device": r.device_out,
        "backward.input": r.grad,
        "backward.output.bench": r.bench_grads,
        "backward.output.device": r.device_grads,
    }
    if timer is not None:
        timer.judge += time.perf_counter() - t0
    return result


def replay_api(name: str, entry: Dict[str, Any], bwd_entry: Optional[Dict[str, Any]],
               tensor_dir: Optional[str], routing: str = "26.2", timer: Optional[Timer] = None,
               judge: bool = True) -> ApiResult:
    """Re-runs one forward entry (and its backward) and judges it; raises on failure."""
    r = execute_api(name, entry, bwd_entry, tensor_dir, timer)
    if not judge:
        return ApiResult(name)
    return judge_api(r, routing, timer)


class Job:
    """Everything a worker needs to replay APIs by name."""

    def __init__(self, forward: Dict[str, Dict[str, Any]], backward: Dict[str, Dict[str, Any]],
                 tensor_dir: Optional[str], white_list: Optional[Sequence[str]],
                 black_list: Optional[Sequence[str]], routing: str = "26.2", seed_scope: str = "api",
                 device_output: str = "saved") -> None:
        self.forward = forward
        self.backward = backward
        self.tensor_dir = tensor_dir
        self.white_list = list(white_list or [])
        self.black_list = list(black_list or []) + ex.UNSUPPORTED_APIS
        self.routing = routing
        # "api": seeded before each API; "run": once per process, before its first API, so the
        # draws run on across APIs in dump order as in msprobe's acc_check.
        self.seed_scope = seed_scope
        self._seeded = False
        # "saved": a tensor-mode dump's saved outputs are the device side; "rerun": the re-run in
        # the original dtypes is, as msprobe's acc_check (see execute_api).
        self.device_output = device_output

    def _skip_reason(self, name):
        prefix = name.split(".")[0]
        if prefix in ex.UNSUPPORTED_PREFIXES:
            return f"API {name} not support for acc_check. SKIP."
        _, api_name = split_api_name(name)
        if not api_name:
            return f"API {name} not support for acc_check. SKIP."
        if api_name in self.black_list or (self.white_list and api_name not in self.white_list):
            return f"API {api_name} in black list or not in white list. SKIP."
        return None

    def execute_one(self, name, timer=None):
        """A Replayed API to judge, or the ApiResult of one that needs no judging (a SKIP);
        never raises."""
        reason = self._skip_reason(name)
        if reason is not None:
            return ApiResult.skipped(name, reason)
        try:
            if self.seed_scope == "run" and not self._seeded:
                _seed()
                self._seeded = True
            return execute_api(name, self.forward[name], self.backward.get(name), self.tensor_dir, timer,
                               seed=self.seed_scope != "run", device_output=self.device_output)
        except Exception as e:  # noqa: BLE001 - any failure of one API is that API's SKIP row
            return ApiResult.skipped(name, str(e))

    def judge_one(self, item, timer=None, defer=False, batch=None):
        """The ApiResult of what execute_one returned (to `settle_one` when deferred; with a
        `batch`, once it is submitted); never raises."""
        if isinstance(item, ApiResult):
            return item
        try:
            return judge_api(item, self.routing, timer, defer, batch)
        except Exception as e:  # noqa: BLE001 - as in execute_one
            return ApiResult.skipped(item.name, str(e))

    def settle_one(self, result, timer=None):
        """A deferred ApiResult of judge_one once its metrics are done; never raises."""
        t0 = time.perf_counter()
        try:
            return result.settle()
        except Exception as e:  # noqa: BLE001 - as in execute_one
            return ApiResult.skipped(result.name, str(e))
        finally:
            if timer is not None:
                timer.judge += time.perf_counter() - t0

    def run_one(self, name, timer=None, judge=True):
        """The ApiResult of one API; never raises (a failure is msprobe's SKIP row)."""
        item = self.execute_one(name, timer)
        if not judge and not isinstance(item, ApiResult):
            return ApiResult(name)
        return self.judge_one(item, timer)


_JOB = None


def _worker_init(job, threads):
    global _JOB
    _JOB = job
    torch.set_num_threads(threads)


def _worker_run(name):
    return _finish(_JOB.run_one(name))


def _finish(r):
    """What a sink receives of an ApiResult: (lines, failed, tensors to save or None)."""
    failed = r.failed()
    return r.lines(), failed, (r.tensors if failed and r.tensors else None)


# Groups replayed ahead of the one whose rows are written: slack for the metrics thread (a
# late wake-up on a busy machine) without holding many APIs' tensors.
LOOKAHEAD = 2
# Most APIs with small outputs replayed before they are judged together: judging right after
# each API runs its code on caches torch just filled and leaves torch's code cold for the next
# API, which cost more than the judging itself on dumps of small tensors.
GROUP = 32
# On the metrics thread a group's small outputs are judged in one batch while torch runs the
# next group: smaller groups start the thread sooner and leave less to wait for at the end.
OVERLAP_GROUP = 8


def _small(item, keep_tensors):
    """Whether a replayed API holds only small tensors: outputs small enough to be judged
    inline (none goes to the metrics thread) and, when its inputs are kept too, small inputs;
    holding it in a group then costs little memory."""
    if isinstance(item, ApiResult):
        return True
    held = [item.bench_out, item.device_out, item.bench_grads, item.device_grads]
    if keep_tensors:
        held += [item.args, item.kwargs, item.grad]
    while held:
        value = held.pop()
        if isinstance(value, torch.Tensor):
            if value.numel() > cmp.DEFER_MIN_NUMEL:
                return False
        elif isinstance(value, (list, tuple)):
            held.extend(value)
        elif isinstance(value, dict):
            held.extend(value.values())
    return True


def _groups(job, names, timer, keep_tensors, size=GROUP):
    """The replayed APIs (or their SKIP results) in dump order, a list at a time: runs of up to
    `size` APIs holding small tensors, ended early by an API with a large one."""
    group = []
    for name in names:
        # No local keeps an API past its group: torch's next allocations should reuse its
        # memory (fresh pages cost page faults).
        group.append(job.execute_one(name, timer))
        if not keep_tensors and not isinstance(group[-1], ApiResult):
            # Only the outputs are judged: the inputs and autograd graphs go now.
            group[-1].args, group[-1].kwargs, group[-1].grad = (), {}, None
        if len(group) >= size or not _small(group[-1], keep_tensors):
            yield group
            group = []
    if group:
        yield group


def _run_overlapped(job, names, sink, timer, keep_tensors):
    """Each group's metrics run on the metrics thread while torch runs the next groups (its
    plain CPU outputs in one batch, others one at a time); results are settled and handed to
    the sink in dump order, LOOKAHEAD groups behind. On an interrupt the unsettled APIs are not
    written (-csv_path replays them)."""
    pending = collections.deque()  # per group, its deferred ApiResults in order
    for group in _groups(job, names, timer, keep_tensors, OVERLAP_GROUP):
        batch = cmp.Batch()
        started = collections.deque()
        for item in group:
            result = job.judge_one(item, timer, defer=True, batch=batch)
            if not keep_tensors:
                # Drop the result's own references now: only the batch or pending row keeps
                # the outputs, until its rows are settled. (Kept any longer, they would land
                # torch's next allocations on fresh pages: page faults.)
                result.tensors = {}
            started.append(result)
        if len(batch):
            batch.submit(job.routing)
        pending.append(started)
        group.clear()
        item = result = started = batch = None
        # Rows already computed are written at once (resume keeps them, their tensors go);
        # the oldest group is waited for when LOOKAHEAD groups are ahead of it.
        while pending:
            oldest = pending[0]
            while oldest and (len(pending) > LOOKAHEAD or oldest[0].ready()):
                done = oldest.popleft()
                sink(done.name, *_finish(job.settle_one(done, timer)))
            if oldest:
                break
            pending.popleft()
    for oldest in pending:
        for done in oldest:
            sink(done.name, *_finish(job.settle_one(done, timer)))


def spare_core() -> bool:
    """Whether torch leaves a core to the metrics thread (fewer torch threads than usable
    cores); with every core in torch's hands the metrics run inline, as they cost the same CPU
    either way. NUMPROBE_RUN_UT_OVERLAP=1/0 forces the answer."""
    forced = _settings.run_ut_overlap()
    if forced is not None:
        return forced
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return torch.get_num_threads() < cores


def run_all(job: Job, names: Sequence[str],
            sink: Callable[[str, Tuple[str, List[str]], bool, Optional[Dict[str, Any]]], Any],
            workers: int = 1, timer: Optional[Timer] = None, overlap: Optional[bool] = None,
            keep_tensors: bool = True) -> None:
    """Replays `names` in order and hands each result to `sink(name, lines, failed, tensors)`;
    with workers > 1 the APIs run on that many processes, results still arrive in dump order.
    With one process, `overlap` computes each API's metrics on the metrics thread while torch
    runs the next API (the rows are the same; None: when `spare_core()`). Without
    `keep_tensors` the sink may get None for the tensors of a failed API (for callers that
    save none)."""
    if workers <= 1 or len(names) <= 1:
        if overlap is None:
            overlap = spare_core()
        if overlap and len(names) > 1:
            _run_overlapped(job, names, sink, timer, keep_tensors)
            return
        for group in _groups(job, names, timer, keep_tensors):
            for item in group:
                result = job.judge_one(item, timer)
                if not keep_tensors:
                    result.tensors = {}
                sink(item.name, *_finish(result))
            group.clear()
            item = result = None
        return
    # Each worker keeps this process's thread count: CPU reductions split their work by thread
    # count, so any other count would change the last bits and -n would change the rows.
    threads = torch.get_num_threads()
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with ctx.Pool(workers, initializer=_worker_init, initargs=(job, threads)) as pool:
        for name, (lines, failed, tensors) in zip(names, pool.imap(_worker_run, names, chunksize=1)):
            sink(name, lines, failed, tensors)
