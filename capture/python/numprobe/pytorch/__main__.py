"""`python -m numprobe.pytorch COMMAND ...`

Commands: run_ut (msprobe 26.2's acc_check, also accepted by that name), multi_run_ut
(multi_acc_check), which replays on -n worker processes (default 8), and build-torch-shim,
which compiles numprobe's reader of torch tensors against the installed torch (captures then
read each tensor in one native call; ``_torch_shim.py``).
"""
import sys
from typing import Optional, Sequence

COMMANDS = {
    "run_ut": False,
    "acc_check": False,
    "multi_run_ut": True,
    "multi_acc_check": True,
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "build-torch-shim":
        from ._torch_shim import main as build_main

        return build_main(argv[1:])
    if not argv or argv[0] not in COMMANDS:
        print((__doc__ or "").strip(), file=sys.stderr)
        return 2
    from .run_ut.cli import main as run_ut_main

    return run_ut_main(argv[1:], prog=f"python -m numprobe.pytorch {argv[0]}", multi=COMMANDS[argv[0]])


if __name__ == "__main__":
    sys.exit(main())
