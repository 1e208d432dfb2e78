"""numprobe's optional reader of torch tensors through torch's C++ API (``torch_shim.cpp``):
built on this machine against the installed torch by ``python -m numprobe.pytorch
build-torch-shim``, then used by every capture whose torch it names.

Reading a tensor through Python's C API costs the native walk 0.3-0.6 us a tensor; the
library reads everything in one call of about 15 ns (benches/RESULTS.md, 2026-12-05). torch's
C++ ABI differs between releases, so the library is kept per torch build
(``identity()``) in numprobe's cache folder and loaded only by the torch it names; without
one (no compiler, another torch, ``NUMPROBE_TORCH_SHIM=0``) the walk reads tensors as before,
with the same records.

The cache folder holds code that is loaded into the process: it must be a real folder (not a
link) owned by this user and writable by no one else, and so must the library; a library
that fails any check is not loaded. The library is compiled under a temporary name in that
folder and renamed into place, so a half-written one is never found.

By default (``NUMPROBE_TORCH_SHIM=auto``) the first capture that finds no library for its
torch starts that build itself, as torch's own C++ extensions and Triton build on first use:
in a detached, lower-priority process (``_start_background_build``), so the capture never waits
for a compiler; captures started after it is done use it. One build at a time per cache folder
(an advisory lock that the building process holds, so the ranks of a job start one); a
failed build leaves its log (``failed-KEY.log``) and is not tried again by captures, only by
the command.
"""
import functools
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path
from typing import List, Optional, Tuple

import torch

from .. import _native, _settings

SOURCE = Path(__file__).with_name("torch_shim.cpp")
TORCH_SHIM_OFF = f"{_settings.TORCH_SHIM.name}=0"
_LOADED: List[object] = []  # [shim or None] once looked up


def identity() -> str:
    """The torch build (with whether the library opens OpenMP regions on its threads), Python
    and library source a library is made for: its file name is
    derived from it and the library carries it, so a library is only ever loaded by the torch
    (and the numprobe) it was compiled for."""
    src = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    git = getattr(torch.version, "git_version", None) or "unknown"
    omp = int(bool(_openmp_flags()))
    return (f"torch {torch.__version__} git {git} cxx11abi {abi} openmp {omp} "
            f"python {sys.implementation.cache_tag} source {src}")


def _tensor_base() -> type:
    """The base class of every Python tensor object (a THPVariable): ``torch._C.TensorBase``,
    named ``_TensorBase`` before torch 2.2."""
    base = getattr(torch._C, "TensorBase", None) or getattr(torch._C, "_TensorBase", None)
    if not isinstance(base, type):
        raise OSError("this torch has no torch._C.TensorBase")
    return base


def cache_dir() -> Path:
    """The ``torch-shim`` folder of numprobe's cache folder (``_settings.cache_dir``)."""
    return Path(_settings.cache_dir()) / "torch-shim"


def _key() -> str:
    return hashlib.sha256(identity().encode()).hexdigest()[:20]


def library_path(folder: Optional[Path] = None) -> Path:
    """Where the library for the running torch is (or would be) kept."""
    return (folder or cache_dir()) / f"libnumprobe_torch_{_key()}.so"


def failure_log(folder: Optional[Path] = None) -> Path:
    """Where a failed background build for the running torch leaves the compiler's output
    (its presence keeps captures from trying again)."""
    return (folder or cache_dir()) / f"failed-{_key()}.log"


_LOCK_NAME = ".build.lock"


class ShimUnsafe(OSError):
    """The cache folder or library could be changed by someone else (or is a link)."""


def _check_private(path: Path, want_dir: bool) -> None:
    st = os.lstat(path)
    kind = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not kind:
        what = "a folder" if want_dir else "a regular file"
        raise ShimUnsafe(f"{path}: not {what} (links are not followed)")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise ShimUnsafe(f"{path}: owned by uid {st.st_uid}, not by this user")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ShimUnsafe(f"{path}: writable by others (mode {stat.S_IMODE(st.st_mode):o})")


