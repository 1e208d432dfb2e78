//! Capture side of numprobe: what an adapter (the `numprobe` Python package for PyTorch)
//! calls to record a run in msprobe's dump format.
//!
//! * [`journal`]: the crash-safe, append-only record of everything captured.
//! * [`state`]: replays records into dump.json / stack.json / construct.json.
//! * [`frames`]: a call site's stack lines, rendered once for every step.
//! * [`stats`]: tensor records with statistics from stats-gpu, read in place (float32
//!   Mean/Norm in PyTorch's CPU summation order, `stats_gpu::torch_order`).
//! * [`stats_worker`]: the same records computed on a second thread while training goes on,
//!   delivered as fills of placeholder records (below).
//! * [`tensors`]: `.pt` files written on a background thread.
//! * [`durable`]: a clean step's JSON files fsynced and its journal removed off the
//!   recording thread.
//! * [`Session`] ties them together for one rank directory; [`recover`] rebuilds the JSON
//!   files of a killed run from its journals.
//!
//! Device statistics (and host statistics on the [`stats_worker`] thread): an adapter that
//! computes a tensor's statistics elsewhere journals the entry at hook time with a placeholder
//! record ([`Record::PendingEntry`], the record carrying [`state::PENDING_KEY`] and `null`
//! statistics) and the values later ([`Session::fill`]: after one readback for many device
//! tensors, or when the statistics thread has finished). The JSON files and [`recover`] apply every
//! fill that reached the journal. A record whose fill never came (the process was killed
//! between the hook and the readback) is written with its statistic keys present and `null`:
//! the entry keeps its place, name, dtype, shape and `requires_grad`, which a comparison can
//! still match, and `null` is what msprobe writes for statistics it could not compute.

#[cfg(target_os = "linux")]
mod dir_spare;
pub mod durable;
pub mod error;
#[cfg(target_os = "linux")]
mod file_spare;
pub mod frames;
pub mod journal;
#[cfg(target_os = "linux")]
mod journal_spare;
pub mod kernel_stats;
pub mod state;
pub mod stats;
pub mod stats_worker;
pub mod tensors;

use std::path::{Path, PathBuf};

pub use error::{Error, Result};
pub use frames::Frames;
pub use journal::{Fill, Meta, Record};
pub use state::DumpState;

/// The capture of one rank directory (`dump/step{N}/{rank}`): every record goes to the
/// journal first, then into the in-memory dump that [`Session::write_json`] writes out.
pub struct Session {
    dir: PathBuf,
    /// `dir`'s identity for the durability worker.
    dir_key: durable::DirKey,
    /// `None` once [`Session::settle`] removed the journal; the next record starts a new one.
    journal: Option<journal::JournalWriter>,
    state: DumpState,
    /// Records since the JSON files were last written.
    dirty: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        std::mem::take(&mut self.state).recycle();
    }
}

