//! A dump directory opened for reading, from the top: [`Dump`] (a dump root, split root, step or
//! rank directory) → [`Rank`] (one rank directory with its parsed `dump.json` / `debug.json`) →
//! [`TensorEntry`] (one tensor record: entry name, input/output, dtype, shape, statistics) →
//! [`Tensor`] (the record's file, memory-mapped when large) → `ndarray` view.
//!
//! ```no_run
//! # fn main() -> dumpfmt::Result<()> {
//! let dump = dumpfmt::Dump::open("dump")?;
//! for rank in dump.ranks() {
//!     let rank = rank?;
//!     for t in rank.tensors().filter(|t| t.data_name().is_some()) {
//!         let tensor = t.load_tensor()?;
//!         if let Ok(a) = tensor.array::<f32>() {
//!             println!("{:?} {} {:?}: {}", rank.step(), t.name(), t.category(), a.sum());
//!         }
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! This wraps what the lower modules model: the walk is [`crate::layout::discover`], the files
//! are [`DumpFile`]s, the records [`TensorRecord`]s, and every `data_name` is resolved with
//! [`crate::layout::resolve_data_name`] inside the rank's `dump_tensor_data/` only.

use std::path::{Path, PathBuf};

use crate::dump::{DumpFile, Entry, TensorAt, TensorRecord};
use crate::error::{Error, Result};
use crate::layout::{self, Layout, RankDir, RankId};
use crate::names::{Category, Direction, EntryName};
use crate::tensor::Tensor;

/// A dump directory: every rank directory under it, sorted by split root, step and rank.
/// Opening one reads directory listings only; [`Dump::ranks`] parses each rank's JSON files.
#[derive(Clone, Debug)]
pub struct Dump {
    root: PathBuf,
    ranks: Vec<RankDir>,
}

impl Dump {
    /// Opens a dump root (`step{N}/` dirs inside), a MindSpore split root (`graph/`,
    /// `pynative/`), a step directory or a rank directory. A single file is refused
    /// ([`Error::Layout`]): read it with [`DumpFile::open`] or [`crate::tensor::read_tensor`].
    /// A step, rank or split directory below `path` that links out of it is
    /// [`Error::DirOutsideDump`] ([`crate::fsio::check_found_dir`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Dump> {
        let path = path.as_ref();
        match layout::discover(path)? {
            Layout::Tree {
                root,
                ranks,
                links_out,
            } => match links_out.first() {
                Some(link) => Err(link.to_error()),
                None => Ok(Dump { root, ranks }),
            },
            Layout::File(_) => Err(Error::Layout {
                dir: path.to_path_buf(),
                msg: "a file, not a dump directory (read it with DumpFile::open or \
                      tensor::read_tensor)"
                    .into(),
            }),
        }
    }

    /// The directory [`Dump::open`] was given.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The rank directories and the files found in them, without reading any.
    pub fn rank_dirs(&self) -> &[RankDir] {
        &self.ranks
    }

    /// The distinct step numbers, ascending (empty when the walk started at a rank directory
    /// whose parent is no `step{N}`).
    pub fn steps(&self) -> Vec<u64> {
        let mut steps: Vec<u64> = self.ranks.iter().filter_map(|r| r.step).collect();
        steps.sort_unstable();
        steps.dedup();
        steps
    }

    /// Every rank, in [`Dump::rank_dirs`] order, each parsed when the iterator reaches it (an
    /// `Err` for a rank whose dump.json or debug.json does not parse).
    pub fn ranks(&self) -> impl Iterator<Item = Result<Rank>> + '_ {
        self.ranks.iter().map(|d| Rank::open(d.clone()))
    }
}

/// One rank directory with its `dump.json` and `debug.json` parsed and schema-checked.
#[derive(Clone, Debug)]
pub struct Rank {
    dir: RankDir,
    dump: Option<DumpFile>,
    debug: Option<DumpFile>,
}

impl Rank {
    /// Parses the rank's `dump.json` and `debug.json` (when present); the first schema problem
    /// is the error, as is either file linked out of the rank directory
    /// ([`Error::LinkOutside`], which [`RankDir::scan`] leaves out).
    pub fn open(dir: RankDir) -> Result<Rank> {
        for name in ["dump.json", "debug.json"] {
            crate::fsio::check_found_file(&dir.dir.join(name))?;
        }
        let dump = dir
            .dump_json
            .as_deref()
            .map(DumpFile::open_found)
            .transpose()?;
        let debug = dir
            .debug_json
            .as_deref()
            .map(DumpFile::open_found)
            .transpose()?;
        Ok(Rank { dir, dump, debug })
    }

