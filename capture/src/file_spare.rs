//! The step's JSON files created ahead of the stop() that writes them (Linux).
//!
//! A clean stop() writes dump.json, stack.json and construct.json. Each through a temporary
//! name cost the recording thread a file creation (an inode allocated), a rename and two
//! checks of the target: fifteen system calls a step. So the durability worker, once a step's
//! files are durable, creates the next step's three files without a name (`O_TMPFILE`, as
//! `journal_spare` does for the journal), and stop() writes each into one of them and gives
//! it its name with one `linkat`, which never replaces what is there and never follows a
//! link planted under the name. A target that exists (a second stop() in the same step)
//! takes the temporary-name path of `dumpfmt::outfile`, which replaces it whole.
//!
//! A file is complete before it gets its name, so a kill never leaves one half-written under
//! it; one that waits unnamed is freed by the system with the process.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dumpfmt::outfile::Written;

use crate::journal_spare::{link, of_this_process, unnamed};

/// Files prepared at most: one step's three.
const MAX_READY: usize = 3;

/// Unnamed files of the process that made them (a forked child drops the parent's).
static READY: Mutex<(u32, Vec<File>)> = Mutex::new((0, Vec::new()));

/// Creates unnamed files in `dir`'s file system until three are ready.
pub(crate) fn prepare(dir: &Path) {
    while of_this_process(&READY).1.len() < MAX_READY {
        let Some(file) = unnamed(dir) else { return };
        of_this_process(&READY).1.push(file);
    }
}

/// Writes `bytes` into a prepared file and links it as `path`: the file to sync later, or
/// `None` where none is ready or it could not be written or linked there (the caller writes
/// `path` its own way; an unlinked file is dropped, freed by the system).
pub(crate) fn write(path: &Path, bytes: &[u8]) -> Option<Written> {
    let file = of_this_process(&READY).1.pop()?;
    write_into(file, path, bytes)
}

fn write_into(mut file: File, path: &Path, bytes: &[u8]) -> Option<Written> {
    file.write_all(bytes).ok()?;
    link(&file, path).ok()?;
    Some(Written::linked(file, PathBuf::from(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_gets_its_name_with_its_bytes_and_never_replaces_one() {
        let t = tempfile::tempdir().unwrap();
        let file = || unnamed(t.path()).expect("O_TMPFILE in a temporary directory");
        let dump = t.path().join("dump.json");
        let w = write_into(file(), &dump, b"{}").expect("linked");
        assert_eq!(w.path(), dump);
        w.sync().unwrap();
        assert_eq!(std::fs::read(&dump).unwrap(), b"{}");
        // An existing name is left alone (the caller replaces it its own way).
        assert!(write_into(file(), &dump, b"{\"x\": 1}").is_none());
        assert_eq!(std::fs::read(&dump).unwrap(), b"{}");
        // Nor is a link planted under a name followed.
        let elsewhere = t.path().join("elsewhere");
        std::fs::write(&elsewhere, b"keep").unwrap();
        let planted = t.path().join("stack.json");
        std::os::unix::fs::symlink(&elsewhere, &planted).unwrap();
        assert!(write_into(file(), &planted, b"[]").is_none());
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"keep");
        // Files that were not linked left no name behind.
        let mut names: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["dump.json", "elsewhere", "stack.json"]);
    }

    #[test]
    fn prepared_files_have_no_name() {
        let t = tempfile::tempdir().unwrap();
        prepare(t.path());
        // Other tests' sessions may take some meanwhile; never more than a step's three.
        assert!(of_this_process(&READY).1.len() <= MAX_READY);
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
    }
}
