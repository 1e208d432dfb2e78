//! Step directories made ahead of the step that needs them (Linux).
//!
//! Each step's capture starts by creating `dump/step{N}/{rank}`. Creating a directory
//! allocates an inode wherever the filesystem places new directories, and on a busy disk that
//! `mkdir` can wait for other I/O: on the development machine's virtio disk 35 of 1,208 such
//! `mkdir`s took over 5 ms and up to 450 ms, a mean of 2.8 ms a step on a 10 ms step, while the
//! files created inside the new directory never waited (benches/RESULTS.md). So the durability
//! worker, once a step's files are durable, makes the next step's two directories under a
//! hidden name of the dump directory (`dump/.numprobe-next-{pid}-{random}/step/{rank}`), and the next
//! capture moves them into place with one `rename` that allocates nothing: the whole step
//! directory when it does not exist yet, or only the rank directory into a step directory
//! another rank made first. Neither rename ever replaces what is there (`RENAME_NOREPLACE`);
//! where one cannot be done the directory is created as before.
//!
//! The hidden directory is empty apart from the two prepared ones, is ignored by every reader
//! (steps are the `step{N}` directories), and is removed when the process waits for its
//! durable ends at exit ([`discard_all`]); a killed process can leave it behind, empty.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The dump directories where this process prepared step directories, with the process that
/// prepared them (a forked child inherits the list; it removes only its own).
static PREPARED: Mutex<(u32, Vec<PathBuf>)> = Mutex::new((0, Vec::new()));

fn prepared() -> std::sync::MutexGuard<'static, (u32, Vec<PathBuf>)> {
    crate::journal_spare::of_this_process(&PREPARED)
}

/// `(dump directory, step directory name, rank directory name)` of a rank directory
/// `dump/step{N}/{rank}`; `None` for any other path (a capture into a directory of its own).
fn split(rank_dir: &Path) -> Option<(&Path, &std::ffi::OsStr, &std::ffi::OsStr)> {
    let rank = rank_dir.file_name()?;
    let step_dir = rank_dir.parent()?;
    let step = step_dir.file_name()?;
    let n = step.to_str()?.strip_prefix("step")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let dump = step_dir.parent()?;
    let dump = if dump.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dump
    };
    Some((dump, step, rank))
}

/// This process's hidden directory in `dump`: its id and a random number drawn once (ranks in
/// separate containers writing to one shared dump directory can have the same id; a forked
/// child, the same number).
fn holder(dump: &Path) -> PathBuf {
    use std::hash::{BuildHasher, Hasher};
    static DRAWN: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let drawn = DRAWN.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as u32
    });
    dump.join(format!(".numprobe-next-{}-{drawn:08x}", std::process::id()))
}

/// A real directory (not a link to one) at `p`.
fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir())
}

/// Whether directory `dir` holds one entry. A directory's link count is 2 plus its
/// subdirectories where the file system counts them (ext4, xfs, tmpfs): 3 answers without
/// listing it, which costs five system calls and a 32 KiB buffer on the recording thread at
/// every step. Files are not counted there, and only the durability worker puts anything in
/// the hidden directory (directories). Elsewhere (btrfs counts 1, a directory past ext4's
/// 65,000 subdirectories too) it is listed.
fn holds_one(dir: &Path) -> bool {
    real_dir_links(dir).is_some_and(|links| holds_one_of(dir, links))
}

/// [`holds_one`] of a directory whose link count is `links`.
fn holds_one_of(dir: &Path, links: u64) -> bool {
    match links {
        3 => true,
        n if n > 3 => false,
        _ => std::fs::read_dir(dir).is_ok_and(|entries| entries.count() == 1),
    }
}

/// The link count of a real directory (not a link to one) at `p`.
fn real_dir_links(p: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(p).ok()?;
    md.file_type().is_dir().then(|| md.nlink())
}

/// Makes the directories a next step of `rank_dir`'s rank would create
/// (`holder/step/{rank}`), unless they are ready. Best effort: a failure only leaves the next
/// step to create its directories itself.
pub(crate) fn prepare(rank_dir: &Path) {
    let Some((dump, _, rank)) = split(rank_dir) else {
        return;
    };
    let holder = holder(dump);
    match std::fs::create_dir(&holder) {
        Ok(()) => {}
        // Ours from an earlier step (a link planted under its name is not).
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && is_real_dir(&holder) => {}
        Err(_) => return,
    }
    {
        let mut g = prepared();
        if !g.1.iter().any(|d| d == dump) {
            g.1.push(dump.to_path_buf());
        }
    }
    let step = holder.join("step");
    let ready = is_real_dir(&step.join(rank)) && holds_one(&step);
    if ready {
        return;
    }
    // What a step with another rank name left: empty directories only (`remove_dir`).
    if let Ok(entries) = std::fs::read_dir(&step) {
        for e in entries.flatten() {
            let _ = std::fs::remove_dir(e.path());
        }
        let _ = std::fs::remove_dir(&step);
    }
    if std::fs::create_dir(&step).is_err() || std::fs::create_dir(step.join(rank)).is_err() {
        let _ = std::fs::remove_dir(step.join(rank));
        let _ = std::fs::remove_dir(&step);
    }
}

/// `rename(from, to)` that fails with `AlreadyExists` where `to` exists.
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    Ok(renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE)?)
}

