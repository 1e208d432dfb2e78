//! The append-only journal: every fact of a dump (meta, entry data, stacks, construct parents)
//! is appended as one framed record the moment it is known, so a process killed at any point
//! leaves a file from which every completed record can be replayed.
//!
//! File layout: the 8-byte magic [`MAGIC`] (`NPJRNL` + the two-digit major format version),
//! then frames `[u32 LE payload length][u32 LE CRC-32 of payload][payload]`. A payload is one
//! kind byte followed by the record's JSON text (dumpfmt's writer, so floats round-trip
//! exactly). Each frame reaches the OS the moment it is appended (see [`JournalWriter`]): a
//! SIGKILL cannot lose it, only a power cut can (hence [`JournalWriter::sync`] at step ends).
//! A journal still being written, or left by a killed process, may end in a stretch of zero
//! bytes (space reserved ahead of the frames): readers treat it as the end of the file.
//!
//! Format versions: major 1 (`NPJRNL01`, journals written before versions existed) has no
//! version frame; major 2 (same frames) starts with a version frame (kind 10, `{"major": 2,
//! "minor": 0, "writer": …}`). A reader reads every major up to its own and refuses a newer
//! one; record kinds it does not know (a newer minor version) are counted, not silently lost.
//! The major went from 1 to 2 with the version frame so that an older numprobe refuses these
//! journals ("bad magic") instead of replaying none of their records.
//!
//! Damage: a frame whose CRC or length is wrong is skipped and reading resynchronises on the
//! next intact frame (first where its length field says, else by scanning); damage with no
//! intact frame after it is a torn tail (what a killed or power-cut write leaves). [`Replay`]
//! reports both, and how many frames could not be read.
//!
//! Statistics computed on a device are read back once per step, after their entries were
//! journaled: such entries are [`Record::PendingEntry`] records whose tensor records carry a
//! pending id, and a later [`Record::Fill`] supplies the values. Kinds 8 and 9 were added for
//! this; journals written before them replay unchanged.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use dumpfmt::json::{self, Map, Value};

use crate::error::{Error, Result};
#[cfg(target_os = "linux")]
use crate::journal_spare;

/// First bytes of every journal file this build writes (`NPJRNL` + major version).
pub const MAGIC: &[u8; 8] = b"NPJRNL02";
/// The magic's first six bytes, before the major version digits.
const MAGIC_STEM: &[u8; 6] = b"NPJRNL";
/// The format version this build writes; it reads every major up to [`MAJOR`].
pub const MAJOR: u32 = 2;
pub const MINOR: u32 = 0;
/// File name of the journal inside a rank directory.
pub const FILE_NAME: &str = "numprobe_journal.bin";
/// Frames above this size are treated as corrupt (a torn length field).
const MAX_FRAME: u32 = 1 << 30;

/// Top-level keys of dump.json other than `data`.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    pub task: String,
    pub level: String,
    pub framework: String,
    pub dump_data_dir: Option<String>,
    /// Whether stack.json and construct.json are written (msprobe's `extra_info`).
    pub extra_info: bool,
}

/// One journal record.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// dump.json's top-level keys; the last one wins.
    Meta(Meta),
    /// Insert `body`'s keys into entry `name` (created at the end of `data` if new). With
    /// `reinsert`, the entry is moved to the end of `data` (msprobe does this for module
    /// entries when their forward output arrives, spec §2.5.6).
    Entry {
        name: String,
        body: Map,
        reinsert: bool,
    },
    /// Drop an entry (msprobe drops empty `parameters_grad` entries, for instance).
    Remove { name: String },
    /// The call stack of an entry.
    Stack { name: String, frames: Vec<String> },
    /// The call stack of an entry, by the index of an earlier stack group (groups are
    /// numbered by the first appearance of each distinct frame list in this journal).
    StackRef { name: String, group: usize },
    /// A construct.json node.
    Construct {
        name: String,
        parent: Option<String>,
    },
    /// The JSON files were written from the records so far (informative).
    Checkpoint,
    /// [`Record::Entry`] whose body holds tensor records with statistics still to come
    /// (device tensors, read back once per step): each such record carries the transient key
    /// [`PENDING_KEY`](crate::state::PENDING_KEY) with one of `pending`'s ids and `null`
    /// statistics until a [`Record::Fill`] names the id.
    PendingEntry {
        name: String,
        body: Map,
        reinsert: bool,
        pending: Vec<u64>,
    },
    /// Statistics of earlier pending tensor records, by id.
    Fill(Vec<Fill>),
}

