"""`python -m numprobe.pytorch run_ut|acc_check|multi_run_ut|multi_acc_check` with msprobe
26.2's options."""
import argparse
import collections
import csv
import io
import json
import os
import re
import sys
import time
from typing import Optional, Sequence

import torch

from numprobe import _native, _outfiles

from .dump import DumpError, dedup_forward, load_api_info
from .runner import Job, run_all

RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
RESULT_NAME = re.compile(r"^accuracy_checking_result_(\d{14})\.csv$")


class OptionError(Exception):
    pass


class RecordWriter:
    """Appends result and detail records to the two CSVs in whole records: lines are kept and
    written together at most every `interval` seconds (and at close), details first, so a
    killed run leaves whole records only and every API in the result file has its details
    (an API without a result line is replayed by -csv_path; one write per batch instead of
    two system calls per API)."""

    def __init__(self, result_file, details_file, interval=0.25):
        self.rf, self.df, self.interval = result_file, details_file, interval
        self.results, self.details = [], []
        self.last = time.monotonic()

    def add(self, result_line, detail_lines):
        self.results.append(result_line)
        self.details.extend(detail_lines)
        if time.monotonic() - self.last >= self.interval:
            self.flush()

    def flush(self):
        if self.details:
            self.df.write("".join(self.details))
            self.df.flush()
            self.details.clear()
        if self.results:
            self.rf.write("".join(self.results))
            self.rf.flush()
            self.results.clear()
        self.last = time.monotonic()


def build_parser(prog, multi):
    p = argparse.ArgumentParser(prog=prog, description="Replay a dump's APIs on the CPU and judge them "
                                "against a higher-precision golden (msprobe acc_check compatible).")
    p.add_argument("-api_info", "--api_info_file", dest="api_info_file", required=True,
                   help="dump.json of the run to check")
    p.add_argument("-o", "--out_path", dest="out_path", default="", help="folder for the result CSVs")
    p.add_argument("-save_error_data", dest="save_error_data", action="store_true",
                   help="save inputs and outputs of APIs that do not pass")
    p.add_argument("-j", "--jit_compile", dest="jit_compile", action="store_true",
                   help="accepted for compatibility (NPU jit compile; no effect on the CPU)")
    p.add_argument("-d", "--device", dest="device_id", nargs="+", type=int, default=[0],
                   help="accepted for compatibility (the replay runs on the CPU)")
    p.add_argument("-csv_path", "--result_csv_path", dest="result_csv_path", default="",
                   help="accuracy_checking_result_{timestamp}.csv of an interrupted run to continue")
    p.add_argument("-f", "--filter_api", dest="filter_api", action="store_true",
                   help="replay one call per API among calls with the same input dtypes/shapes/kwargs")
    p.add_argument("-config", "--config_path", dest="config_path", default="",
                   help="config.json with an acc_check section (white_list, black_list, error_data_path)")
    p.add_argument("-n", "--num_splits", dest="num_splits", type=int, default=8 if multi else 1,
                   choices=range(1, 65), metavar="{1..64}", help="worker processes")
    p.add_argument("--routing", choices=["26.2", "list"], default="26.2",
                   help="accuracy-standard routing: msprobe 26.2 (default) or the older list-driven one")
    p.add_argument("--seed-scope", dest="seed_scope", choices=["api", "run"], default="api",
                   help="where torch's generator is seeded with 1234 for random data: before each API "
                   "(default; rows do not depend on -n, -f, -csv_path or the lists) or once per process "
                   "as msprobe does (statistics-mode rows then equal msprobe's single-process run)")
    p.add_argument("--device-output", dest="device_output", choices=["saved", "rerun"], default="saved",
                   help="the device side of a tensor-mode dump: its saved outputs (default; judges what the run "
                   "computed, on any machine) or a re-run of the API on the saved inputs, as msprobe does (its "
                   "details then equal msprobe's where the run's kernels differ from a re-run's, e.g. on "
                   "strided inputs)")
    return p


def read_config(path):
    """(white_list, black_list, error_data_path) of a config.json's acc_check section."""
    if not path:
        return [], [], "./"
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise OptionError(f"{path}: cannot read config: {e}") from e
    section = cfg.get("acc_check") or cfg.get("run_ut") or {}
    out = []
    for key in ("white_list", "black_list"):
        v = section.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise OptionError(f"{path}: acc_check.{key} must be a list of strings")
        out.append(v)
    err_path = section.get("error_data_path", "./")
    if not isinstance(err_path, str) or not os.path.isdir(err_path):
        raise OptionError(f"{path}: acc_check.error_data_path {err_path!r} is not an existing folder")
    return out[0], out[1], err_path


def write_header(path, cells):
    _outfiles.replace(path, lambda f: csv.writer(f).writerow(cells), encoding="utf-8-sig", newline="")


def done_rows(result_path):
    """The result records an interrupted run already wrote."""
    with open(result_path, encoding="utf-8-sig", newline="") as f:
        return [row for row in list(csv.reader(f))[1:] if row]


# Statuses in the order the closing line lists them; others (none expected) follow sorted.
STATUS_ORDER = ("error", "warning", "pass", "SKIP")
NO_BACKWARD = " "


