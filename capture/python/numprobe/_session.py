"""The Rust session of the current step and rank, shared by the PyTorch and MindSpore recorders.

`StepSession.ensure_session` opens `{dump_path}/step{n}/{rank{r}|proc{pid}}` the first time a
selected step records something, as msprobe does; the adapters supply what depends on the
framework: its name, how the rank is found, and where msprobe's two flavours differ (below).
"""
import atexit
import os
import sys
from typing import Any, Dict, Iterable, Optional, Set

from . import _native, _settings
from .config import DumpConfig

# A step's JSON files are made durable and its journal removed on a thread of the native
# core (capture::durable); the process waits for the last of them at exit. Registered first,
# so it runs after the recorders' own exit handlers have ended their steps.
def _wait_durable_at_exit() -> None:
    try:
        _native.wait_durable()
    except OSError as e:
        # Too late to fail the run: said plainly; the step's journal stayed, so `numprobe
        # validate` reports it unfinished and `numprobe recover` still has it.
        print(f"numprobe: error: a step's files could not be made durable: {e} (its journal "
              "stayed: see `numprobe validate`)", file=sys.stderr, flush=True)


atexit.register(_wait_durable_at_exit)


def parse_ints(items: Iterable[Any]) -> Set[int]:
    """msprobe's `step`/`rank` lists: ints, digit strings and inclusive "a-b" ranges."""
    out: Set[int] = set()
    for it in items:
        if isinstance(it, int) and not isinstance(it, bool):
            out.add(it)
        elif isinstance(it, str) and it.isdigit():
            out.add(int(it))
        elif isinstance(it, str) and "-" in it:
            a, b = it.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        else:
            raise ValueError(f"bad step/rank item {it!r}")
    return out