/// The statistics of one pending tensor record.
#[derive(Clone, Debug, PartialEq)]
pub struct Fill {
    pub id: u64,
    /// `Max`, `Min`, `Mean`, `Norm`: JSON scalars (null, bool, int or float), as msprobe writes
    /// them for the tensor's dtype.
    pub stats: [Value; 4],
}

const K_META: u8 = 1;
const K_ENTRY: u8 = 2;
const K_REMOVE: u8 = 3;
const K_STACK: u8 = 4;
const K_CONSTRUCT: u8 = 5;
const K_CHECKPOINT: u8 = 6;
const K_STACK_REF: u8 = 7;
const K_PENDING_ENTRY: u8 = 8;
const K_FILL: u8 = 9;
/// The version frame, first after the magic from major 2 on (not a [`Record`]).
const K_VERSION: u8 = 10;
/// Kind bytes a resynchronising scan accepts as a frame start: every kind up to here, so a
/// newer minor version's kinds are counted rather than skipped as damage.
const MAX_PLAUSIBLE_KIND: u8 = 63;

/// A statistic value a fill may carry.
fn is_stat_scalar(v: &Value) -> bool {
    matches!(
        v,
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::BigInt(_) | Value::Float(_)
    )
}

fn opt_str(v: &Option<String>) -> Value {
    match v {
        Some(s) => Value::from(s.as_str()),
        None => Value::Null,
    }
}

impl Record {
    /// The frame payload: kind byte + JSON text.
    pub fn encode(&self) -> Vec<u8> {
        self.clone().encode_lent()
    }

    /// [`encode`](Record::encode) without copying an entry's body: the body is lent to the
    /// JSON value being written and given back (every recorded API journals two bodies, and
    /// the copy cost more than the text).
    pub fn encode_lent(&mut self) -> Vec<u8> {
        let (kind, mut v) = match self {
            Record::Meta(m) => (
                K_META,
                Value::Object(
                    Map::new()
                        .with("task", m.task.as_str())
                        .with("level", m.level.as_str())
                        .with("framework", m.framework.as_str())
                        .with("dump_data_dir", opt_str(&m.dump_data_dir))
                        .with("extra_info", m.extra_info),
                ),
            ),
            Record::Entry {
                name,
                body,
                reinsert,
            } => (
                K_ENTRY,
                Value::Array(vec![
                    name.as_str().into(),
                    Value::Object(std::mem::take(body)),
                    Value::Bool(*reinsert),
                ]),
            ),
            Record::Remove { name } => (K_REMOVE, name.as_str().into()),
            // The capture path writes these two without a JSON value: one form for both.
            Record::Stack { name, frames } => {
                return stack_payload_with(name, frames.iter(), |l, o| {
                    json::write_python_text(l, o)
                });
            }
            Record::StackRef { name, group } => return stack_ref_payload(name, *group),
            Record::Construct { name, parent } => (
                K_CONSTRUCT,
                Value::Array(vec![name.as_str().into(), opt_str(parent)]),
            ),
            Record::Checkpoint => (K_CHECKPOINT, Value::Null),
            Record::PendingEntry {
                name,
                body,
                reinsert,
                pending,
            } => (
                K_PENDING_ENTRY,
                Value::Array(vec![
                    name.as_str().into(),
                    Value::Object(std::mem::take(body)),
                    Value::Bool(*reinsert),
                    Value::Array(pending.iter().map(|&id| Value::Int(id as i64)).collect()),
                ]),
            ),
            Record::Fill(fills) => (
                K_FILL,
                Value::Array(
                    fills
                        .iter()
                        .map(|f| {
                            let mut row = Vec::with_capacity(5);
                            row.push(Value::Int(f.id as i64));
                            row.extend(f.stats.iter().cloned());
                            Value::Array(row)
                        })
                        .collect(),
                ),
            ),
        };
        let mut out = vec![kind];
        json::write_python(&v, &mut out);
        if let Record::Entry { body, .. } | Record::PendingEntry { body, .. } = self
            && let Value::Array(a) = &mut v
            && let Some(Value::Object(m)) = a.get_mut(1)
        {
            *body = std::mem::take(m);
        }
        out
    }

