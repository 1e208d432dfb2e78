//! Opening files of an untrusted dump: only regular files are read.
//!
//! A FIFO where a dump.json or tensor file should be would block `open(2)` (and every read)
//! forever, and a device file such as `/dev/zero` never ends. [`open_regular`] opens without
//! blocking (`O_NONBLOCK`, which has no effect on regular files) and checks the type of what it
//! opened with `fstat`, so a file swapped between a check and the open is still caught.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Opens `path` for reading when it is a regular file (links followed); anything else is
/// [`Error::NotRegularFile`] naming the path and what it is.
pub fn open_regular(path: &Path) -> Result<File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = opts.open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::NotRegularFile {
            file: path.to_path_buf(),
            kind: kind_of(&meta.file_type()),
        });
    }
    Ok(file)
}

/// Checks a file numprobe found in a dump directory (rather than one the user named): a
/// symbolic link there is followed only when its final target lies inside the link's own
/// directory (a dump whose files were moved and linked back within it); one that leads out of
/// it is [`Error::LinkOutside`]. msprobe and numprobe write these files themselves, so such a
/// link was planted, and following it would read any file of the machine into a compare's
/// tables and report. A link to something other than a regular file is left to
/// [`open_regular`], which names what it is.
pub fn check_found_file(path: &Path) -> Result<()> {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link || !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    match real_path_outside(path, parent_dir(path))? {
        None => Ok(()),
        Some(target) => Err(Error::LinkOutside {
            file: path.to_path_buf(),
            target,
        }),
    }
}

/// Opens a file numprobe found in a dump directory, by [`check_found_file`]'s rule judged on
/// the file actually opened (its location read back from the open descriptor), so a link
/// swapped in between a check and the open cannot lead the read out of the directory. Where
/// the system cannot say where an open file lies, the path is judged first and the opened
/// file must then be the one judged.
pub fn open_found(path: &Path) -> Result<File> {
    let file = open_regular(path)?;
    match opened_location(&file) {
        Some(target) => {
            let dir = parent_dir(path);
            let dir = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
            if !target.starts_with(&dir) {
                return Err(Error::LinkOutside {
                    file: path.to_path_buf(),
                    target,
                });
            }
        }
        None => {
            check_found_file(path)?;
            if !same_file(&file, path)? {
                return Err(Error::io(
                    path,
                    std::io::Error::other("the file changed while it was being opened"),
                ));
            }
        }
    }
    Ok(file)
}

/// Where the file behind an open descriptor lies (every link resolved), when the system says.
fn opened_location(file: &File) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .ok()
            .filter(|p| p.is_absolute())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// Whether `file` is the file `path` names now.
fn same_file(file: &File, path: &Path) -> Result<bool> {
    let opened = file.metadata().map_err(|e| Error::io(path, e))?;
    let named = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Ok(opened.dev() == named.dev() && opened.ino() == named.ino())
    }
    #[cfg(not(unix))]
    {
        Ok(opened.len() == named.len() && opened.modified().ok() == named.modified().ok())
    }
}

/// A directory found while walking a dump from `root` (a step, rank or split directory below
/// the directory the user named) that is a symbolic link to `target`, outside `root`: not
/// entered ([`dir_link_out`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkOut {
    pub dir: PathBuf,
    pub target: PathBuf,
    pub root: PathBuf,
}

impl LinkOut {
    /// The refusal as the error a reader returns ([`Error::DirOutsideDump`]).
    pub fn to_error(&self) -> Error {
        Error::DirOutsideDump {
            dir: self.dir.clone(),
            target: self.target.clone(),
            root: self.root.clone(),
        }
    }
}

/// The rule for a directory found while walking a dump from `root`, the directory the user
/// named: a symbolic link there is entered only when its target lies inside `root` (a step
/// directory moved and linked back within the dump); one leading out of it is returned, not
/// to be entered. The dump's writers make these directories themselves, so such a link was
/// planted, and entering it would read another dump, or any directory of the machine that
/// happens to hold a dump.json, as this one's.
pub fn dir_link_out(path: &Path, root: &Path) -> Result<Option<LinkOut>> {
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Ok(None);
    }
    Ok(real_path_outside(path, root)?.map(|target| LinkOut {
        dir: path.to_path_buf(),
        target,
        root: root.to_path_buf(),
    }))
}