def _private_folder(folder: Path) -> None:
    """Makes `folder` (mode 0700) if missing and checks it; its parents are the user's."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass
    _check_private(folder, want_dir=True)


@functools.lru_cache(maxsize=None)
def _openmp_flags() -> Tuple[str, ...]:
    """``-fopenmp`` when torch runs its intra-op threads on GNU OpenMP through a
    ``libgomp.so.1`` it has loaded: ATen's ``parallel_for``, inlined into the library, then
    opens its regions on torch's own thread pool (the loader binds the library's
    ``libgomp.so.1`` to the one already loaded), so the statistics read each chunk of a
    large tensor on the thread that wrote it. With another OpenMP runtime (Intel's, a
    renamed copy) a second pool would start: the library is built without, and its
    ``parallel_for`` runs every chunk on the calling thread. (Under torch's native pool
    ``parallel_for`` is torch's own compiled function, on that pool with or without the
    flag.)"""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return ()
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return ()
    names = {os.path.basename(line.split()[-1]) for line in maps.splitlines()
             if "libgomp" in line and "/" in line}
    return ("-fopenmp",) if names and all(n.startswith("libgomp.so.1") for n in names) else ()


def compile_command(out: Path, cxx: Optional[str] = None) -> List[str]:
    """The compiler's command line for a library at `out` against the running torch and
    Python (the flags torch's own C++ extensions use: C++20, position independent, torch's
    C++ ABI, its headers and libraries)."""
    import torch.utils.cpp_extension as ext

    cxx = cxx or _settings.cxx() or "c++"
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    cmd = [cxx, "-std=c++20", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-DNUMPROBE_BUILT_FOR=\"{identity()}\""]
    cmd += list(_openmp_flags())
    for inc in ext.include_paths():
        cmd += ["-isystem", inc]
    cmd += ["-isystem", sysconfig.get_paths()["include"]]
    cmd += [str(SOURCE), "-o", str(out), f"-L{lib}", f"-Wl,-rpath,{lib}",
            "-ltorch_python", "-ltorch_cpu", "-lc10"]
    return cmd


def build(folder: Optional[Path] = None, cxx: Optional[str] = None, quiet: bool = False) -> Path:
    """Compiles the library for the running torch into `folder` (the cache folder by
    default) and returns its path; raises RuntimeError with the compiler's output when it
    fails, ShimUnsafe when the folder is not private to this user."""
    folder = folder or cache_dir()
    _private_folder(folder)
    final = library_path(folder)
    fd, tmp = tempfile.mkstemp(prefix=".building-", suffix=".so", dir=folder)
    os.close(fd)
    try:
        cmd = compile_command(Path(tmp), cxx)
        t0 = time.monotonic()
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"compiling {SOURCE.name} failed ({done.returncode}):\n"
                               f"{' '.join(cmd)}\n{done.stdout}")
        os.chmod(tmp, 0o700)
        # Checked before it is named: a library that cannot be loaded is never put in place.
        _native.TorchShim.load(tmp, identity(), _tensor_base())
        os.replace(tmp, final)
        tmp = None
        try:
            os.unlink(failure_log(folder))
        except FileNotFoundError:
            pass
        if not quiet:
            print(f"numprobe: built {final} in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        return final
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def load(path: Optional[Path] = None):
    """The library for the running torch (``_native.TorchShim``), or None when there is none,
    it is switched off, or it fails a check (said once as a warning). Looked up once per
    process unless `path` is given; when there is none, the lookup may start a background
    build for later processes (``_start_background_build``)."""
    if path is None and _LOADED:
        return _LOADED[0]
    shim = None
    if _settings.torch_shim():
        where = path or library_path()
        try:
            if path is not None or where.exists():
                _check_private(where.parent, want_dir=True)
                _check_private(where, want_dir=False)
                shim = _native.TorchShim.load(str(where), identity(), _tensor_base())
            elif _settings.torch_shim_autobuild():
                try:
                    _start_background_build(where.parent)
                except OSError as e:
                    warnings.warn(f"numprobe: no torch reader built: {e} "
                                  f"({_settings.CACHE_DIR.name} names another folder, "
                                  f"{_settings.TORCH_SHIM.name}=1 stops trying)",
                                  RuntimeWarning, stacklevel=2)
        except OSError as e:
            warnings.warn(f"numprobe: torch reader not used: {e}", RuntimeWarning, stacklevel=2)
            shim = None
    if path is None:
        _LOADED.append(shim)
    return shim


def _building(folder: Path) -> bool:
    """Whether a build holds the folder's lock now (a probe: takes it and lets it go)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(folder / _LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _start_background_build(folder: Path) -> bool:
    """Starts ``build-torch-shim`` for the running torch into `folder` in a detached process
    of lower priority, unless a compiler is missing, a build failed before (its log is
    there) or another process is building (it holds the folder's lock). The lock is taken
    here and handed to the builder, which holds it until it is done, so concurrent captures
    (a job's ranks) start one build. Returns whether one was started; raises ShimUnsafe
    when the folder is not private to this user."""
    try:
        import fcntl
    except ImportError:
        return False
    if shutil.which(_settings.cxx() or "c++") is None or failure_log(folder).exists():
        return False
    _private_folder(folder)
    try:
        fd = os.open(folder / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError as e:
        raise ShimUnsafe(f"{folder / _LOCK_NAME}: {e.strerror} (links are not followed)")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        # Another process may have finished the library between the lookup and the lock.
        if library_path(folder).exists():
            return False
        # The builder imports this very numprobe, wherever it was imported from.
        pkg_parent = str(Path(_native.__file__).resolve().parent.parent)
        code = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
                "from numprobe.pytorch._torch_shim import main; sys.exit(main(sys.argv[1:]))")
        subprocess.Popen(
            [sys.executable, "-c", code, pkg_parent, "--cache-dir", str(folder.parent),
             "--background-lock", str(fd)],
            pass_fds=(fd,), start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        os.close(fd)
    print(f"numprobe: building the torch reader for torch {torch.__version__} in the "
          f"background into {folder} (about 15 s); captures started after it is done read "
          f"tensors natively ({_settings.TORCH_SHIM.name}=1: never build, 0: not used)",
          file=sys.stderr)
    return True


def _remove_leftovers(folder: Path, older_than_s: float = 3600.0) -> None:
    """Temporary files of builds killed before they could remove them (a build takes seconds,
    so one an hour old is no build's any more)."""
    now = time.time()
    for entry in os.scandir(folder):
        if not entry.name.startswith((".building-", ".failed-")):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > older_than_s:
                os.unlink(entry.path)
        except OSError:
            pass


def _build_in_background(folder: Path, lock_fd: int) -> int:
    """The detached builder's work: holds `lock_fd` (the folder's lock, taken by the capture
    that started it) until done, leaves the compiler's output in ``failure_log`` on failure."""
    try:
        os.nice(10)
    except OSError:
        pass
    try:
        if library_path(folder).exists():
            return 0
        _remove_leftovers(folder)
        try:
            build(folder, quiet=True)
            return 0
        except (OSError, RuntimeError) as e:
            fd, tmp = tempfile.mkstemp(prefix=".failed-", suffix=".log", dir=folder)
            with os.fdopen(fd, "w") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {identity()}\n{e}\n")
            os.replace(tmp, failure_log(folder))
            return 1
    finally:
        os.close(lock_fd)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m numprobe.pytorch build-torch-shim [--cache-dir DIR] [--cxx COMPILER]
    [--check]``."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m numprobe.pytorch build-torch-shim",
        description="Compile numprobe's reader of torch tensors against the installed torch "
                    "(a C++20 compiler and torch's headers, as for torch's C++ extensions). "
                    "Captures under this torch then read each tensor in one native call.")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="numprobe's cache folder: the library goes to DIR/torch-shim, where "
                        "captures find it with NUMPROBE_CACHE_DIR=DIR (default: "
                        "$NUMPROBE_CACHE_DIR, $XDG_CACHE_HOME/numprobe or ~/.cache/numprobe)")
    p.add_argument("--cxx", default=None, help="C++ compiler (default: $CXX or c++)")
    p.add_argument("--check", action="store_true",
                   help="build nothing: say whether captures under this torch would use a "
                        "reader (exit status 0) or not, and why (1)")
    p.add_argument("--background-lock", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    folder = args.cache_dir / "torch-shim" if args.cache_dir else None
    if args.background_lock is not None:
        return _build_in_background(folder or cache_dir(), args.background_lock)
    if args.check:
        where = library_path(folder)
        if not _settings.torch_shim():
            print(f"not used: {TORCH_SHIM_OFF}", file=sys.stderr)
            return 1
        if not where.exists():
            print(f"not built for this torch ({identity()}): {where}", file=sys.stderr)
            log = failure_log(where.parent)
            if _building(where.parent):
                print("a build is running in the background", file=sys.stderr)
            elif log.exists():
                print(f"the background build failed, see {log} (captures do not try "
                      f"again; this command without --check does)", file=sys.stderr)
            return 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            shim = load(where)
        if shim is None:
            why = "; ".join(str(w.message) for w in caught) or "refused"
            print(why, file=sys.stderr)
            return 1
        print(where)
        return 0
    try:
        path = build(folder, args.cxx)
    except (OSError, RuntimeError) as e:
        print(f"numprobe: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0