    /// Parses a payload; `None` when it is not a well-formed record.
    pub fn decode(payload: &[u8]) -> Option<Record> {
        let (&kind, text) = payload.split_first()?;
        let v = json::parse(text, Path::new("<journal>")).ok()?;
        let s = |v: &Value| v.as_str().map(str::to_owned);
        let opt = |v: &Value| match v {
            Value::Null => Some(None),
            other => other.as_str().map(|x| Some(x.to_owned())),
        };
        Some(match kind {
            K_META => Record::Meta(Meta {
                task: s(v.get("task")?)?,
                level: s(v.get("level")?)?,
                framework: s(v.get("framework")?)?,
                dump_data_dir: opt(v.get("dump_data_dir")?)?,
                extra_info: v.get("extra_info")?.as_bool()?,
            }),
            K_ENTRY => {
                let a = v.as_array()?;
                let [name, body, reinsert] = a else {
                    return None;
                };
                Record::Entry {
                    name: s(name)?,
                    body: body.as_object()?.clone(),
                    reinsert: reinsert.as_bool()?,
                }
            }
            K_REMOVE => Record::Remove { name: s(&v)? },
            K_STACK => {
                let [name, frames] = v.as_array()? else {
                    return None;
                };
                Record::Stack {
                    name: s(name)?,
                    frames: frames.as_array()?.iter().map(s).collect::<Option<_>>()?,
                }
            }
            K_STACK_REF => {
                let [name, group] = v.as_array()? else {
                    return None;
                };
                Record::StackRef {
                    name: s(name)?,
                    group: usize::try_from(group.as_i64()?).ok()?,
                }
            }
            K_CONSTRUCT => {
                let [name, parent] = v.as_array()? else {
                    return None;
                };
                Record::Construct {
                    name: s(name)?,
                    parent: opt(parent)?,
                }
            }
            K_CHECKPOINT => Record::Checkpoint,
            K_PENDING_ENTRY => {
                let [name, body, reinsert, pending] = v.as_array()? else {
                    return None;
                };
                Record::PendingEntry {
                    name: s(name)?,
                    body: body.as_object()?.clone(),
                    reinsert: reinsert.as_bool()?,
                    pending: pending
                        .as_array()?
                        .iter()
                        .map(|id| u64::try_from(id.as_i64()?).ok())
                        .collect::<Option<_>>()?,
                }
            }
            K_FILL => Record::Fill(
                v.as_array()?
                    .iter()
                    .map(|row| {
                        let [id, max, min, mean, norm] = row.as_array()? else {
                            return None;
                        };
                        let stats = [max.clone(), min.clone(), mean.clone(), norm.clone()];
                        if !stats.iter().all(is_stat_scalar) {
                            return None;
                        }
                        Some(Fill {
                            id: u64::try_from(id.as_i64()?).ok()?,
                            stats,
                        })
                    })
                    .collect::<Option<_>>()?,
            ),
            _ => return None,
        })
    }
}

/// The payload of a [`Record::Stack`] of frames rendered already: the record
/// [`Record::encode`] gives, with each frame's text spliced in.
pub fn stack_payload(name: &str, frames: &crate::frames::Frames) -> Vec<u8> {
    stack_payload_with(name, frames.quoted(), |q, o| o.extend_from_slice(q))
}

/// A [`Record::Stack`] payload, each line written by `write`.
fn stack_payload_with<T>(
    name: &str,
    lines: impl Iterator<Item = T>,
    write: impl Fn(T, &mut Vec<u8>),
) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    out.push(K_STACK);
    out.push(b'[');
    json::write_python_text(name, &mut out);
    out.extend_from_slice(b",[");
    for (n, line) in lines.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        write(line, &mut out);
    }
    out.extend_from_slice(b"]]");
    out
}

/// The payload of a [`Record::StackRef`], written directly (one per recorded API with a
/// stack: no JSON value built for it).
pub fn stack_ref_payload(name: &str, group: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 32);
    write_stack_ref_payload(name, group, &mut out);
    out
}