impl Session {
    /// Creates `dir` (and parents: on Linux the ones the durability worker made ahead, see
    /// `dir_spare`) and a fresh journal in it, starting with `meta`.
    pub fn create(dir: &Path, meta: Meta) -> Result<Session> {
        #[cfg(target_os = "linux")]
        let made = dir_spare::take(dir);
        #[cfg(not(target_os = "linux"))]
        let made = false;
        if !made {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        // A session of this directory that ended may still be removing its journal.
        let dir_key = durable::DirKey::of(dir);
        durable::wait_dir(&dir_key);
        let journal = journal::JournalWriter::create(&dir.join(journal::FILE_NAME))?;
        let mut s = Session {
            dir: dir.to_path_buf(),
            dir_key,
            journal: Some(journal),
            state: DumpState::reused(),
            dirty: true,
        };
        s.record(Record::Meta(meta))?;
        Ok(s)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn state(&self) -> &DumpState {
        &self.state
    }

    /// Journals `rec`, then applies it.
    pub fn record(&mut self, rec: Record) -> Result<()> {
        match rec {
            Record::Entry {
                name,
                body,
                reinsert,
            } => self.record_entry(name, body, reinsert, None),
            mut rec => {
                self.journal()?.append_lent(&mut rec)?;
                self.state.apply_owned(rec);
                self.dirty = true;
                Ok(())
            }
        }
    }

    /// Journals `rec` and the call stack of entry `name` as that of stack group `group` with
    /// one `write` (see [`Session::stack_ref`]), then applies both.
    pub fn record_with_stack_ref(&mut self, rec: Record, name: String, group: usize) -> Result<()> {
        self.check_group(&name, group)?;
        let rec = match rec {
            Record::Entry {
                name: entry,
                body,
                reinsert,
            } if entry == name => return self.record_entry(entry, body, reinsert, Some(group)),
            other => other,
        };
        let mut recs = [rec, Record::StackRef { name, group }];
        self.journal()?.append_lent_all(&mut recs)?;
        for r in recs {
            self.state.apply_owned(r);
        }
        self.dirty = true;
        Ok(())
    }

    /// An entry record: its body rendered once, for the journal frame and the state (see
    /// [`state::RenderedBody`]); with `group`, its stack reference in the same `write`.
    fn record_entry(
        &mut self,
        name: String,
        body: dumpfmt::json::Map,
        reinsert: bool,
        group: Option<usize>,
    ) -> Result<()> {
        self.record_rendered(name, state::render_body(body), reinsert, group)
    }

    /// An entry record whose body a writer rendered already (its values at
    /// [`state::VALUE_LEVEL`], as [`state::render_body`] renders them); with `group`, its stack
    /// reference in the same `write` (stack group `group` must exist).
    pub fn record_rendered(
        &mut self,
        name: String,
        body: state::RenderedBody,
        reinsert: bool,
        group: Option<usize>,
    ) -> Result<()> {
        if let Some(g) = group {
            self.check_group(&name, g)?;
        }
        self.journal()?
            .append_entry(&name, body.iter(), reinsert, group)?;
        self.state.merge_rendered(&name, &body, reinsert);
        if let Some(g) = group {
            self.state.apply_owned(Record::StackRef { name, group: g });
        }
        self.dirty = true;
        Ok(())
    }

    /// Journals the statistics of pending tensor records (see [`Record::Fill`]); nothing for an
    /// empty list.
    pub fn fill(&mut self, fills: Vec<Fill>) -> Result<()> {
        if fills.is_empty() {
            return Ok(());
        }
        self.record(Record::Fill(fills))
    }

    /// Records the call stack of `name`; returns the index of its stack group, which later
    /// entries with the same frames can name through [`Session::stack_ref`] (a short journal
    /// record instead of the whole frame list).
    pub fn stack(&mut self, name: String, frames: Vec<String>) -> Result<usize> {
        // A known frame list needs no rendering.
        if let Some(g) = self.state.stack_group_of(&frames) {
            self.stack_ref(name, g)?;
            return Ok(g);
        }
        self.stack_frames(name, &std::sync::Arc::new(Frames::new(frames)))
    }

    /// [`stack`](Session::stack) of frames rendered once per call site and shared by every
    /// step's capture (see [`frames`]).
    pub fn stack_frames(&mut self, name: String, frames: &std::sync::Arc<Frames>) -> Result<usize> {
        if let Some(g) = self.state.stack_group_of_frames(frames) {
            self.stack_ref(name, g)?;
            return Ok(g);
        }
        let g = self.state.stack_group_count();
        self.journal()?
            .append_payload(&journal::stack_payload(&name, frames))?;
        self.state.add_stack_frames(name, frames);
        self.dirty = true;
        Ok(g)
    }

    /// Records the call stack of `name` as that of stack group `group`.
    pub fn stack_ref(&mut self, name: String, group: usize) -> Result<()> {
        self.check_group(&name, group)?;
        self.journal()?
            .append_payload(&journal::stack_ref_payload(&name, group))?;
        self.state.apply_owned(Record::StackRef { name, group });
        self.dirty = true;
        Ok(())
    }

    fn check_group(&self, name: &str, group: usize) -> Result<()> {
        if group >= self.state.stack_group_count() {
            return Err(Error::Journal {
                path: self.dir.join(journal::FILE_NAME),
                offset: 0,
                msg: format!("stack group {group} does not exist (entry {name})"),
            });
        }
        Ok(())
    }

    /// Writes the JSON files from everything recorded so far (nothing to do when no record
    /// came since the last write).
    pub fn write_json(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        self.state.write_files(&self.dir)?;
        if let Some(j) = &mut self.journal {
            j.append(&Record::Checkpoint)?;
        }
        self.dirty = false;
        Ok(())
    }

    /// [`write_json`](Session::write_json), then fsync the journal so the step survives a
    /// power cut too (a killed process loses nothing either way).
    pub fn finish(&mut self) -> Result<()> {
        self.write_json()?;
        match &mut self.journal {
            Some(j) => j.sync(),
            None => Ok(()),
        }
    }

    /// The end of a clean stop()/step(): the JSON files are written (complete under their
    /// names when this returns), then made durable (fsynced with their directory) and the
    /// journal removed, off this thread ([`durable`]), so the rank directory ends with
    /// msprobe's files only. With `keep_journal` (or while a record still waits for its
    /// statistics) the journal stays, fsynced. Returns whether the journal is on its way out.
    /// Recording may go on: the next record starts a new journal holding the whole state
    /// first. An error of an earlier step's durable end is reported here.
    pub fn settle(&mut self, keep_journal: bool) -> Result<bool> {
        if self.journal.is_none() && !self.dirty {
            durable::failed_so_far()?;
            return Ok(true);
        }
        if keep_journal || self.state.pending_len() > 0 {
            self.finish()?;
            durable::failed_so_far()?;
            return Ok(false);
        }
        let files = self.state.write_files_for_later_sync(&self.dir)?;
        self.dirty = false;
        durable::submit(&self.dir_key, files, self.journal.take());
        durable::failed_so_far()?;
        Ok(true)
    }

    /// The journal, started afresh from the current state when [`Session::settle`] removed it.
    fn journal(&mut self) -> Result<&mut journal::JournalWriter> {
        if self.journal.is_none() {
            // The last one may still be on its way out (same file name, same lock).
            durable::wait_dir(&self.dir_key);
            let mut j = journal::JournalWriter::create(&self.dir.join(journal::FILE_NAME))?;
            for payload in self.state.snapshot_payloads().unwrap_or_default() {
                j.append_payload(&payload)?;
            }
            self.journal = Some(j);
        }
        Ok(self.journal.as_mut().expect("set above"))
    }
}

/// What [`recover`] did for one journal.
#[derive(Debug)]
pub struct Recovered {
    /// The rank directory whose JSON files were (or would have been) rewritten.
    pub dir: PathBuf,
    pub records: usize,
    pub entries: usize,
    /// Bytes of a torn tail that were ignored (what a killed write leaves: expected).
    pub ignored_tail: u64,
    /// Damaged stretches in the middle of the journal that were skipped, each at least one
    /// record lost, and their bytes.
    pub damaged_frames: usize,
    pub damaged_bytes: u64,
    /// Intact frames whose record could not be decoded.
    pub malformed_records: usize,
    /// Records of kinds this build does not know, by kind byte.
    pub unknown_kinds: std::collections::BTreeMap<u8, usize>,
    /// The journal's format version; `None` for a journal from before versions (major 1).
    pub version: Option<(u32, u32)>,
    /// Tensor records whose device statistics never reached the journal (written with
    /// `null` statistics).
    pub unfilled: usize,
    /// Entries in the dump.json that was there before; `None` when there was none or it
    /// could not be parsed.
    pub previous_entries: Option<usize>,
    pub outcome: RecoverOutcome,
}

impl Recovered {
    /// Journal records that could not be read (damage in the middle, malformed or unknown
    /// records), the torn tail not included.
    pub fn unread_records(&self) -> usize {
        self.damaged_frames + self.malformed_records + self.unknown_kinds.values().sum::<usize>()
    }
}

/// What [`recover`] did with a rank directory's JSON files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoverOutcome {
    /// The files were written; the previous ones that differed were kept as
    /// `{name}.bak-{n}` (`backup: Some(n)`).
    Written { backup: Option<u32> },
    /// The journal gives exactly the files already there: nothing written.
    Unchanged,
    /// Not written: the journal gives fewer entries than the dump.json already there, and
    /// `force` was not given.
    Refused { previous: usize, recovered: usize },
}

/// Options of [`recover_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RecoverOptions {
    /// Replace a dump.json even when the journal gives fewer entries (the previous files are
    /// still kept as backups).
    pub force: bool,
}

