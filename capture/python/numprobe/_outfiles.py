"""Output files of numprobe's Python tools, under the rule of the Rust writers
(dumpfmt::outfile): an output name that holds a symbolic link, a FIFO, a device or a
directory is refused, never written through; a file written whole goes to a temporary file
beside its name and is renamed over it, so it is never left half-written under that name; a
directory numprobe makes for its outputs is never a link."""
import functools
import os
import stat
import tempfile


def _refusal(path):
    """Why `path` cannot be written, or None when it is absent or a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"{path}: is a symbolic link (to {os.readlink(path)}); numprobe does not write through links"
    if stat.S_ISDIR(st.st_mode):
        return f"{path}: is a directory, not a file numprobe can replace"
    return f"{path}: is not a regular file (a FIFO, socket or device); numprobe does not write to it"


def check_target(path):
    """Raises OSError naming `path` when it may not be written (see the module docs)."""
    why = _refusal(path)
    if why:
        raise OSError(why)


@functools.lru_cache(maxsize=None)
def _umask():
    # Read once: reading it sets it for a moment, which another thread could see.
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace(path, write, mode="w", **open_args):
    """Writes `path` whole: `write(f)` fills a fresh temporary file beside it, which is
    fsynced, given the mode a new file gets, and renamed over `path`."""
    check_target(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, mode, **open_args) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def open_append(path, **open_args):
    """`open(path, "a")` for a file that exists, refused when it is a link or not a regular
    file (checked on the opened file: a name swapped after the check is caught too)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        check_target(path)  # says what the name holds (a link: ELOOP)
        raise OSError(f"{path}: {e.strerror}") from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        check_target(path)
        raise OSError(f"{path}: is not a regular file; numprobe does not write to it")
    return os.fdopen(fd, "a", **open_args)


def make_dir(path):
    """Makes the output directory `path` (and its parents); refused when `path` itself is a
    symbolic link or not a directory (its parents are the user's choice)."""
    os.makedirs(path, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(f"{path}: is a symbolic link (to {os.readlink(path)}); numprobe does not write through links")
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path}: is not a directory")