/// [`stack_ref_payload`] appended to `out`.
pub fn write_stack_ref_payload(name: &str, group: usize, out: &mut Vec<u8>) {
    out.push(K_STACK_REF);
    out.push(b'[');
    json::write_python_text(name, out);
    out.push(b',');
    out.extend_from_slice(group.to_string().as_bytes());
    out.push(b']');
}

/// The payload of a [`Record::Entry`] whose body values are rendered already (`body`: each key
/// with its value's text, see [`crate::state::RenderedBody`]): the same record as
/// [`Record::encode`] gives, with the values' text spliced in rather than encoded again.
pub fn entry_payload<'a>(
    name: &str,
    body: impl IntoIterator<Item = (&'a json::Str, &'a [u8])>,
    reinsert: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    write_entry_payload(name, body, reinsert, &mut out);
    out
}

/// [`entry_payload`] appended to `out`.
pub fn write_entry_payload<'a>(
    name: &str,
    body: impl IntoIterator<Item = (&'a json::Str, &'a [u8])>,
    reinsert: bool,
    out: &mut Vec<u8>,
) {
    out.push(K_ENTRY);
    out.push(b'[');
    json::write_python_text(name, out);
    out.extend_from_slice(b",{");
    for (n, (k, t)) in body.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        json::write_python_str(k, out);
        out.push(b':');
        out.extend_from_slice(t);
    }
    out.extend_from_slice(if reinsert { b"},true]" } else { b"},false]" });
}

/// Appends frames to a journal file.
///
/// On Linux the file is written through a shared memory map of space reserved ahead
/// (`fallocate`), so appending a frame is a copy into the page cache with no system call: a
/// `write` per record cost more than the rest of journaling on ext4 (measured in
/// benches/RESULTS.md), and the page cache is what makes a frame survive a SIGKILL either way.
/// Where the space cannot be reserved (a filesystem without `fallocate`, or other systems)
/// each frame goes out with one `write` call instead. The reserved tail is cut off when the
/// writer is dropped; a killed process leaves it as zeros, which readers skip.
pub struct JournalWriter {
    file: File,
    path: PathBuf,
    frame: Vec<u8>,
    mapped: Option<MappedTail>,
    /// Bytes of magic and frames in the file (its length once the reserved tail is cut).
    written: u64,
}

/// The journal's memory map: `len` bytes of frames written, `map.len()` bytes reserved.
struct MappedTail {
    map: memmap2::MmapMut,
    len: usize,
}

/// The first reservation, and the most one growth adds (it doubles in between).
const RESERVE_FIRST: usize = 256 << 10;
const RESERVE_STEP_MAX: usize = 64 << 20;

impl MappedTail {
    /// Reserves `cap` bytes of `file` (empty) on disk and maps them; `None` where the space
    /// cannot be reserved, so that a full disk is an error of `write`, never a SIGBUS of a
    /// store into the map.
    #[cfg(target_os = "linux")]
    fn create(file: &File, cap: usize) -> Option<MappedTail> {
        match Self::reserve_and_map(file, 0, cap) {
            Some(map) => Some(MappedTail { map, len: 0 }),
            None => {
                // Reserved but not mapped: give the space back (`write` starts at 0).
                let _ = file.set_len(0);
                None
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn create(_file: &File, _cap: usize) -> Option<MappedTail> {
        None
    }

    #[cfg(target_os = "linux")]
    fn reserve_and_map(file: &File, from: usize, to: usize) -> Option<memmap2::MmapMut> {
        use std::os::fd::AsRawFd;
        let (off, len) = (i64::try_from(from).ok()?, i64::try_from(to - from).ok()?);
        // SAFETY: plain system call on an open descriptor; mode 0 allocates blocks and
        // extends the size, it never emulates by writing zeros (posix_fallocate would).
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, off, len) } != 0 {
            return None;
        }
        // SAFETY: the map covers blocks reserved above of a file this writer created and
        // holds locked; only this writer stores into it. (Another process truncating the
        // file under a running capture would make a store fault; nothing of numprobe does.)
        unsafe { memmap2::MmapOptions::new().len(to).map_mut(file) }.ok()
    }

    /// Appends `bytes`, growing the reservation when needed; `false` when it cannot grow
    /// (the caller then writes with `write` from here on).
    fn append(&mut self, file: &File, bytes: &[u8]) -> bool {
        let end = self.len + bytes.len();
        if end > self.map.len() {
            let cap = self.map.len();
            let grown = end.max(cap + cap.clamp(RESERVE_FIRST, RESERVE_STEP_MAX));
            #[cfg(target_os = "linux")]
            let remapped = Self::reserve_and_map(file, cap, grown);
            #[cfg(not(target_os = "linux"))]
            let remapped: Option<memmap2::MmapMut> = {
                let _ = (file, grown);
                None
            };
            match remapped {
                Some(map) => self.map = map,
                None => return false,
            }
        }
        self.map[self.len..end].copy_from_slice(bytes);
        self.len = end;
        true
    }
}

impl JournalWriter {
    /// Creates (truncates) the journal at `path` and writes the magic. The journal stays
    /// locked (an exclusive advisory lock, dropped with the writer or by the system when the
    /// process dies) so that a second capture into the same rank directory is refused
    /// ([`Error::Busy`]) instead of truncating this one's journal and interleaving its files.
    pub fn create(path: &Path) -> Result<JournalWriter> {
        Self::create_as(path, true)
    }