    /// The directory and the files found in it.
    pub fn dir(&self) -> &RankDir {
        &self.dir
    }

    /// `N` of the enclosing `step{N}` directory.
    pub fn step(&self) -> Option<u64> {
        self.dir.step
    }

    /// The rank directory's name (`rank{R}`, `rank`, `proc{PID}`).
    pub fn rank(&self) -> Option<RankId> {
        self.dir.rank
    }

    /// `dump.json`, absent for a rank that only has debug.json (or only stack/construct).
    pub fn dump(&self) -> Option<&DumpFile> {
        self.dump.as_ref()
    }

    /// `debug.json` (msprobe's `debug_save`), when present.
    pub fn debug(&self) -> Option<&DumpFile> {
        self.debug.as_ref()
    }

    fn files(&self) -> impl Iterator<Item = &DumpFile> {
        self.dump.iter().chain(self.debug.iter())
    }

    /// Every entry of dump.json, then of debug.json, in file order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        self.files().flat_map(DumpFile::entries)
    }

    /// Every tensor record of [`Rank::entries`], in file order: inputs, keyword inputs, outputs
    /// and parameters of each entry.
    pub fn tensors(&self) -> impl Iterator<Item = TensorEntry<'_>> {
        self.files().flat_map(|file| {
            file.entries().flat_map(move |entry| {
                entry
                    .tensors()
                    .into_iter()
                    .map(move |at| TensorEntry { file, entry, at })
            })
        })
    }

    /// Reads the tensor file `data_name` of this rank's `dump_tensor_data/`
    /// ([`RankDir::tensor`]).
    pub fn tensor(&self, data_name: &str) -> Result<Tensor> {
        self.dir.tensor(data_name)
    }
}

/// One tensor record of a dump: which entry (API or module, call index, forward/backward),
/// which part of it (input, output, ...), the record (dtype, shape, statistics, `data_name`),
/// and the way to its file.
#[derive(Clone, Debug)]
pub struct TensorEntry<'a> {
    file: &'a DumpFile,
    entry: Entry<'a>,
    at: TensorAt<'a>,
}

impl<'a> TensorEntry<'a> {
    /// The entry name, e.g. `Torch.matmul.0.forward` or `Module.fc1.Linear.backward.0`.
    pub fn name(&self) -> &'a str {
        self.entry.name
    }

    /// The entry name taken apart: API prefix, name, call index and direction, or the module
    /// path and class.
    pub fn kind(&self) -> EntryName<'a> {
        self.entry.kind()
    }

    /// Forward or backward (`None` for parameters_grad and debug entries).
    pub fn direction(&self) -> Option<Direction> {
        self.kind().direction()
    }

    /// Input, keyword input, output, parameter, ... (for backward entries: `Input` holds the
    /// incoming gradients, `Output` the produced ones).
    pub fn category(&self) -> Category {
        self.at.category
    }

    /// Where in its category the tensor sits: the argument index, then list indices or dict
    /// keys of nested arguments (`["0", "1"]` for `input_args[0][1]`; the name of a parameter).
    pub fn data_path(&self) -> &[String] {
        &self.at.data_path
    }

    /// The record: dtype and shape as written, `Max`/`Min`/`Mean`/`Norm`, `md5`, `data_name`.
    pub fn record(&self) -> &TensorRecord {
        &self.at.record
    }

    /// The record's `data_name`; `None` when the dump saved statistics only.
    pub fn data_name(&self) -> Option<&str> {
        self.at.record.data_name.as_deref()
    }

    /// The JSON path of the record in its file, `$.data["…"].input_args[0]`.
    pub fn json_path(&self) -> &str {
        &self.at.json_path
    }

    /// The dump.json entry the record belongs to.
    pub fn entry(&self) -> Entry<'a> {
        self.entry
    }

    /// The dump.json or debug.json the record was read from.
    pub fn dump_file(&self) -> &'a DumpFile {
        self.file
    }

    /// The record's file in the rank's `dump_tensor_data/`, resolved there only
    /// ([`crate::layout::resolve_data_name`]).
    pub fn tensor_path(&self) -> Result<PathBuf> {
        let Some(name) = self.data_name() else {
            return Err(Error::schema(
                self.file.path(),
                self.json_path(),
                "tensor record without data_name (the dump saved statistics only)",
            ));
        };
        self.file.tensor_path(name)
    }

    /// Reads the record's file; [`Tensor::array`] gives its `ndarray` view without a copy.
    /// The file's dtype can differ from the record's: MindSpore saves bfloat16 and float8
    /// tensors as float32 `.npy`.
    pub fn load_tensor(&self) -> Result<Tensor> {
        crate::tensor::read_tensor(&self.tensor_path()?)
    }
}