/// [`recover_with`] with default options (never replaces a dump with fewer entries).
pub fn recover(dir: &Path) -> Result<Vec<Recovered>> {
    recover_with(dir, RecoverOptions::default())
}

/// Rebuilds dump.json, stack.json and construct.json from every journal at or below `dir`
/// (a rank directory, a step directory or a whole dump root).
///
/// Never leaves less than was there: a journal giving fewer entries than the existing
/// dump.json is refused unless `opts.force`; every previous file whose contents change is
/// kept beside it as `{name}.bak-{n}` (the lowest `n` free for all three names, so one run's
/// backups share a number); a file that is a symbolic link or not a regular file is refused.
pub fn recover_with(dir: &Path, opts: RecoverOptions) -> Result<Vec<Recovered>> {
    let mut journals = Vec::new();
    find_journals(dir, &mut journals)?;
    if journals.is_empty() {
        return Err(Error::NoJournal {
            path: dir.to_path_buf(),
            journal: journal::FILE_NAME,
        });
    }
    journals.sort();
    let mut out = Vec::with_capacity(journals.len());
    for (j, found) in journals {
        let replay = if found {
            journal::read_found(&j)?
        } else {
            journal::read(&j)?
        };
        let mut state = DumpState::new();
        let records = replay.records.len();
        for r in replay.records {
            state.apply_owned(r);
        }
        let rank_dir = j.parent().unwrap_or(Path::new(".")).to_path_buf();
        let unfilled = state.unfilled_records();
        let entries = state.data_len();
        let names = state.file_names();
        for name in names {
            dumpfmt::outfile::check_target(&rank_dir.join(name))?;
        }
        let previous_entries = previous_entries(&rank_dir.join("dump.json"));
        let outcome = match previous_entries {
            Some(previous) if previous > entries && !opts.force => RecoverOutcome::Refused {
                previous,
                recovered: entries,
            },
            _ => write_keeping_backups(&rank_dir, state.render_files())?,
        };
        out.push(Recovered {
            dir: rank_dir,
            records,
            entries,
            ignored_tail: replay.ignored_tail,
            damaged_frames: replay.damaged_frames,
            damaged_bytes: replay.damaged_bytes,
            malformed_records: replay.malformed_records,
            unknown_kinds: replay.unknown_kinds,
            version: replay.version,
            unfilled,
            previous_entries,
            outcome,
        });
    }
    Ok(out)
}