    /// [`create`](JournalWriter::create); `map` false writes with `write` calls only (what
    /// systems without the map get; tests run both).
    fn create_as(path: &Path, map: bool) -> Result<JournalWriter> {
        #[cfg(target_os = "linux")]
        if map && let Some(w) = Self::create_linked(path) {
            return w.start();
        }
        // Not truncated on open: another capture's journal is only emptied once its lock is ours.
        // Read access too: a shared writable map needs it.
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Busy {
                    dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(path, e)),
        }
        file.set_len(0).map_err(|e| Error::io(path, e))?;
        let mapped = if map {
            MappedTail::create(&file, RESERVE_FIRST)
        } else {
            None
        };
        JournalWriter {
            file,
            path: path.to_path_buf(),
            frame: Vec::with_capacity(4096),
            mapped,
            written: 0,
        }
        .start()
    }

    /// A journal prepared by the durability worker, linked under `path` (see
    /// [`crate::journal_spare`]); `None` when none is ready or the name is taken (another
    /// capture's journal, or a killed one's: the named path deals with both).
    #[cfg(target_os = "linux")]
    fn create_linked(path: &Path) -> Option<JournalWriter> {
        let spare = journal_spare::take(path)?;
        Some(JournalWriter {
            file: spare.file,
            path: path.to_path_buf(),
            frame: Vec::with_capacity(4096),
            mapped: Some(MappedTail {
                map: spare.map,
                len: 0,
            }),
            written: 0,
        })
    }

    /// Prepares the file of a later journal in `dir`'s filesystem, an eighth larger than `used`
    /// bytes (what the last one wrote), off the recording thread (see [`crate::journal_spare`]).
    #[cfg(target_os = "linux")]
    pub(crate) fn prepare_next(dir: &Path, used: u64) {
        let used = usize::try_from(used).unwrap_or(usize::MAX);
        journal_spare::prepare(dir, RESERVE_FIRST, used, |file, cap| {
            MappedTail::reserve_and_map(file, 0, cap)
        });
    }

