//! The append-only journal: every fact of a dump (meta, entry data, stacks, construct parents)
//! is appended as one framed record the moment it is known, so a process killed at any point
//! leaves a file from which every completed record can be replayed.
//!
//! File layout: the 8-byte magic [`MAGIC`], then frames `[u32 LE payload length][u32 LE CRC-32
//! of payload][payload]`. A payload is one kind byte followed by the record's JSON text
//! (dumpfmt's writer, so floats round-trip exactly). Each frame goes to the OS with a single
//! `write` call: a SIGKILL cannot lose it, only a power cut can (hence [`JournalWriter::sync`]
//! at step ends). A torn or corrupt tail frame is where reading stops.
//!
//! Statistics computed on a device are read back once per step, after their entries were
//! journaled: such entries are [`Record::PendingEntry`] records whose tensor records carry a
//! pending id, and a later [`Record::Fill`] supplies the values. Kinds 8 and 9 were added for
//! this; journals written before them replay unchanged.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use dumpfmt::json::{self, Map, Value};

use crate::error::{Error, Result};

/// First bytes of every journal file.
pub const MAGIC: &[u8; 8] = b"NPJRNL01";
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
        let (kind, v) = match self {
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
                    Value::Object(body.clone()),
                    Value::Bool(*reinsert),
                ]),
            ),
            Record::Remove { name } => (K_REMOVE, name.as_str().into()),
            Record::Stack { name, frames } => (
                K_STACK,
                Value::Array(vec![
                    name.as_str().into(),
                    Value::Array(frames.iter().map(|f| Value::from(f.as_str())).collect()),
                ]),
            ),
            Record::StackRef { name, group } => (
                K_STACK_REF,
                Value::Array(vec![name.as_str().into(), Value::Int(*group as i64)]),
            ),
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
                    Value::Object(body.clone()),
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

/// Appends frames to a journal file.
pub struct JournalWriter {
    file: File,
    path: PathBuf,
    frame: Vec<u8>,
}

impl JournalWriter {
    /// Creates (truncates) the journal at `path` and writes the magic.
    pub fn create(path: &Path) -> Result<JournalWriter> {
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        file.write_all(MAGIC).map_err(|e| Error::io(path, e))?;
        Ok(JournalWriter {
            file,
            path: path.to_path_buf(),
            frame: Vec::with_capacity(4096),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record with a single `write` call.
    pub fn append(&mut self, rec: &Record) -> Result<()> {
        let payload = rec.encode();
        self.append_payload(&payload)
    }

    /// Appends a pre-encoded payload (see [`Record::encode`]).
    pub fn append_payload(&mut self, payload: &[u8]) -> Result<()> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= MAX_FRAME)
            .ok_or_else(|| Error::Journal {
                path: self.path.clone(),
                offset: 0,
                msg: format!("record of {} bytes is too large", payload.len()),
            })?;
        self.frame.clear();
        self.frame.extend_from_slice(&len.to_le_bytes());
        self.frame
            .extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        self.frame.extend_from_slice(payload);
        self.file
            .write_all(&self.frame)
            .map_err(|e| Error::io(&self.path, e))
    }

    /// fsync: survives a power cut too (called at step ends, not per record).
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))
    }
}

/// What [`read`] found in a journal.
#[derive(Debug)]
pub struct Replay {
    pub records: Vec<Record>,
    /// Bytes after the last good frame (a torn or corrupt tail), 0 for a clean file.
    pub ignored_tail: u64,
}

/// Reads every complete, intact record; stops at the first torn or corrupt frame.
pub fn read(path: &Path) -> Result<Replay> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| Error::io(path, e))?;
    parse(&bytes, path)
}

/// [`read`] on bytes already in memory.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Replay> {
    if bytes.len() < MAGIC.len() {
        // A journal killed before its magic reached the disk holds nothing.
        if MAGIC.starts_with(bytes) {
            return Ok(Replay {
                records: Vec::new(),
                ignored_tail: bytes.len() as u64,
            });
        }
    }
    if !bytes.starts_with(MAGIC) {
        return Err(Error::Journal {
            path: path.to_path_buf(),
            offset: 0,
            msg: "not a numprobe journal (bad magic)".into(),
        });
    }
    let mut at = MAGIC.len();
    let mut records = Vec::new();
    while bytes.len() - at >= 8 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        if len > MAX_FRAME || bytes.len() - at - 8 < len as usize {
            break;
        }
        let payload = &bytes[at + 8..at + 8 + len as usize];
        if crc32fast::hash(payload) != crc {
            break;
        }
        let Some(rec) = Record::decode(payload) else {
            break;
        };
        records.push(rec);
        at += 8 + len as usize;
    }
    Ok(Replay {
        records,
        ignored_tail: (bytes.len() - at) as u64,
    })
}