/// Entries in an existing dump.json's `data`; `None` when absent or not a dump.
fn previous_entries(path: &Path) -> Option<usize> {
    if !std::fs::symlink_metadata(path).ok()?.is_file() {
        return None;
    }
    let v = dumpfmt::json::parse_file(path).ok()?;
    match v.get("data")? {
        dumpfmt::json::Value::Object(m) => Some(m.len()),
        _ => None,
    }
}

/// Writes `files` into `dir`, first keeping each existing file whose bytes differ as
/// `{name}.bak-{n}` (a hard link when the file system allows, else a copy), then replacing it
/// atomically: at every moment each name holds either its old or its new complete contents.
fn write_keeping_backups(dir: &Path, files: Vec<(&str, Vec<u8>)>) -> Result<RecoverOutcome> {
    let changed: Vec<&(&str, Vec<u8>)> = files
        .iter()
        // A FIFO under one of the names is never waited on (outfile refuses to replace it).
        .filter(|(name, bytes)| {
            dumpfmt::fsio::read_regular(&dir.join(name)).ok().as_ref() != Some(bytes)
        })
        .collect();
    if changed.is_empty() {
        return Ok(RecoverOutcome::Unchanged);
    }
    let existing: Vec<&str> = changed
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| std::fs::symlink_metadata(dir.join(name)).is_ok())
        .collect();
    let backup = if existing.is_empty() {
        None
    } else {
        let free = |n: u32| {
            files.iter().all(|(name, _)| {
                std::fs::symlink_metadata(dir.join(format!("{name}.bak-{n}"))).is_err()
            })
        };
        let n = (1..=u32::MAX)
            .find(|&n| free(n))
            .expect("a free backup number");
        for name in &existing {
            let (from, to) = (dir.join(name), dir.join(format!("{name}.bak-{n}")));
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to).map_err(|e| Error::io(&to, e))?;
            }
        }
        Some(n)
    };
    for (name, bytes) in changed {
        dumpfmt::outfile::write(&dir.join(name), bytes)?;
    }
    Ok(RecoverOutcome::Written { backup })
}

/// The journals at or below `dir`: (path, whether it was found in a directory rather than
/// named by the user).
fn find_journals(dir: &Path, out: &mut Vec<(PathBuf, bool)>) -> Result<()> {
    // A path that does not exist is said to be missing, not to hold no journal.
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    if !meta.is_dir() {
        // A journal that is a FIFO, device or link is still the journal: journal::read
        // refuses what is not a regular file and says what it is.
        if dir.file_name().is_some_and(|n| n == journal::FILE_NAME) {
            out.push((dir.to_path_buf(), false));
        }
        return Ok(());
    }
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for e in rd {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let ft = e.file_type().map_err(|err| Error::io(&e.path(), err))?;
        let p = e.path();
        if ft.is_dir() {
            // Tensor folders hold thousands of files and never a journal.
            if p.file_name().is_some_and(|n| n == "dump_tensor_data") {
                continue;
            }
            find_journals(&p, out)?;
        } else if e.file_name() == journal::FILE_NAME {
            // Found, not named: a link out of its directory would replay another capture's
            // journal (or any file) into this rank's files.
            dumpfmt::fsio::check_found_file(&p)?;
            out.push((p, true));
        }
    }
    Ok(())
}