    /// Writes the magic and the version frame into the empty journal.
    fn start(mut self) -> Result<JournalWriter> {
        self.frame.clear();
        self.frame.extend_from_slice(MAGIC);
        self.flush_frames()?;
        let mut version = vec![K_VERSION];
        json::write_python(
            &Value::Object(
                Map::new()
                    .with("major", Value::Int(MAJOR.into()))
                    .with("minor", Value::Int(MINOR.into()))
                    .with("writer", concat!("numprobe ", env!("CARGO_PKG_VERSION"))),
            ),
            &mut version,
        );
        self.append_payload(&version)?;
        Ok(self)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record with a single `write` call.
    pub fn append(&mut self, rec: &Record) -> Result<()> {
        let payload = rec.encode();
        self.append_payload(&payload)
    }

    /// [`append`](JournalWriter::append) through [`Record::encode_lent`] (no copy of an
    /// entry's body; `rec` is unchanged afterwards).
    pub fn append_lent(&mut self, rec: &mut Record) -> Result<()> {
        let payload = rec.encode_lent();
        self.append_payload(&payload)
    }

    /// [`append_lent`](JournalWriter::append_lent) of several records with one `write` call
    /// (frames as if appended one by one: a reader cannot tell the difference).
    pub fn append_lent_all(&mut self, recs: &mut [Record]) -> Result<()> {
        self.frame.clear();
        for rec in recs.iter_mut() {
            let payload = rec.encode_lent();
            self.push_frame(&payload)?;
        }
        self.flush_frames()
    }

    /// Appends a pre-encoded payload (see [`Record::encode`]).
    pub fn append_payload(&mut self, payload: &[u8]) -> Result<()> {
        self.frame.clear();
        self.push_frame(payload)?;
        self.flush_frames()
    }

    /// Adds the frame of `payload` to the pending write buffer.
    fn push_frame(&mut self, payload: &[u8]) -> Result<()> {
        self.push_frame_with(|out| out.extend_from_slice(payload))
    }

    /// Adds a frame whose payload `write` appends to the pending write buffer, in place (no
    /// copy of the payload made first).
    fn push_frame_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Result<()> {
        let head = self.frame.len();
        self.frame.extend_from_slice(&[0; 8]);
        write(&mut self.frame);
        let payload = &self.frame[head + 8..];
        let Some(len) = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= MAX_FRAME)
        else {
            let n = payload.len();
            self.frame.truncate(head);
            return Err(Error::Journal {
                path: self.path.clone(),
                offset: 0,
                msg: format!("record of {n} bytes is too large"),
            });
        };
        let crc = crc32fast::hash(payload);
        self.frame[head..head + 4].copy_from_slice(&len.to_le_bytes());
        self.frame[head + 4..head + 8].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Appends the record of an entry whose body values are rendered already (see
    /// [`entry_payload`]), with its stack reference to group `stack_group` in the same write
    /// (see [`stack_ref_payload`]): the payloads are written straight into the frames.
    pub fn append_entry<'a>(
        &mut self,
        name: &str,
        body: impl IntoIterator<Item = (&'a json::Str, &'a [u8])>,
        reinsert: bool,
        stack_group: Option<usize>,
    ) -> Result<()> {
        self.frame.clear();
        self.push_frame_with(|out| write_entry_payload(name, body, reinsert, out))?;
        if let Some(g) = stack_group {
            self.push_frame_with(|out| write_stack_ref_payload(name, g, out))?;
        }
        self.flush_frames()
    }

    fn flush_frames(&mut self) -> Result<()> {
        if let Some(m) = &mut self.mapped {
            if m.append(&self.file, &self.frame) {
                self.written += self.frame.len() as u64;
                return Ok(());
            }
            // The reservation could not grow: cut the file to its frames and go on with
            // `write` calls.
            let len = m.len as u64;
            self.mapped = None;
            self.file
                .set_len(len)
                .map_err(|e| Error::io(&self.path, e))?;
            self.file
                .seek(SeekFrom::Start(len))
                .map_err(|e| Error::io(&self.path, e))?;
        }
        self.file
            .write_all(&self.frame)
            .map_err(|e| Error::io(&self.path, e))?;
        self.written += self.frame.len() as u64;
        Ok(())
    }

    /// Bytes of the journal written so far (magic and frames, the reserved space not
    /// counted).
    pub fn len(&self) -> u64 {
        self.written
    }

    /// Whether nothing, not even the magic, has been written (never, once created).
    pub fn is_empty(&self) -> bool {
        self.written == 0
    }

    /// fsync: survives a power cut too (called at step ends, not per record).
    pub fn sync(&mut self) -> Result<()> {
        // Pages stored through the shared map are the file's dirty page cache: fsync writes
        // them like written ones (no separate msync).
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))
    }

    /// Closes the journal and removes its file (a clean end: its facts are in the JSON
    /// files). A journal already gone is not an error.
    pub fn remove(mut self) -> Result<()> {
        // Unlinked whole (no point cutting the reserved tail first), and while the lock is
        // still held: another capture that takes the lock afterwards makes a new file, which
        // this removal cannot reach.
        self.mapped = None;
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }
}

