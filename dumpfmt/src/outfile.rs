//! Safe output files: the one writer every numprobe output goes through (dump.json and its
//! siblings from `recover`, compare's CSV/xlsx/summary.md, precision-compare's CSVs, `fmt -o`).
//!
//! * A target that exists and is not a regular file — a symbolic link, a directory, a FIFO, a
//!   device — is refused with [`Error::Io`] naming it: a dump received from someone else may
//!   have planted `dump.json -> ~/.bashrc`, and writing "through" it would overwrite that file.
//! * The bytes go to a temporary file in the target's directory (same file system, so the
//!   rename is atomic), are flushed (and fsynced unless asked not to), then renamed over the
//!   target: a kill, a full disk or a failed write leaves the previous file as it was, never a
//!   half-written one under the final name.
//!
//! The new file gets the mode `File::create` would give it (0666 less the umask), not the
//! 0600 of a bare temporary file, so shared outputs stay readable as before.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Why a target cannot be written, or `None` when it is absent or a regular file.
fn refusal(path: &Path) -> Option<String> {
    let md = std::fs::symlink_metadata(path).ok()?;
    let ft = md.file_type();
    if ft.is_file() {
        return None;
    }
    Some(if ft.is_symlink() {
        match std::fs::read_link(path) {
            Ok(t) => format!(
                "is a symbolic link (to {}); numprobe does not write through links",
                t.display()
            ),
            Err(_) => "is a symbolic link; numprobe does not write through links".into(),
        }
    } else if ft.is_dir() {
        "is a directory, not a file numprobe can replace".into()
    } else {
        "is not a regular file (a FIFO, socket or device); numprobe does not write to it".into()
    })
}

fn refused(path: &Path, why: String) -> Error {
    Error::io(
        path,
        std::io::Error::new(std::io::ErrorKind::AlreadyExists, why),
    )
}

/// Checks that `path` may be written: absent or a regular file ([`Error::Io`] naming it
/// otherwise).
pub fn check_target(path: &Path) -> Result<()> {
    match refusal(path) {
        Some(why) => Err(refused(path, why)),
        None => Ok(()),
    }
}

/// An output file being written: a temporary file beside the target until [`commit`]
/// renames it into place. Dropped without commit, it removes itself and leaves the target
/// untouched.
///
/// [`commit`]: AtomicFile::commit
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    target: PathBuf,
}

