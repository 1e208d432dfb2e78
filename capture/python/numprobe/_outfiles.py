"""Output files of numprobe's Python tools, by the Rust writers' own rule (dumpfmt::outfile,
through `_native`): an output name that holds a symbolic link, a FIFO, a device or a
directory is refused, never written through; a file written whole goes to a temporary file
beside its name and is renamed over it, never left half-written under that name; a directory
numprobe makes for its outputs is never a link."""
import io
import os
import stat

from . import _native


def replace(path, write, binary=False, **open_args):
    """Writes `path` whole: `write(f)` fills an in-memory file (text with `open_args`, or
    bytes), which `_native.write_file` writes beside `path`, fsyncs and renames over it."""
    if binary:
        buf = io.BytesIO()
        write(buf)
        data = buf.getvalue()
    else:
        buf = io.StringIO(newline=open_args.get("newline"))
        write(buf)
        data = buf.getvalue().encode(open_args.get("encoding", "utf-8"))
    _native.write_file(path, data)


def open_append(path, **open_args):
    """`open(path, "a")` for a file that exists, refused when it is a link or not a regular
    file (checked on the opened file: a name swapped after the check is caught too)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        _native.check_target(path)  # says what the name holds (a link: ELOOP)
        raise OSError(f"{path}: {e.strerror}") from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        _native.check_target(path)
        raise OSError(f"{path}: is not a regular file; numprobe does not write to it")
    return os.fdopen(fd, "a", **open_args)


def make_dir(parent, name):
    """Makes the output directory `parent/name` (`parent`, the user's, may be reached through
    links); refused when `name` is there as a link or a file."""
    return str(_native.create_dir_below(parent, name))