impl Drop for JournalWriter {
    /// Cuts the reserved tail off a journal that stays (kept on purpose, or a failed step),
    /// so it ends with its last frame as a `write`-only journal would.
    fn drop(&mut self) {
        if let Some(m) = self.mapped.take() {
            let len = m.len as u64;
            drop(m);
            // Best effort: a journal whose tail stays reserved still reads the same.
            let _ = self.file.set_len(len);
        }
    }
}

/// What [`read`] found in a journal.
#[derive(Debug, Default)]
pub struct Replay {
    pub records: Vec<Record>,
    /// Bytes after the last intact frame (a torn or corrupt tail: what a killed write
    /// leaves), 0 for a clean file.
    pub ignored_tail: u64,
    /// Damaged stretches before intact frames (corruption in the middle): each is at least
    /// one frame that could not be read.
    pub damaged_frames: usize,
    /// Bytes of those stretches.
    pub damaged_bytes: u64,
    /// Intact frames of a known kind whose payload is not a well-formed record.
    pub malformed_records: usize,
    /// Intact frames of kinds this build does not know, by kind byte (written by a newer
    /// numprobe, or damage the CRC did not catch).
    pub unknown_kinds: BTreeMap<u8, usize>,
    /// `(major, minor)` of the version frame; `None` for a journal without one (major 1).
    pub version: Option<(u32, u32)>,
}

impl Replay {
    /// Frames whose records are missing from [`records`](Replay::records), the torn tail
    /// not included.
    pub fn unread_frames(&self) -> usize {
        self.damaged_frames + self.malformed_records + self.unknown_kinds.values().sum::<usize>()
    }
}

/// Reads every intact record; skips damaged frames (see the module documentation).
pub fn read(path: &Path) -> Result<Replay> {
    // A journal found in a dump from elsewhere may be a FIFO or a device: refused, not read.
    read_from(dumpfmt::fsio::open_regular(path)?, path)
}

/// [`read`] of a journal found in a dump directory rather than named by the user: not read
/// through a link out of its directory ([`dumpfmt::fsio::open_found`]).
pub fn read_found(path: &Path) -> Result<Replay> {
    read_from(dumpfmt::fsio::open_found(path)?, path)
}

fn read_from(mut file: std::fs::File, path: &Path) -> Result<Replay> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    parse(&bytes, path)
}

/// The payload of an intact frame at `at`, if there is one (length in range, CRC right).
fn frame_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let header = bytes.get(at..at.checked_add(8)?)?;
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    // Our payloads are a kind byte and JSON text: never shorter than 2 bytes (this also keeps
    // a zero-filled stretch, CRC 0 of nothing, from reading as frames).
    if !(2..=MAX_FRAME).contains(&len) {
        return None;
    }
    let payload = bytes.get(at + 8..(at + 8).checked_add(len as usize)?)?;
    (crc32fast::hash(payload) == crc).then_some(payload)
}

/// Where the next intact frame after damage at `at` starts, if any. `budget` bounds the bytes
/// hashed while scanning, so a hostile file cannot make this quadratic.
fn resync(bytes: &[u8], at: usize, budget: &mut u64) -> Option<usize> {
    // A damaged payload under an intact length field: the next frame is where it says.
    if bytes.len() - at >= 8 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let next = at + 8 + len;
        if len <= MAX_FRAME as usize && next + 8 <= bytes.len() {
            let next_len =
                u32::from_le_bytes(bytes[next..next + 4].try_into().expect("4 bytes")) as u64;
            if next_len <= *budget {
                *budget -= next_len;
                if frame_at(bytes, next).is_some() {
                    return Some(next);
                }
            }
        }
    }
    let mut s = at + 1;
    while s + 10 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[s..s + 4].try_into().expect("4 bytes")) as usize;
        let kind = bytes[s + 8];
        if (2..=bytes.len() - s - 8).contains(&len) && (1..=MAX_PLAUSIBLE_KIND).contains(&kind) {
            if *budget < len as u64 {
                return None;
            }
            *budget -= len as u64;
            if frame_at(bytes, s).is_some() {
                return Some(s);
            }
        }
        s += 1;
    }
    None
}

