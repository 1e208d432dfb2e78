"""`python -m numprobe.cluster COMMAND ...`: numprobe's whole-run work sharded over a Ray cluster.

Commands:
  compare TARGET_ROOT GOLDEN_ROOT --out DIR --address auto
      `numprobe compare` of two whole runs, one Ray task per (step, rank) pair.
  run_ut -api_info FILE -o OUT --address auto   (also `acc_check`)
      the replay of `python -m numprobe.pytorch run_ut`, APIs sharded over Ray tasks.

Each task runs the native engine through this package, reading the dumps from storage every
node shares and writing into the output folder every node shares; the files are the same,
byte for byte, as the single-machine command's. Ray (`pip install ray`) is needed on every
node, with numprobe installed beside it.
"""
import sys
from typing import Optional, Sequence

COMMANDS = ("compare", "run_ut", "acc_check")


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print((__doc__ or "").strip(), file=sys.stderr)
        return 2
    if argv[0] == "compare":
        from .compare import main as compare_main

        return compare_main(argv[1:])
    from .run_ut import main as run_ut_main

    return run_ut_main(argv[1:], prog=f"python -m numprobe.cluster {argv[0]}")
