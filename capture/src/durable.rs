//! The end of a clean step, off the recording thread: the step's JSON files, already complete
//! under their names when [`crate::Session::settle`] returns, are fsynced with their
//! directory on a worker thread, and then the journal is removed (and, on Linux, the next
//! step's journal file, directories and JSON files prepared: `journal_spare`, `dir_spare`,
//! `file_spare`). The recording thread pays for rendering and writing the files only; the
//! fsyncs cost 2–5 ms of wall time per step on the development machine's virtio disk
//! (benches/RESULTS.md), more than a small model's whole step.
//!
//! Until its job is done a step's journal stays: a process killed meanwhile leaves complete
//! JSON files and the journal, which `numprobe validate` reports as an unfinished run and
//! `numprobe recover` rebuilds to the same files. A new journal in the same directory waits
//! for the directory's job first ([`wait_dir`]); [`wait_all`] waits for every job (the
//! adapters call it at exit) and reports jobs that failed, whose journals stay.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, mpsc};

use dumpfmt::outfile::{Written, sync_written};

use crate::error::{Error, Result};
use crate::journal::JournalWriter;

struct Jobs {
    /// The process and directory of every job not finished yet (once per job). A child forked
    /// while jobs ran inherits their entries but not their threads: it waits for its own only.
    running: Vec<(u32, PathBuf)>,
    /// Errors of finished jobs not reported yet.
    failed: Vec<Error>,
}

static JOBS: Mutex<Jobs> = Mutex::new(Jobs {
    running: Vec::new(),
    failed: Vec::new(),
});
static DONE: Condvar = Condvar::new();

fn jobs() -> MutexGuard<'static, Jobs> {
    // A job that panicked left consistent data (a Vec push or removal): go on with it.
    JOBS.lock().unwrap_or_else(|e| e.into_inner())
}

/// One directory's identity for [`wait_dir`] and [`submit`] (the same directory reached by
/// another path): its canonical path, resolved once per capture (a `readlink` per path
/// component each time cost as much as the rest of a job's hand-over).
#[derive(Clone, Debug)]
pub struct DirKey(PathBuf);

impl DirKey {
    /// The key of existing directory `dir`.
    pub fn of(dir: &Path) -> DirKey {
        DirKey(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()))
    }
}

type Work = (Vec<Written>, Option<JournalWriter>);

/// Jobs at most in flight: past it a step waits for one (a disk slower than the steps must
/// not pile up open files and journals).
const MAX_RUNNING: usize = 4;

fn running_here(j: &Jobs) -> impl Iterator<Item = &PathBuf> {
    let pid = std::process::id();
    j.running
        .iter()
        .filter(move |(p, _)| *p == pid)
        .map(|(_, d)| d)
}

/// The worker's queue: started with the first job, then kept (a thread per step cost more
/// than the fsyncs it moved: creating and unmapping a thread's stack interrupts the other
/// core on a VM).
/// With the process that started the worker: a forked child has the queue but not the thread.
static QUEUE: Mutex<Option<(u32, Queue)>> = Mutex::new(None);

type Queue = mpsc::Sender<(PathBuf, Work)>;

/// Makes `files` durable, then removes `journal`, on the worker thread (on this thread when
/// no thread can be started).
pub fn submit(dir: &DirKey, files: Vec<Written>, journal: Option<JournalWriter>) {
    let dir = dir.0.clone();
    {
        let mut j = jobs();
        while running_here(&j).count() >= MAX_RUNNING {
            j = DONE.wait(j).unwrap_or_else(|e| e.into_inner());
        }
        j.running.push((std::process::id(), dir.clone()));
    }
    let mut job = Some((dir, (files, journal)));
    {
        let mut q = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        if q.as_ref().is_some_and(|(p, _)| *p != pid) {
            // Forgotten, not dropped: the parent's channel is not this process's to close.
            std::mem::forget(q.take());
        }
        if q.is_none() {
            let (tx, rx) = mpsc::channel::<(PathBuf, Work)>();
            let started = std::thread::Builder::new()
                .name("numprobe-durable".into())
                .spawn(move || {
                    for (dir, work) in rx {
                        run(&dir, work);
                    }
                });
            if started.is_ok() {
                *q = Some((pid, tx));
            }
        }
        if let Some((_, tx)) = q.as_ref() {
            // A send fails only when the worker is gone: then here.
            match tx.send(job.take().expect("set above")) {
                Ok(()) => {}
                Err(mpsc::SendError(back)) => {
                    job = Some(back);
                    *q = None;
                }
            }
        }
    }
    if let Some((dir, work)) = job {
        run(&dir, work);
    }
}

fn run(dir: &Path, (files, journal): Work) {
    let outcome = finish(dir, &files, journal);
    let mut j = jobs();
    let pid = std::process::id();
    if let Some(i) = j.running.iter().position(|(p, d)| *p == pid && d == dir) {
        j.running.swap_remove(i);
    }
    if let Err(e) = outcome {
        j.failed.push(e);
    }
    DONE.notify_all();
}

fn finish(dir: &Path, files: &[Written], journal: Option<JournalWriter>) -> Result<()> {
    // A failed sync keeps the journal (dropped, not removed): the run stays recoverable.
    sync_written(files)?;
    for f in files {
        f.release_cache();
    }
    let used = journal.as_ref().map_or(0, JournalWriter::len);
    if let Some(j) = journal {
        j.remove()?;
    }
    // The next step's journal, directories and files, made while the recording thread runs
    // that step.
    #[cfg(target_os = "linux")]
    {
        JournalWriter::prepare_next(dir, used);
        crate::dir_spare::prepare(dir);
        crate::file_spare::prepare(dir);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (dir, used);
    Ok(())
}

/// Waits until no job of directory `dir` is running.
pub fn wait_dir(dir: &DirKey) {
    let mut j = jobs();
    while running_here(&j).any(|d| *d == dir.0) {
        j = DONE.wait(j).unwrap_or_else(|e| e.into_inner());
    }
}

/// Waits for every job; the first error of the jobs that failed since the last report
/// (their journals stayed), naming how many failed.
/// The directories prepared for a next step are removed then (see `dir_spare`).
pub fn wait_all() -> Result<()> {
    let mut j = jobs();
    while running_here(&j).next().is_some() {
        j = DONE.wait(j).unwrap_or_else(|e| e.into_inner());
    }
    #[cfg(target_os = "linux")]
    crate::dir_spare::discard_all();
    take_failed(&mut j)
}

/// The errors of jobs that have failed so far (without waiting for running ones).
pub fn failed_so_far() -> Result<()> {
    take_failed(&mut jobs())
}

fn take_failed(j: &mut Jobs) -> Result<()> {
    let mut failed = std::mem::take(&mut j.failed);
    if failed.is_empty() {
        return Ok(());
    }
    let more = failed.len() - 1;
    let first = failed.swap_remove(0);
    if more == 0 {
        return Err(first);
    }
    Err(Error::Durable {
        first: Box::new(first),
        more,
    })
}
