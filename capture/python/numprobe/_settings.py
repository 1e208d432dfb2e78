"""Every environment variable the numprobe package reads, with its default and meaning.

Code elsewhere in the package calls the accessors below instead of reading ``os.environ``, so
this table is the whole list (the README's "Environment variables" table repeats it; a test
checks they agree). What config.json says is msprobe's configuration (``numprobe.config``);
these knobs only tune how numprobe gets the same dump.
"""
import os
from typing import NamedTuple, Optional


class Knob(NamedTuple):
    name: str
    default: str
    meaning: str


DEVICE_STATS = Knob(
    "NUMPROBE_DEVICE_STATS", "auto",
    "where the statistics of PyTorch tensors are computed: `auto` on the tensor's device for "
    "non-CPU tensors, `force` on the device path for CPU tensors too, `off` on the host")
DEVICE_STATS_BOUND = Knob(
    "NUMPROBE_DEVICE_STATS_BOUND", "4096",
    "device tensors whose statistics may wait for one readback")
ASYNC_STATS = Knob(
    "NUMPROBE_ASYNC_STATS", "auto",
    "statistics of large CPU tensors on a second thread: `1` on, `0` off, otherwise on when "
    "torch leaves a core idle (single-process runs)")
RUN_UT_OVERLAP = Knob(
    "NUMPROBE_RUN_UT_OVERLAP", "auto",
    "run_ut computes metrics on a thread while torch runs the next APIs: `1` on, `0` off, "
    "otherwise on when torch leaves a core idle")
FSYNC = Knob(
    "NUMPROBE_FSYNC", "0",
    "`1`: a journal kept (NUMPROBE_KEEP_JOURNAL) is fsynced at each finished step (a killed "
    "process loses nothing without it; this guards against a power cut; the JSON files of a "
    "clean stop are always fsynced, off the training thread)")

KEEP_JOURNAL = Knob(
    "NUMPROBE_KEEP_JOURNAL", "0",
    "`1`: a clean stop()/step() keeps `numprobe_journal.bin` in the rank directory (by default "
    "it is removed once the JSON files are durable, leaving msprobe's files only)")

EXTRA_APIS = Knob(
    "NUMPROBE_EXTRA_APIS", "0",
    "`1`: PyTorch calls msprobe cannot see (unary minus as `Tensor.neg`, a function stored "
    "before the debugger was created) are recorded too, as `Extra.{Prefix}.{api}.{n}` with "
    "counters of their own (msprobe's names are unchanged); also `PrecisionDebugger(..., "
    "extra_apis=True)`")

TORCH_SHIM = Knob(
    "NUMPROBE_TORCH_SHIM", "auto",
    "the torch reader (`python -m numprobe.pytorch build-torch-shim`): `auto` uses the one "
    "built for this torch and, when there is none and a C++ compiler is found, builds it in "
    "the background for later runs; `1` uses it but never builds; `0` does not use it "
    "(tensors are read through Python, with the same records)")

CACHE_DIR = Knob(
    "NUMPROBE_CACHE_DIR", "",
    "the folder whose `torch-shim` folder holds the torch readers (unset: "
    "`$XDG_CACHE_HOME/numprobe`, else `~/.cache/numprobe`)")

KNOBS = (DEVICE_STATS, DEVICE_STATS_BOUND, ASYNC_STATS, RUN_UT_OVERLAP, FSYNC, KEEP_JOURNAL,
         EXTRA_APIS, TORCH_SHIM, CACHE_DIR)


def raw(knob: Knob) -> str:
    """The knob's value as set, else its default."""
    return os.environ.get(knob.name, knob.default)


def _forced(knob: Knob) -> Optional[bool]:
    v = raw(knob)
    return v == "1" if v in ("0", "1") else None


def device_stats() -> str:
    """``auto``, ``force`` or ``off`` (others are refused where the recorder takes it)."""
    return raw(DEVICE_STATS)


def device_stats_bound() -> int:
    v = raw(DEVICE_STATS_BOUND)
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"{DEVICE_STATS_BOUND.name}={v!r}: expected a count (0 or more)")
    return n


def async_stats() -> Optional[bool]:
    """True/False when forced, None to decide from the machine."""
    return _forced(ASYNC_STATS)


def run_ut_overlap() -> Optional[bool]:
    """True/False when forced, None to decide from the machine."""
    return _forced(RUN_UT_OVERLAP)


def fsync() -> bool:
    return raw(FSYNC) == "1"


def keep_journal() -> bool:
    return raw(KEEP_JOURNAL) == "1"


def extra_apis() -> bool:
    return raw(EXTRA_APIS) == "1"


def _torch_shim_mode() -> str:
    v = raw(TORCH_SHIM) or TORCH_SHIM.default  # set but empty: the default
    if v not in ("auto", "1", "0"):
        # Refused rather than read as `auto`: `off` must not start a compiler.
        raise ValueError(f"{TORCH_SHIM.name}={v!r}: expected auto, 1 or 0")
    return v


def torch_shim() -> bool:
    return _torch_shim_mode() != "0"


def torch_shim_autobuild() -> bool:
    """Whether a capture that finds no torch reader builds one in the background."""
    return _torch_shim_mode() == "auto"


def cache_dir() -> str:
    """numprobe's cache folder: ``NUMPROBE_CACHE_DIR``, else ``$XDG_CACHE_HOME/numprobe``, else
    ``~/.cache/numprobe`` (XDG's base directory rule)."""
    base = raw(CACHE_DIR)
    if base:
        return base
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return os.path.join(xdg, "numprobe")
    return os.path.join(os.path.expanduser("~"), ".cache", "numprobe")


def cxx() -> Optional[str]:
    """``CXX``: the C++ compiler that builds the torch reader, when set."""
    return os.environ.get("CXX") or None


# Variables of the framework, not numprobe's knobs: read here so that this module stays the one
# place that reads the environment.
def mindspore_dump_config() -> Optional[str]:
    """``MINDSPORE_DUMP_CONFIG``: the dump JSON MindSpore reads (level L2 sets it)."""
    return os.environ.get("MINDSPORE_DUMP_CONFIG")


def rank_id() -> int:
    """``RANK_ID`` (MindSpore's launcher sets it), 0 when unset or empty."""
    return int(os.environ.get("RANK_ID", "0") or 0)


def use_mindspore_dump_config(path: str) -> None:
    """Points MindSpore's dump at ``path`` and drops ``MS_ACL_DUMP_CFG_PATH`` (an Ascend dump
    configuration that would take precedence), as msprobe's level L2 does."""
    os.environ["MINDSPORE_DUMP_CONFIG"] = path
    os.environ.pop("MS_ACL_DUMP_CFG_PATH", None)