/// The major version a magic names (`NPJRNL` + two digits).
fn magic_major(bytes: &[u8]) -> Option<u32> {
    let digits = bytes.get(..8)?.strip_prefix(MAGIC_STEM)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(u32::from(digits[0] - b'0') * 10 + u32::from(digits[1] - b'0'))
}

/// [`read`] on bytes already in memory.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Replay> {
    let err = |offset: u64, msg: String| Error::Journal {
        path: path.to_path_buf(),
        offset,
        msg,
    };
    if bytes.len() < MAGIC.len() && MAGIC_STEM.starts_with(&bytes[..bytes.len().min(6)]) {
        // A journal killed before its magic reached the disk holds nothing.
        return Ok(Replay {
            ignored_tail: bytes.len() as u64,
            ..Replay::default()
        });
    }
    let major =
        magic_major(bytes).ok_or_else(|| err(0, "not a numprobe journal (bad magic)".into()))?;
    let too_new = |major: u32, minor: u32| {
        err(
            0,
            format!(
                "journal format {major}.{minor} is newer than this numprobe reads (up to {MAJOR}.x); \
                 recover it with the numprobe that wrote it or a newer one"
            ),
        )
    };
    if major == 0 || major > MAJOR {
        return Err(too_new(major, 0));
    }
    // Space reserved ahead of the frames reads as zeros (a journal still being written, or
    // left by a killed process): the file ends where they start. No frame ends in a zero
    // byte (its payload is JSON text), so nothing written is cut.
    let written = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let bytes = &bytes[..written.max(MAGIC.len())];
    let mut rp = Replay::default();
    let mut at = MAGIC.len();
    // Scanning past damage hashes candidate frames: at most this many bytes in all.
    let mut budget = 32 * bytes.len() as u64 + (1 << 20);
    let mut first = true;
    while at < bytes.len() {
        let Some(payload) = frame_at(bytes, at) else {
            match resync(bytes, at, &mut budget) {
                Some(next) => {
                    rp.damaged_frames += 1;
                    rp.damaged_bytes += (next - at) as u64;
                    at = next;
                    first = false;
                    continue;
                }
                None => {
                    rp.ignored_tail = (bytes.len() - at) as u64;
                    break;
                }
            }
        };
        let kind = payload[0];
        if kind == K_VERSION {
            let v = json::parse(&payload[1..], path).ok();
            let num = |k: &str| {
                v.as_ref()
                    .and_then(|v| v.get(k))
                    .and_then(Value::as_i64)
                    .and_then(|x| u32::try_from(x).ok())
            };
            match (num("major"), num("minor")) {
                (Some(ma), Some(mi)) if first => {
                    if ma > MAJOR {
                        return Err(too_new(ma, mi));
                    }
                    rp.version = Some((ma, mi));
                }
                _ => rp.malformed_records += 1,
            }
        } else if kind == 0 || kind > K_FILL {
            *rp.unknown_kinds.entry(kind).or_default() += 1;
        } else {
            match Record::decode(payload) {
                Some(rec) => rp.records.push(rec),
                None => rp.malformed_records += 1,
            }
        }
        first = false;
        at += 8 + payload.len();
    }
    Ok(rp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(n: usize, size: usize) -> Vec<Record> {
        (0..n)
            .map(|i| Record::Construct {
                name: format!("Module.m{i}.{}", "y".repeat(size)),
                parent: (i % 3 == 0).then(|| format!("Module.p{i}")),
            })
            .collect()
    }

    /// The same frames, byte for byte, through the map and through `write` calls, so a
    /// journal reads the same wherever it was written.
    #[test]
    fn mapped_and_written_journals_are_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(400, 3000);
        let mut files = Vec::new();
        for map in [true, false] {
            let path = dir.path().join(format!("j{map}"));
            let mut w = JournalWriter::create_as(&path, map).unwrap();
            assert_eq!(w.mapped.is_some(), map && cfg!(target_os = "linux"));
            for r in &recs {
                w.append(r).unwrap();
            }
            w.sync().unwrap();
            let written = w.len();
            drop(w);
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len() as u64, written);
            assert_eq!(parse(&bytes, &path).unwrap().records, recs);
            files.push(bytes);
        }
        assert_eq!(files[0], files[1]);
    }
}