/// [`dir_link_out`] as an error: [`Error::DirOutsideDump`] for a link out of `root`.
pub fn check_found_dir(path: &Path, root: &Path) -> Result<()> {
    match dir_link_out(path, root)? {
        Some(link) => Err(link.to_error()),
        None => Ok(()),
    }
}

/// `path`'s directory (`.` for a bare name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The real path of `path` (every link resolved) when it lies outside the real path of `dir`
/// (which may itself be reached through links, e.g. a dump moved to another disk and linked
/// back); `None` inside. The one rule of every reader that follows a link of a dump: the
/// dump's own files here, its tensor directory and tensor files in `layout`.
pub(crate) fn real_path_outside(path: &Path, dir: &Path) -> Result<Option<PathBuf>> {
    let target = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
    let dir = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    Ok((!target.starts_with(&dir)).then_some(target))
}

/// The whole contents of `path` when it is a regular file ([`open_regular`]'s rule); the
/// read is bounded by the size the opened file has.
pub fn read_regular(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = open_regular(path)?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut bytes = Vec::new();
    // `take`: a file that grows while it is read does not make the read unbounded.
    file.take(len)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

/// What a non-regular file is, in words.
pub fn kind_of(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "FIFO";
        }
        if t.is_char_device() {
            return "character device";
        }
        if t.is_block_device() {
            return "block device";
        }
        if t.is_socket() {
            return "socket";
        }
    }
    if t.is_dir() {
        "directory"
    } else if t.is_symlink() {
        "symbolic link"
    } else if t.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn found_files_are_followed_only_inside_their_directory() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rank0");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(tmp.path().join("secret.json"), b"{}").unwrap();
        std::fs::write(dir.join("real.json"), b"{}").unwrap();
        std::fs::write(dir.join("sub/deep.json"), b"{}").unwrap();
        let inside = [
            ("plain", None),
            ("relative", Some("real.json")),
            ("into_subdir", Some("sub/deep.json")),
            ("out_and_back", Some("../rank0/real.json")),
            // Not regular files: open_regular names what they are.
            ("device", Some("/dev/null")),
            ("dangling", Some("gone.json")),
        ];
        std::fs::write(dir.join("plain"), b"{}").unwrap();
        for (name, to) in inside {
            if let Some(to) = to {
                symlink(to, dir.join(name)).unwrap();
            }
            assert!(check_found_file(&dir.join(name)).is_ok(), "{name}");
        }
        assert!(check_found_file(&dir.join("absent")).is_ok());
        symlink("../secret.json", dir.join("parent")).unwrap();
        symlink(tmp.path().join("secret.json"), dir.join("absolute")).unwrap();
        // A chain: inside first, then out.
        symlink("absolute", dir.join("chain")).unwrap();
        for name in ["parent", "absolute", "chain"] {
            let e = check_found_file(&dir.join(name)).unwrap_err();
            assert!(matches!(e, Error::LinkOutside { .. }), "{name}: {e}");
            let text = e.to_string();
            assert!(
                text.contains(name) && text.contains("secret.json"),
                "{text}"
            );
        }
    }

    #[test]
    fn found_files_open_only_inside_their_directory_judged_on_the_opened_file() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rank0");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(tmp.path().join("secret.json"), b"secret").unwrap();
        std::fs::write(dir.join("real.json"), b"real").unwrap();
        std::fs::write(dir.join("sub/deep.json"), b"deep").unwrap();
        symlink("real.json", dir.join("relative")).unwrap();
        symlink("sub/deep.json", dir.join("into_subdir")).unwrap();
        symlink("../rank0/real.json", dir.join("out_and_back")).unwrap();
        symlink("../secret.json", dir.join("parent")).unwrap();
        symlink(tmp.path().join("secret.json"), dir.join("absolute")).unwrap();
        symlink("absolute", dir.join("chain")).unwrap();
        let read = |name: &str| {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut open_found(&dir.join(name))?, &mut text).unwrap();
            Ok::<_, Error>(text)
        };
        for (name, text) in [
            ("real.json", "real"),
            ("relative", "real"),
            ("into_subdir", "deep"),
            ("out_and_back", "real"),
        ] {
            assert_eq!(read(name).unwrap(), text, "{name}");
        }
        for name in ["parent", "absolute", "chain"] {
            match read(name).unwrap_err() {
                Error::LinkOutside { file, target } => {
                    assert_eq!(file, dir.join(name));
                    assert!(target.ends_with("secret.json"), "{}", target.display());
                }
                e => panic!("{name}: {e}"),
            }
        }
        // The location judged is the opened file's own, wherever the name points later.
        let f = open_regular(&dir.join("chain")).unwrap();
        std::fs::remove_file(dir.join("chain")).unwrap();
        symlink("real.json", dir.join("chain")).unwrap();
        let at = opened_location(&f).expect("Linux says where an open file lies");
        assert_eq!(at, tmp.path().canonicalize().unwrap().join("secret.json"));
        // A dump directory reached through a link of its own keeps its files inside it.
        symlink(&dir, tmp.path().join("alias")).unwrap();
        assert!(open_found(&tmp.path().join("alias/relative")).is_ok());
        assert!(open_found(&tmp.path().join("alias/absolute")).is_err());
        // Not regular files are refused as open_regular refuses them.
        symlink("/dev/null", dir.join("device")).unwrap();
        let e = open_found(&dir.join("device")).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
    }

    #[test]
    fn found_dirs_are_entered_only_inside_the_dump() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("dump");
        std::fs::create_dir_all(root.join("step0/rank0")).unwrap();
        std::fs::create_dir_all(root.join("moved/rank1")).unwrap();
        std::fs::create_dir_all(tmp.path().join("other/rank2")).unwrap();
        // Inside the root: a plain directory, a link within the step, a link to another part
        // of the dump (a step moved and linked back), a link out and back in.
        symlink("rank0", root.join("step0/rank3")).unwrap();
        symlink("../moved/rank1", root.join("step0/rank1")).unwrap();
        symlink("../../dump/step0/rank0", root.join("step0/rank4")).unwrap();
        for name in ["rank0", "rank3", "rank1", "rank4"] {
            assert!(
                check_found_dir(&root.join("step0").join(name), &root).is_ok(),
                "{name}"
            );
        }
        // A root reached through a link of its own (the user's choice) is still the root.
        symlink(&root, tmp.path().join("alias")).unwrap();
        let alias = tmp.path().join("alias");
        assert!(check_found_dir(&alias.join("step0/rank1"), &alias).is_ok());
        symlink("../../other/rank2", root.join("step0/rank2")).unwrap();
        symlink(tmp.path().join("other"), root.join("step1")).unwrap();
        // Inside first, then out.
        symlink("rank2", root.join("step0/rank5")).unwrap();
        for dir in ["step0/rank2", "step1", "step0/rank5"] {
            let e = check_found_dir(&root.join(dir), &root).unwrap_err();
            match &e {
                Error::DirOutsideDump {
                    dir: d,
                    target,
                    root: r,
                } => {
                    assert_eq!(d, &root.join(dir));
                    assert!(target.starts_with(tmp.path().canonicalize().unwrap().join("other")));
                    assert_eq!(r, &root);
                }
                other => panic!("{dir}: {other}"),
            }
            assert!(e.to_string().contains("outside the dump"), "{e}");
        }
    }

    #[test]
    fn refuses_directories_devices_and_fifos_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let e = open_regular(tmp.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let e = open_regular(Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let fifo = tmp.path().join("f");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .is_ok_and(|s| s.success())
        );
        // Would block forever without O_NONBLOCK (no writer ever opens the FIFO).
        let e = open_regular(&fifo).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        std::fs::write(tmp.path().join("ok"), b"x").unwrap();
        assert!(open_regular(&tmp.path().join("ok")).is_ok());
        assert_eq!(read_regular(&tmp.path().join("ok")).unwrap(), b"x");
        let e = read_regular(&fifo).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
    }
}