impl AtomicFile {
    /// Starts writing `path` (refused when it is a link or not a regular file).
    pub fn create(path: &Path) -> Result<AtomicFile> {
        check_target(path)?;
        let dir = dir_of(path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let prefix = format!(".{name}.");
        let mut b = tempfile::Builder::new();
        b.prefix(&prefix).suffix(".numprobe-tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // open(2) applies the umask to this, as File::create does to its 0666.
            b.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let tmp = b.tempfile_in(dir).map_err(|e| Error::io(path, e))?;
        Ok(AtomicFile {
            tmp,
            target: path.to_path_buf(),
        })
    }

    /// The file to write into (`Write + Seek`, for writers that need to seek, like a zip).
    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    /// fsyncs the data, then renames it over the target and fsyncs the directory.
    pub fn commit(self) -> Result<()> {
        self.finish(true, true).map(drop)
    }

    /// [`commit`](AtomicFile::commit) without the fsyncs: still never half-written under the
    /// final name after a kill, but a power cut may lose the new contents (the capture's
    /// per-step JSON files, whose journal is what survives a power cut).
    pub fn commit_unsynced(self) -> Result<()> {
        self.finish(false, false).map(drop)
    }

    /// [`commit_unsynced`](AtomicFile::commit_unsynced), keeping the file open so that it can
    /// be made durable later ([`Written::sync`]), off the writer's thread.
    pub fn commit_for_later_sync(self) -> Result<Written> {
        let path = self.target.clone();
        let file = self.finish(false, false)?;
        Ok(Written { file, path })
    }

    /// Flushes (and with `sync` fsyncs) the data, renames it over the target, and with
    /// `sync_parent` fsyncs the directory; the renamed file stays open.
    fn finish(mut self, sync: bool, sync_parent: bool) -> Result<File> {
        let target = self.target;
        self.tmp
            .as_file_mut()
            .flush()
            .map_err(|e| Error::io(&target, e))?;
        if sync {
            self.tmp
                .as_file()
                .sync_all()
                .map_err(|e| Error::io(&target, e))?;
        }
        // Checked again: a link planted while the file was being written is refused too
        // (rename would replace the link itself, not write through it, but the user asked
        // for a file there and a link there means something is wrong).
        check_target(&target)?;
        let file = self
            .tmp
            .persist(&target)
            .map_err(|e| Error::io(&target, e.error))?;
        if sync_parent {
            sync_dir(dir_of(&target));
        }
        Ok(file)
    }
}

/// A file renamed into place but not yet fsynced (see [`AtomicFile::commit_for_later_sync`]):
/// complete under its name (a kill cannot tear it), durable once [`Written::sync`] returns.
/// The handle is the renamed file itself, so a later sync never follows a name that may have
/// been replaced meanwhile.
#[derive(Debug)]
pub struct Written {
    file: File,
    path: PathBuf,
}

impl Written {
    /// A file its writer gave its final name in one step that never replaces what is there
    /// and never follows a link (an unnamed file linked into place: Linux's `O_TMPFILE` and
    /// `linkat`), complete before it had the name: made durable later as one
    /// [`AtomicFile::commit_for_later_sync`] renamed.
    pub fn linked(file: File, path: PathBuf) -> Written {
        Written { file, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// fsyncs the file's data and metadata.
    pub fn sync(&self) -> Result<()> {
        self.file.sync_all().map_err(|e| Error::io(&self.path, e))
    }

    /// Drops the file's pages from the page cache (after [`sync`](Written::sync), when they
    /// are clean). A dump is read later by another tool, if at all: keeping each step's files
    /// cached takes memory from the training job, and each step then writes into pages the
    /// system has not handed out recently, which on a VM can cost a host page fault each
    /// (0.5 ms per tiny Llama step on the development machine, benches/RESULTS.md). Advice
    /// only: nothing is reported when the system ignores it.
    pub fn release_cache(&self) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: plain system call on a descriptor this value owns.
            unsafe {
                libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

/// [`write_all_durable`] without the fsyncs, each file kept open for [`sync_written`].
pub fn write_all_for_later_sync<P: AsRef<Path>, B: AsRef<[u8]>>(
    files: &[(P, B)],
) -> Result<Vec<Written>> {
    files
        .iter()
        .map(|(path, bytes)| filled(path.as_ref(), bytes.as_ref())?.commit_for_later_sync())
        .collect()
}

/// An [`AtomicFile`] for `path` holding `bytes`, not yet committed.
fn filled(path: &Path, bytes: &[u8]) -> Result<AtomicFile> {
    let mut f = AtomicFile::create(path)?;
    f.file().write_all(bytes).map_err(|e| Error::io(path, e))?;
    Ok(f)
}

/// fsyncs the directories of `paths`, each once.
fn sync_dirs_of<'a>(paths: impl Iterator<Item = &'a Path>) {
    let mut dirs: Vec<&Path> = Vec::new();
    for path in paths {
        if !dirs.contains(&dir_of(path)) {
            dirs.push(dir_of(path));
        }
    }
    for dir in dirs {
        sync_dir(dir);
    }
}

/// Makes files from [`write_all_for_later_sync`] durable: each fsynced, then each of their
/// directories (so the renames reach the disk too).
pub fn sync_written(files: &[Written]) -> Result<()> {
    for w in files {
        w.sync()?;
    }
    sync_dirs_of(files.iter().map(|w| w.path.as_path()));
    Ok(())
}

/// The directory a file path lies in (`.` for a bare file name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// fsyncs directory `dir`, so that a rename into it reaches the disk (best effort: some file
/// systems refuse to open a directory for fsync).
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes `bytes` to `path` safely (see the module documentation), fsynced.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    write_all_durable(&[(path, bytes)])
}

/// [`write()`] of several files, with one fsync of each directory after all the renames
/// instead of one per file (a capture step's three JSON files; each file is fsynced before
/// its rename, so none can reach the disk half-written under its final name).
pub fn write_all_durable<P: AsRef<Path>, B: AsRef<[u8]>>(files: &[(P, B)]) -> Result<()> {
    for (path, bytes) in files {
        filled(path.as_ref(), bytes.as_ref())?.finish(true, false)?;
    }
    sync_dirs_of(files.iter().map(|(p, _)| p.as_ref()));
    Ok(())
}

/// [`write()`] without the fsyncs (see [`AtomicFile::commit_unsynced`]).
pub fn write_unsynced(path: &Path, bytes: &[u8]) -> Result<()> {
    filled(path, bytes)?.commit_unsynced()
}

/// Makes the directory `out/rel` numprobe writes into (a whole-run compare's `step{S}/rank{R}`),
/// creating each missing component; `out`, the directory the user named, may be reached
/// through links (their choice), but a component below it that already exists must be a
/// directory, not a symbolic link (refused naming it, as a link at an output file's name is:
/// an output directory shared with others may hold a planted `step0 -> ~/.ssh`) nor a file.
/// `rel` holds plain names only.
pub fn create_dir_below(out: &Path, rel: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let mut dir = out.to_path_buf();
    for c in rel.components() {
        let std::path::Component::Normal(name) = c else {
            return Err(refused(
                &out.join(rel),
                "is not a plain path below the output directory".into(),
            ));
        };
        dir.push(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(&dir, e)),
        }
        let md = std::fs::symlink_metadata(&dir).map_err(|e| Error::io(&dir, e))?;
        if md.is_dir() {
            continue;
        }
        let why = match refusal(&dir) {
            Some(why) if md.file_type().is_symlink() => why,
            _ => "is not a directory; numprobe writes a directory there".into(),
        };
        return Err(refused(&dir, why));
    }
    Ok(dir)
}

/// Checks a timestamp that becomes part of output file names: exactly 14 ASCII digits
/// (`YYYYMMDDHHMMSS`, as msprobe names its files), so it can never hold a path separator
/// or `..` and write outside the output directory.
pub fn check_timestamp(ts: &str) -> std::result::Result<(), String> {
    if ts.len() == 14 && ts.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!(
            "timestamp {ts:?} is not 14 digits (YYYYMMDDHHMMSS); it becomes part of the output file names"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn output_directories_below_the_named_one_are_never_links() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        let made = create_dir_below(&out, Path::new("step0/rank1")).unwrap();
        assert_eq!(made, out.join("step0/rank1"));
        assert!(made.is_dir());
        // Again: the directories are there, and kept.
        std::fs::write(made.join("kept"), "x").unwrap();
        create_dir_below(&out, Path::new("step0/rank1")).unwrap();
        assert!(made.join("kept").is_file());
        // A planted link, at either level, is refused and nothing is written through it.
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, out.join("step1")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, out.join("step0/rank2")).unwrap();
        for rel in ["step1/rank0", "step0/rank2"] {
            let e = create_dir_below(&out, Path::new(rel))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("symbolic link") && e.contains("elsewhere"),
                "{e}"
            );
        }
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        // A file where a directory goes, and a path that is not plain names.
        std::fs::write(out.join("step2"), "x").unwrap();
        let e = create_dir_below(&out, Path::new("step2"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
        assert!(create_dir_below(&out, Path::new("../x")).is_err());
        assert!(!d.path().join("x").exists());
        // The named directory itself may be a link.
        let alias = d.path().join("alias");
        std::os::unix::fs::symlink(&out, &alias).unwrap();
        assert!(create_dir_below(&alias, Path::new("step0/rank3")).is_ok());
        assert!(out.join("step0/rank3").is_dir());
    }

    #[test]
    fn replaces_a_file_and_keeps_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.csv");
        std::fs::write(&p, "old").unwrap();
        write(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn writes_a_batch_and_keeps_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.json"), "old").unwrap();
        let files = vec![
            (d.path().join("a.json"), b"{}".to_vec()),
            (d.path().join("b.json"), b"[1]".to_vec()),
        ];
        write_all_durable(&files).unwrap();
        assert_eq!(std::fs::read(d.path().join("a.json")).unwrap(), b"{}");
        assert_eq!(std::fs::read(d.path().join("b.json")).unwrap(), b"[1]");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[cfg(unix)]
    #[test]
    fn a_batch_never_writes_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("b.json")).unwrap();
        let files = vec![
            (d.path().join("a.json"), b"{}".to_vec()),
            (d.path().join("b.json"), b"[1]".to_vec()),
        ];
        let e = write_all_durable(&files).unwrap_err().to_string();
        assert!(e.contains("b.json") && e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // No temporary is left behind beside the files.
        let names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.ends_with(".numprobe-tmp")),
            "{names:?}"
        );
    }

    /// The batch written for a later sync is complete under its names at once, refuses a
    /// planted link like the durable one, and syncs the files it renamed.
    #[cfg(unix)]
    #[test]
    fn a_batch_for_later_sync_is_in_place_before_its_sync() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.json"), "old").unwrap();
        let files = vec![
            (d.path().join("a.json"), b"{}".to_vec()),
            (d.path().join("b.json"), b"[1]".to_vec()),
        ];
        let written = write_all_for_later_sync(&files).unwrap();
        assert_eq!(std::fs::read(d.path().join("b.json")).unwrap(), b"[1]");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
        assert_eq!(written[1].path(), d.path().join("b.json"));
        sync_written(&written).unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::fs::remove_file(d.path().join("b.json")).unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("b.json")).unwrap();
        let e = write_all_for_later_sync(&files).unwrap_err().to_string();
        assert!(e.contains("b.json") && e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn refuses_links_dirs_and_fifos_naming_the_path() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = d.path().join("dump.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = write(&link, b"x").unwrap_err().to_string();
        assert!(
            e.contains("dump.json") && e.contains("symbolic link"),
            "{e}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(
            write(&sub, b"x")
                .unwrap_err()
                .to_string()
                .contains("directory")
        );
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(write(&fifo, b"x").unwrap_err().to_string().contains("FIFO"));
    }

    #[cfg(target_os = "linux")]
    unsafe extern "C" {
        #[link_name = "mkfifo"]
        fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
    }

    #[test]
    fn a_dropped_file_leaves_the_target_untouched() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.xlsx");
        std::fs::write(&p, "old").unwrap();
        {
            let mut f = AtomicFile::create(&p).unwrap();
            f.file().write_all(b"half").unwrap();
            // Dropped: the write "failed" half-way.
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn timestamps_are_fourteen_digits() {
        assert!(check_timestamp("20261201193000").is_ok());
        for bad in [
            "/../../x",
            "2026120119300",
            "202612011930001",
            "2026120119300x",
            "",
        ] {
            assert!(check_timestamp(bad).is_err(), "{bad}");
        }
    }
}