class StepSession:
    """Step counting and the session of the current step; a recorder's base class."""

    #: `framework` of dump.json ("pytorch", "mindspore"); also selects the Rust statistics rules.
    framework = ""
    #: msprobe's MindSpore config makes `dump_path` absolute, its PyTorch config keeps it as
    #: given: dump.json's `dump_data_dir` shows the difference.
    absolute_dump_path = False
    #: msprobe's PyTorch dump.json names the tensor folder whenever tensors are saved; its
    #: MindSpore one for task "tensor" only (a statistics `tensor_list` leaves it null).
    data_dir_with_tensor_list = True

    #: The name prefix of module nodes ("Module." / "Cell."), whose construct.json keys
    #: msprobe writes late (see `_construct`).
    module_prefix = ""

    def __init__(self, cfg: DumpConfig) -> None:
        self.cfg = cfg
        # (name, parent) of the module nodes opened since construct.json's last write.
        self.pending_nodes: list = []
        self.steps = parse_ints(cfg.step)
        self.ranks = parse_ints(cfg.rank)
        self.step_no = 0
        self.session: Optional[_native.Session] = None
        self.rank_dir: Optional[str] = None
        self.tensor_dir: Optional[str] = None
        # Whether this process opened a session, and whether it said why it dumps nothing:
        # a `step`/`rank` list that matches nothing is reported, never an empty dump.
        self.dumped = False
        self.rank_warned = False
        self.step_warned = False
        self.seen_rank: Optional[int] = None
        if self.steps:
            atexit.register(self._warn_no_step_matched)

    # -- framework hooks -------------------------------------------------------------------
    def current_rank(self) -> Optional[int]:
        """The process's rank in a distributed run, None when there is none."""
        return None

    def session_options(self) -> Dict[str, Any]:
        """Keyword arguments of `numprobe._native.Session` that depend on the framework."""
        return {"summary_mode": self.cfg.summary_mode}

    def world_size(self) -> Optional[int]:
        """The number of ranks of a distributed run, None when unknown."""
        return None

    def session_opened(self) -> None:
        """Called once the session of a step is open."""

    def _warn(self, text: str) -> None:
        print(f"numprobe: warning: {text}", file=sys.stderr, flush=True)

    def _warn_rank_excluded(self, rank: Optional[int]) -> None:
        """Once per process: the `rank` list leaves this process out and, when the run's size
        is known, names no rank of the run at all (said by rank 0 alone)."""
        if self.rank_warned:
            return
        self.rank_warned = True
        listed = sorted(self.ranks)
        world = self.world_size()
        if world is None:
            self._warn(f"rank {rank if rank is not None else 0} is not in config.json's rank "
                       f"list {listed}: this process dumps nothing")
        elif not any(r < world for r in listed) and (rank or 0) == 0:
            self._warn(f"no rank of config.json's rank list {listed} is in this run of {world} "
                       f"ranks (0-{world - 1}): nothing is dumped")

    def _warn_no_step_matched(self, passed: bool = False) -> None:
        """Once: no listed step was dumped, either because the run has passed the last of
        them (`passed`) or because it ended first (at exit)."""
        if self.dumped or self.rank_warned or self.step_warned:
            return
        self.step_warned = True
        if self.seen_rank not in (None, 0):
            return  # every rank would say the same: rank 0 says it
        when = "passed the last" if passed else "ended before reaching any"
        self._warn(f"the run {when} of config.json's steps {sorted(self.steps)} after "
                   f"{self.step_no} steps: nothing was dumped")

    # -- shared ----------------------------------------------------------------------------
    def ensure_session(self) -> bool:
        """Opens the session of the current step unless `step`/`rank` leave it out; whether
        one is open."""
        if self.session is not None:
            return True
        cfg = self.cfg
        if self.steps and self.step_no not in self.steps:
            return False
        rank = self.current_rank()
        if self.ranks and (rank if rank is not None else 0) not in self.ranks:
            self._warn_rank_excluded(rank)
            return False
        root = os.path.abspath(cfg.dump_path) if self.absolute_dump_path else cfg.dump_path
        sub = f"rank{rank}" if rank is not None else f"proc{os.getpid()}"
        self.rank_dir = os.path.join(root, f"step{self.step_no}", sub)
        saves = cfg.task == "tensor" or bool(cfg.tensor_list)
        self.tensor_dir = os.path.join(self.rank_dir, "dump_tensor_data") if saves else None
        if self.tensor_dir is not None:
            os.makedirs(self.tensor_dir, exist_ok=True)
        named = self.tensor_dir if (self.data_dir_with_tensor_list or cfg.task == "tensor") else None
        self.session = _native.Session(
            self.rank_dir, cfg.task, cfg.level, self.framework, named, cfg.extra_info,
            precision=cfg.precision, fsync=_settings.fsync(),
            keep_journal=_settings.keep_journal(), **self.session_options(),
        )
        self.dumped = True
        self.session_opened()
        return True

    # -- construct.json ----------------------------------------------------------------------
    def _construct(self, name: str, parent: Any) -> None:
        """construct.json's `name: parent`, in msprobe's key order. msprobe keeps the module
        nodes its hooks open in a table of their own and merges that whole table into
        construct.json wherever it collects data (an API's or a module's forward end, a
        backward): an API's key goes in at once, followed by the module nodes opened since
        the last merge; a module's key waits for the next collect point (`_flush_nodes`), and
        one that sees none before the step ends is never written."""
        if name.startswith(self.module_prefix):
            self.pending_nodes.append((name, parent))
            return
        if self.session is not None:
            self.session.construct(name, parent)
        self._flush_nodes()

    def _flush_nodes(self) -> None:
        """A collect point without a key of its own: the pending module nodes go in."""
        if self.session is not None:
            for name, parent in self.pending_nodes:
                self.session.construct(name, parent)
        self.pending_nodes.clear()

    def close_session(self) -> None:
        """Finishes the current step's files (tensor files, JSON) and closes its journal."""
        if self.session is not None:
            s, self.session = self.session, None
            s.close()

    def next_step(self) -> None:
        """Closes the current step's session and counts the step."""
        self.close_session()
        # msprobe forgets a step's open module nodes with the step.
        self.pending_nodes.clear()
        self.step_no += 1
        self.seen_rank = self.current_rank()
        if self.steps and self.step_no > max(self.steps):
            self._warn_no_step_matched(passed=True)
