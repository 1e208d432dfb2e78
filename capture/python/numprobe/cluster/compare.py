"""`python -m numprobe.cluster compare TARGET_ROOT GOLDEN_ROOT --out DIR --address auto`: the
whole-run compare of `numprobe compare`, one Ray task per (step, rank) pair.

The three steps are the native engine's (`_native.run_compare_plan`, `run_compare_pair`,
`run_compare_finish`: the code `numprobe compare` runs on threads), so every file is the same.
A pair is done once its result record (`OUT/step{S}/rank{R}/pair_result.json`, written last
and atomically) is there: `--resume` skips those, and the closing step reads every pair's
record, wherever its task ran. A task whose worker or node is lost, or that fails with an
I/O error, is retried by Ray (`--max-retries`); a pair that cannot be compared (a broken
dump) is reported as `numprobe compare` reports it, not retried.
"""
import argparse
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import _native
from ._ray import RayMissing, connected

Pair = Tuple[Optional[int], int, str, str, int, bool]


def compare_pair(options: Dict[str, Any], timestamp: str, pair: Pair) -> Tuple[bool, str, int]:
    """One pair, on whichever node Ray runs it: (compared, table path or why not, error rows)."""
    return _native.run_compare_pair(options, timestamp, pair)


def _call(fn, *args):
    """What a Ray task runs: `fn` goes as an argument (any picklable callable, not only a
    plain function)."""
    return fn(*args)


def _int_list(text: str) -> List[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: steps and ranks are not negative")
    return values


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Compare two whole distributed runs on a Ray "
                                "cluster: one task per (step, rank) pair, the files of `numprobe compare`.")
    p.add_argument("target", help="the run under suspicion: a root of step*/rank*/ (or rank*/) dumps")
    p.add_argument("golden", help="the trusted run, laid out the same way")
    p.add_argument("-o", "--out", required=True, help="output folder every node can write")
    p.add_argument("--address", default=None,
                   help="Ray cluster to run on (`auto`: the one this machine belongs to; "
                   "default: a Ray instance started here)")
    p.add_argument("--step", type=_int_list, default=[], help="steps to compare (`0,2`; default: all)")
    p.add_argument("--rank", type=_int_list, default=[], help="ranks to compare (default: all)")
    p.add_argument("--resume", action="store_true",
                   help="skip the pairs an earlier run into the same folder finished (and reuse the "
                   "tensor rows of a pair it left half done); without --timestamp, that run's timestamp")
    p.add_argument("--timestamp", default=None, help="YYYYMMDDHHMMSS in the file names (default: now)")
    p.add_argument("--fuzzy-match", action="store_true", help="fuzzy matching of API names (msprobe's -fm)")
    p.add_argument("--data-mapping", default=None, metavar="MAP.yaml", help="msprobe's -dm")
    p.add_argument("--api-mapping", default=None, metavar="MAP.yaml", help="msprobe's -am")
    p.add_argument("--tolerance", type=float, default=0.0,
                   help="relative tolerance for the first-divergence analysis (0 = bit-exact)")
    p.add_argument("--pandas", choices=["2", "3"], default="2", help="which pandas msprobe ran with")
    p.add_argument("--xlsx", action="store_true", help="write the tables as .xlsx")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when error rows were found")
    p.add_argument("--max-retries", type=int, default=3,
                   help="times Ray runs a lost or failed pair again (default 3)")
    p.add_argument("--num-cpus", type=float, default=1.0, help="CPUs a pair's task reserves (default 1)")
    return p


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m numprobe.cluster compare",
         pair_task: Callable[[Dict[str, Any], str, Pair], Tuple[bool, str, int]] = compare_pair) -> int:
    """Exit status as `numprobe compare`'s: 0 no error rows, 1 error rows, 2 a pair could not be
    compared or the run could not start. `pair_task` is what each Ray task runs (tests wrap it)."""
    args = build_parser(prog).parse_args(argv)
    if args.max_retries < 0:
        print(f"{prog}: error: --max-retries must be at least 0", file=sys.stderr)
        return 2
    options = {
        "target": args.target, "golden": args.golden, "out": args.out,
        "steps": args.step, "ranks": args.rank, "resume": args.resume,
        "fuzzy_match": args.fuzzy_match, "tolerance": args.tolerance, "pandas": args.pandas,
        "xlsx": args.xlsx, "data_mapping": args.data_mapping, "api_mapping": args.api_mapping,
    }
    try:
        timestamp, pairs = _native.run_compare_plan(options, args.timestamp)
    except (ValueError, OSError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    todo = [p for p in pairs if not p[5]]
    if len(todo) < len(pairs):
        print(f"{prog}: {len(pairs) - len(todo)} of {len(pairs)} pairs already done, skipped (--resume)",
              file=sys.stderr)
    if todo:
        try:
            with connected(args.address) as ray:
                task = ray.remote(_call).options(
                    num_cpus=args.num_cpus, max_retries=args.max_retries,
                    # An I/O error (storage every node shares, a moment away) is worth another try;
                    # other exceptions are bugs or bad options and would fail again.
                    retry_exceptions=[OSError])
                # Largest pairs first, as on threads: the last task to finish then holds a small one.
                order = sorted(todo, key=lambda p: -p[4])
                refs = {task.remote(pair_task, options, timestamp, pair): pair for pair in order}
                pending = list(refs)
                while pending:
                    done, pending = ray.wait(pending, num_returns=1)
                    pair = refs[done[0]]
                    where = (f"step{pair[0]}/" if pair[0] is not None else "") + f"rank{pair[1]}"
                    try:
                        ok, text, errors = ray.get(done[0])
                    except Exception as e:  # noqa: BLE001 - retries spent: the pair has no record
                        print(f"{prog}: {where}: task failed after {args.max_retries} retries: {e}",
                              file=sys.stderr)
                        continue
                    if not ok:
                        print(f"{prog}: {where}: not compared: {text}", file=sys.stderr)
        except RayMissing as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
    try:
        origin, summary, code, lines = _native.run_compare_finish(options, timestamp)
    except (ValueError, OSError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    print(origin)
    for line in lines:
        print(line)
    print(f"summary:      {summary}")
    if code == 1 and args.exit_zero:
        return 0
    return code