class Tally:
    """Forward and backward statuses of result records, counted apart: a backward error must
    show in the closing line and the exit status even when every forward row passes."""

    def __init__(self):
        self.apis = 0
        self.forward = collections.Counter()
        self.backward = collections.Counter()

    def add(self, cells):
        self.apis += 1
        self.forward[cells[1] if len(cells) > 1 else "?"] += 1
        self.backward[cells[2] if len(cells) > 2 else NO_BACKWARD] += 1

    def add_line(self, line):
        for cells in csv.reader(io.StringIO(line)):
            self.add(cells)

    def errors(self):
        return self.forward["error"] + self.backward["error"]

    @staticmethod
    def _counts(counter):
        keys = [k for k in STATUS_ORDER if counter[k]]
        keys += sorted(k for k in counter if k not in STATUS_ORDER and k != NO_BACKWARD and counter[k])
        return ", ".join(f"{k} {counter[k]}" for k in keys) or "none"

    def summary(self):
        """`forward error 2, pass 410, SKIP 2; backward error 5, pass 32` (APIs with no
        backward replayed are counted apart)."""
        text = f"forward {self._counts(self.forward)}; backward {self._counts(self.backward)}"
        if self.backward[NO_BACKWARD]:
            text += f" (no backward: {self.backward[NO_BACKWARD]})"
        return text


def save_tensors(folder, prefix, element):
    """msprobe's error-data layout: `{api}.{part}.{index}.pt`, index counting leaves."""
    index = 0

    def walk(x, depth=0):
        nonlocal index
        if depth > 400:
            return
        if isinstance(x, torch.Tensor):
            t = x.detach().contiguous().cpu()
            _outfiles.replace(os.path.join(folder, f"{prefix}.{index}.pt"), lambda f: torch.save(t, f), binary=True)
            index += 1
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v, depth + 1)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v, depth + 1)
        else:
            index += 1

    walk(element)


def main(argv: Optional[Sequence[str]] = None, prog: str = "run_ut", multi: bool = False,
         parser=None, replay=None) -> int:
    """Runs msprobe's run_ut (`multi`: multi_run_ut) on command-line arguments `argv`; the exit
    status: 0 when no row is an error, 1 when a forward or backward row is, 2 for bad options
    or unreadable inputs. `parser` and `replay(args, job, names, sink, keep_tensors)` replace
    the command line's parser and the replay of `names` (numprobe.cluster shards it over Ray;
    the CSVs are written here either way)."""
    args = (parser or build_parser(prog, multi)).parse_args(argv)
    try:
        return _run(args, replay)
    except (OptionError, DumpError, OSError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2


def _run(args, replay=None):
    if args.seed_scope == "run" and args.num_splits > 1:
        # Each API's draws depend on every API the process replayed before it, and workers
        # take APIs in no fixed order.
        raise OptionError("--seed-scope run replays on one process: use -n 1")
    white, black, error_root = read_config(args.config_path)
    forward, backward, tensor_dir = load_api_info(args.api_info_file)
    if args.filter_api:
        forward = dedup_forward(forward)
    stamp = time.strftime("%Y%m%d%H%M%S")
    if args.result_csv_path:
        result_path = args.result_csv_path
        m = RESULT_NAME.match(os.path.basename(result_path))
        if not m:
            raise OptionError("When continue acc_check, please do not modify the result csv name.")
        stamp = m.group(1)
        details_path = os.path.join(os.path.dirname(result_path), os.path.basename(result_path).replace(
            "result", "details"))
        for p in (result_path, details_path):
            if not os.path.isfile(p):
                raise OptionError(f"{p}: no such file to continue")
        earlier = done_rows(result_path)
    else:
        out = args.out_path or "./"
        os.makedirs(out, exist_ok=True)
        result_path = os.path.join(out, f"accuracy_checking_result_{stamp}.csv")
        details_path = os.path.join(out, f"accuracy_checking_details_{stamp}.csv")
        write_header(result_path, RESULT_HEADER[:4])
        write_header(details_path, _native.detail_header())
        earlier = []
    error_dir = None
    if args.save_error_data:
        error_dir = _outfiles.make_dir(error_root, f"ut_error_data{stamp}")
    print(f"run_ut result will be saved in {result_path}", file=sys.stderr)
    print(f"run_ut details will be saved in {details_path}", file=sys.stderr)

    skip = {row[0] for row in earlier}
    names = [n for n in forward if n not in skip]
    job = Job(forward, backward, tensor_dir, white, black, args.routing, args.seed_scope, args.device_output)
    tally = Tally()
    # Appending record by record keeps an interrupted run resumable with -csv_path; utf-8-sig
    # writes no BOM when appending to a non-empty file.
    with _outfiles.open_append(result_path, encoding="utf-8-sig", newline="") as rf, \
            _outfiles.open_append(details_path, encoding="utf-8-sig", newline="") as df:
        out = RecordWriter(rf, df)

        def sink(name, lines, failed, tensors):
            result_line, detail_lines = lines
            out.add(result_line, detail_lines)
            tally.add_line(result_line)
            if error_dir and failed and tensors:
                for part, element in tensors.items():
                    save_tensors(error_dir, f"{name}.{part}", element)

        try:
            if replay is None:
                run_all(job, names, sink, args.num_splits, keep_tensors=error_dir is not None)
            else:
                replay(args, job, names, sink, error_dir is not None)
        finally:
            out.flush()
    print(f"run_ut replayed {tally.apis} APIs: {tally.summary()}; results in {result_path}", file=sys.stderr)
    # The exit status judges the whole result file, so a resumed run still reports the errors
    # of the part written before the interruption.
    before = Tally()
    for row in earlier:
        before.add(row)
    if before.apis:
        print(f"run_ut: {before.apis} APIs were in the result file already: {before.summary()}", file=sys.stderr)
    return 1 if tally.errors() or before.errors() else 0
