//! Opening files of an untrusted dump: only regular files are read.
//!
//! A FIFO where a dump.json or tensor file should be would block `open(2)` (and every read)
//! forever, and a device file such as `/dev/zero` never ends. [`open_regular`] opens without
//! blocking (`O_NONBLOCK`, which has no effect on regular files) and checks the type of what it
//! opened with `fstat`, so a file swapped between a check and the open is still caught.

use std::fs::File;
use std::path::Path;

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
