//! Journal files prepared ahead of the step that needs them (Linux).
//!
//! A fresh journal per step cost the recording thread a file creation, a block reservation, a
//! new memory map and a page fault per 4 KiB it writes (each fault reserving blocks and
//! zeroing a page of the page cache): 4% of the samples of a loop of small recorded ops on the
//! development machine (benches/RESULTS.md). So the durability worker, once a step's files are
//! durable, prepares the next journal: a file without a name (`O_TMPFILE`) in the same
//! filesystem, locked, its blocks reserved, mapped and its pages faulted in. The next journal
//! of the process takes it and gives it its name with one `linkat`.
//!
//! A prepared file is all zeros, so it reads like a fresh one once written (its frames, then
//! zeros, which readers take as the end), and a process killed while one waits leaves nothing
//! of it: it has no name, so the system frees it with the process. Where the system cannot
//! create or link an unnamed file (another filesystem, `/proc` not mounted, the name taken),
//! the journal is created by name as before.

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

/// A journal file without a name: locked by this process, its blocks reserved, mapped, and
/// zero.
pub(crate) struct Spare {
    pub(crate) file: File,
    pub(crate) map: memmap2::MmapMut,
}

/// Prepared files of the process that prepared them (a forked child inherits the list, but
/// the maps are shared with its parent: it must not write into them).
static READY: Mutex<(u32, Vec<Spare>)> = Mutex::new((0, Vec::new()));

/// Prepared at most: a process records one rank, whose steps take one journal each. Two, so
/// that a step starting while the worker still syncs the last one's files finds one.
const MAX_READY: usize = 2;

/// The most a prepared file reserves (a step's journal that grew larger grows as before).
const MAX_PREPARED: usize = 64 << 20;

fn ready() -> std::sync::MutexGuard<'static, (u32, Vec<Spare>)> {
    // The parent's files (or none yet) are unmapped and closed in the child only.
    of_this_process(&READY)
}

/// A list kept with the process that filled it, locked: emptied first in a forked child,
/// which inherits the parent's items but must not use them.
pub(crate) fn of_this_process<T>(
    list: &'static Mutex<(u32, Vec<T>)>,
) -> std::sync::MutexGuard<'static, (u32, Vec<T>)> {
    // A push or pop that panicked left a consistent Vec.
    let mut g = list.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if g.0 != pid {
        g.1.clear();
        g.0 = pid;
    }
    g
}

/// Prepares a journal file of at least `min` bytes and an eighth more than `want` (what the
/// last journal used) in `dir`'s filesystem, unless one is ready. The margin: a step a few
/// records longer than the last would otherwise grow the map on the recording thread (a
/// reservation, a new map and unmapping the old one, 0.14 ms of system calls traced on the
/// development machine (benches/RESULTS.md, 2026-12-04), then a fault per 4 KiB written).
/// `reserve` reserves the file's blocks and maps them (the journal's own way).
pub(crate) fn prepare(
    dir: &Path,
    min: usize,
    want: usize,
    reserve: impl FnOnce(&File, usize) -> Option<memmap2::MmapMut>,
) {
    if ready().1.len() >= MAX_READY {
        return;
    }
    let Some(file) = unnamed(dir) else { return };
    if file.try_lock().is_err() {
        return;
    }
    let cap = want
        .saturating_add(want / 8)
        .clamp(min, MAX_PREPARED)
        .next_multiple_of(4096);
    let Some(map) = reserve(&file, cap) else {
        return;
    };
    populate(&map);
    let mut g = ready();
    if g.1.len() < MAX_READY {
        g.1.push(Spare { file, map });
    }
}

/// Faults the map's pages in for writing, so that the recording thread's stores find them.
fn populate(map: &memmap2::MmapMut) {
    // SAFETY: advice on a mapping this function borrows; it changes no byte.
    let rc = unsafe {
        libc::madvise(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            libc::MADV_POPULATE_WRITE,
        )
    };
    if rc != 0 {
        // Kernels before 5.14: the same by touching each page. The file is new, all zeros.
        let p = map.as_ptr() as *mut u8;
        for off in (0..map.len()).step_by(4096) {
            // SAFETY: `off` is inside the map, which is writable and not yet shared with
            // anyone; writing the zero that is there changes nothing.
            unsafe { p.add(off).write_volatile(0) };
        }
    }
}

/// A prepared file linked under `path`; `None` when none is ready or it cannot be linked
/// there (the caller creates the journal by name). A file whose link found the name taken
/// stays ready; one that cannot be linked there (another filesystem) is given up, so that it
/// holds no space where the dump no longer is.
pub(crate) fn take(path: &Path) -> Option<Spare> {
    let spare = ready().1.pop()?;
    match link(&spare.file, path) {
        Ok(()) => Some(spare),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut g = ready();
            if g.1.len() < MAX_READY {
                g.1.push(spare);
            }
            None
        }
        Err(_) => None,
    }
}

/// An empty file without a name in `dir`, or `None` where the filesystem has none.
pub(crate) fn unnamed(dir: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .ok()
}

/// Gives the unnamed `file` the name `path` (never replacing a file there: `EEXIST`). An
/// `O_TMPFILE` file can be linked once.
pub(crate) fn link(file: &File, path: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let to = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: plain system call on two NUL-terminated paths that outlive it. Following the
    // /proc link is what links an O_TMPFILE file without privileges; `to` is never followed.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