/// Puts prepared directories at `rank_dir`: the whole step directory when it does not exist,
/// else the rank directory alone; whether `rank_dir` now exists through them (otherwise the
/// caller creates it, as where nothing was prepared).
pub(crate) fn take(rank_dir: &Path) -> bool {
    let Some((dump, step_name, rank)) = split(rank_dir) else {
        return false;
    };
    let holder = holder(dump);
    let step = holder.join("step");
    let prepared_rank = step.join(rank);
    if !is_real_dir(&holder) {
        return false;
    }
    let Some(step_links) = real_dir_links(&step) else {
        return false;
    };
    if !is_real_dir(&prepared_rank) {
        return false;
    }
    // The whole step directory only while it holds this rank's directory alone (the worker
    // may be clearing another rank name's).
    if holds_one_of(&step, step_links) {
        match rename_noreplace(&step, &dump.join(step_name)) {
            // What was moved is checked: another process under the same hidden name (not
            // expected, see `holder`) would leave it to `mkdir`.
            Ok(()) => return is_real_dir(rank_dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return false,
        }
    }
    rename_noreplace(&prepared_rank, rank_dir).is_ok()
}

/// Removes this process's prepared directories (at exit: the dump directory keeps the steps'
/// directories only). Empty directories only: anything else found there stays.
pub(crate) fn discard_all() {
    let dumps = std::mem::take(&mut prepared().1);
    for dump in dumps {
        let holder = holder(&dump);
        if !is_real_dir(&holder) {
            continue;
        }
        let step = holder.join("step");
        if let Ok(entries) = std::fs::read_dir(&step) {
            for e in entries.flatten() {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(&step);
        let _ = std::fs::remove_dir(&holder);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests share this process's list of prepared directories ([`discard_all`]).
    static SERIAL: Mutex<()> = Mutex::new(());

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A dump directory (in a temporary one) with rank0's next step directories prepared.
    fn prepared_rank0() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let dump = t.path().join("dump");
        std::fs::create_dir(&dump).unwrap();
        prepare(&dump.join("step0").join("rank0"));
        (t, dump)
    }

    #[test]
    fn a_prepared_step_directory_is_moved_into_place() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let (_t, dump) = prepared_rank0();
        let hidden = holder(&dump)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(hidden.starts_with(&format!(".numprobe-next-{}-", std::process::id())));
        assert_eq!(names(&dump), std::slice::from_ref(&hidden));
        // Ready directories are not made again.
        prepare(&dump.join("step0").join("rank0"));
        assert!(take(&dump.join("step1").join("rank0")));
        assert_eq!(names(&dump), [hidden.clone(), "step1".to_owned()]);
        assert_eq!(names(&dump.join("step1")), ["rank0"]);
        assert!(names(&dump.join("step1").join("rank0")).is_empty());
        // Nothing prepared: the caller creates the directory.
        assert!(!take(&dump.join("step2").join("rank0")));
        discard_all();
        assert_eq!(names(&dump), ["step1"]);
    }

    #[test]
    fn an_existing_step_directory_gets_the_rank_directory_only() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = tempfile::tempdir().unwrap();
        let dump = t.path().join("dump");
        let other = dump.join("step3").join("rank1");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("dump.json"), b"{}").unwrap();
        prepare(&dump.join("step2").join("rank0"));
        assert!(take(&dump.join("step3").join("rank0")));
        assert_eq!(names(&dump.join("step3")), ["rank0", "rank1"]);
        assert_eq!(names(&other), ["dump.json"]);
        // A rank directory that exists is never replaced.
        prepare(&dump.join("step3").join("rank0"));
        std::fs::write(dump.join("step3").join("rank0").join("dump.json"), b"{}").unwrap();
        assert!(!take(&dump.join("step3").join("rank0")));
        assert_eq!(names(&dump.join("step3").join("rank0")), ["dump.json"]);
        // Another rank name: the stale one is not carried into the next step.
        prepare(&dump.join("step3").join("rank5"));
        assert!(take(&dump.join("step4").join("rank5")));
        assert_eq!(names(&dump.join("step4")), ["rank5"]);
        discard_all();
        assert_eq!(names(&dump), ["step3", "step4"]);
    }

    #[test]
    fn a_hidden_step_directory_holding_two_ranks_is_not_moved_whole() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let (_t, dump) = prepared_rank0();
        let hidden_step = holder(&dump).join("step");
        std::fs::create_dir(hidden_step.join("rank9")).unwrap();
        assert!(!holds_one(&hidden_step));
        // Another rank's directory is never carried into this rank's step: the caller makes
        // the step directory itself.
        assert!(!take(&dump.join("step1").join("rank0")));
        assert!(!dump.join("step1").exists());
        assert_eq!(names(&hidden_step), ["rank0", "rank9"]);
        std::fs::remove_dir(hidden_step.join("rank9")).unwrap();
        assert!(holds_one(&hidden_step));
        assert!(take(&dump.join("step1").join("rank0")));
        assert_eq!(names(&dump.join("step1")), ["rank0"]);
        std::fs::create_dir(&hidden_step).unwrap();
        assert!(!holds_one(&hidden_step));
        discard_all();
        assert_eq!(names(&dump), ["step1"]);
    }

    #[test]
    fn only_step_directories_are_prepared() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a").join("capture");
        std::fs::create_dir_all(&dir).unwrap();
        prepare(&dir);
        prepare(&t.path().join("a").join("stepx").join("rank0"));
        assert_eq!(names(t.path()), ["a"]);
        assert_eq!(names(&t.path().join("a")), ["capture"]);
    }

    #[test]
    fn a_planted_link_is_not_followed() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = tempfile::tempdir().unwrap();
        let dump = t.path().join("dump");
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir_all(&dump).unwrap();
        std::fs::create_dir_all(elsewhere.join("step").join("rank0")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, holder(&dump)).unwrap();
        prepare(&dump.join("step0").join("rank0"));
        assert!(!take(&dump.join("step1").join("rank0")));
        assert!(!dump.join("step1").exists());
        assert!(elsewhere.join("step").join("rank0").is_dir());
    }
}
