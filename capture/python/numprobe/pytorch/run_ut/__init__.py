"""msprobe's accuracy pre-check (run_ut / acc_check) for PyTorch dumps.

Each forward API entry of a dump.json is re-run with torch on the CPU with its floating inputs
raised (fp16/bf16 -> fp32, fp32 -> fp64) to give the golden; the device output is the saved
output tensor when the dump has it, else the same call in the original dtypes. Gradients are
replayed from the backward entry's incoming gradient. The metrics and verdicts are the `ulp`
crate's (numprobe._native.check_output); the CSVs are msprobe's
accuracy_checking_result_/details_{timestamp}.csv. Random draws (statistics-mode inputs,
random APIs, output gradients) follow msprobe's order from a per-API seed, or with
--seed-scope run from one seed per run as msprobe's (see runner._seed).
Exit status: 0 no error row, 1 a forward or backward error row, 2 could not run.

    python -m numprobe.pytorch run_ut -api_info dump.json -o OUT [-n 4] [-csv_path ...]
"""
from .cli import main
from .runner import ApiResult, Job, Timer, replay_api, run_all

__all__ = ["main", "ApiResult", "Job", "Timer", "replay_api", "run_all"]
