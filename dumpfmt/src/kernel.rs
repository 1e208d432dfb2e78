//! MindSpore kernel-level (L2) dumps: the tree MindSpore's own dump writes when
//! `MINDSPORE_DUMP_CONFIG` is set (graph mode, and PyNative code under `mindspore.jit`).
//!
//! ```text
//! {path}/rank_{id}/{net_name}/{graph_id}/{iteration}/{file}.npy | statistic.csv | mapping.csv
//! {path}/rank_{id}/execution_order/ms_execution_order_graph_{graph_id}.csv
//! {path}/rank_{id}/execution_order/ms_global_execution_order_graph_{graph_id}.csv
//! {path}/rank_{id}/.dump_metadata/{config.json, data_dump.json}
//! ```
//!
//! Tensor file names are
//! `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{input|output}.{slot}.{format}[.{dtype}].npy`
//! ([`KernelFileName`]); the dtype field is absent on some Ascend runs, and names over 255
//! characters are replaced there by a number that `mapping.csv` maps back. Statistics-mode dumps
//! (GPU, Ascend) write `statistic.csv` ([`read_statistic_csv`]) instead of tensor files. bfloat16
//! tensors are `.npy` files with the descr `'<E2'`, which numpy cannot load; [`crate::npy`] reads
//! them. Raw files (the same name without `.npy`: Ascend's `file_format: "bin"`, or a dtype npy
//! cannot hold) are the tensor's bytes with no header: the dtype comes from the name, the shape
//! from the `statistic.csv` row of the same tensor when the folder has one, else one dimension
//! ([`read_raw`]).
//!
//! Everything here treats the tree as untrusted: files are opened with
//! [`crate::fsio::open_regular`], links are not followed out of the tree, and every malformed
//! name or cell is an error naming the file and where.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::tensor::TensorInfo;
use crate::{DType, fsio};

/// Input or output of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Io {
    Input,
    Output,
}

impl Io {
    pub fn as_str(self) -> &'static str {
        match self {
            Io::Input => "input",
            Io::Output => "output",
        }
    }

    fn parse(s: &str) -> Option<Io> {
        match s {
            "input" => Some(Io::Input),
            "output" => Some(Io::Output),
            _ => None,
        }
    }
}

impl fmt::Display for Io {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fields of a kernel dump's tensor file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFileName {
    /// `MatMul`, `Parameter`, …
    pub op_type: String,
    /// The op's full scope with `/` written as `_`
    /// (`Default_network-WithLossCell__backbone-Net_fc-Dense_MatMul-op0`), or a parameter's name.
    pub op_name: String,
    pub task_id: u64,
    pub stream_id: u64,
    /// Microseconds; orders the occurrences of one kernel within an iteration.
    pub timestamp: u64,
    pub io: Io,
    pub slot: u32,
    /// `DefaultFormat`, `NCHW`, `FRACTAL_NZ`, …
    pub format: String,
    /// MindSpore's dtype name (`Float32`, `BFloat16`) when the name carries one.
    pub dtype_name: Option<String>,
}

impl KernelFileName {
    /// Parses a tensor file name; `None` when it does not follow the grammar above. The op name
    /// may itself hold dots, so the fixed fields are taken from both ends.
    pub fn parse(file_name: &str) -> Option<KernelFileName> {
        let stem = file_name.strip_suffix(".npy")?;
        let parts: Vec<&str> = stem.split('.').collect();
        // op_type, op_name (≥ 1 part), task, stream, timestamp, io, slot, format [, dtype]
        let with_dtype = parts.len() >= 9
            && Io::parse(parts[parts.len() - 4]).is_some()
            && is_uint(parts[parts.len() - 3]);
        // The fields from task_id to the end.
        let tail = if with_dtype { 7 } else { 6 };
        if parts.len() < 2 + tail {
            return None;
        }
        let n = parts.len();
        let (dtype_name, format) = if with_dtype {
            (Some(parts[n - 1].to_owned()), parts[n - 2])
        } else {
            (None, parts[n - 1])
        };
        let slot = parts[n - tail + 4];
        let io = Io::parse(parts[n - tail + 3])?;
        let timestamp = parts[n - tail + 2];
        let stream_id = parts[n - tail + 1];
        let task_id = parts[n - tail];
        let op_type = parts[0];
        let op_name = parts[1..n - tail].join(".");
        if op_type.is_empty() || op_name.is_empty() || format.is_empty() {
            return None;
        }
        Some(KernelFileName {
            op_type: op_type.to_owned(),
            op_name,
            task_id: task_id.parse().ok()?,
            stream_id: stream_id.parse().ok()?,
            timestamp: timestamp.parse().ok()?,
            io,
            slot: slot.parse().ok()?,
            format: format.to_owned(),
            dtype_name,
        })
    }

    /// Parses the name of a raw (headerless) tensor file: the grammar above without `.npy`, and
    /// the dtype field required and one numprobe knows (it is all that says how to read the
    /// bytes).
    pub fn parse_raw(file_name: &str) -> Option<KernelFileName> {
        if file_name.ends_with(".npy") || file_name.ends_with(".csv") {
            return None;
        }
        let n = KernelFileName::parse(&format!("{file_name}.npy"))?;
        n.dtype().is_some().then_some(n)
    }

    /// The element type the name states, when it states one numprobe knows.
    pub fn dtype(&self) -> Option<DType> {
        self.dtype_name.as_deref().and_then(ms_dtype)
    }

    /// What two dumps of one net share for one tensor: op name, task id, input/output and slot
    /// (occurrences of one key are told apart by their order in time).
    pub fn compare_key(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.op_name, self.task_id, self.io, self.slot
        )
    }
}

fn is_uint(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// MindSpore's dtype names as kernel dumps write them (file names, `statistic.csv`).
pub fn ms_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "Bool" => DType::Bool,
        "Int8" => DType::I8,
        "Int16" => DType::I16,
        "Int32" => DType::I32,
        "Int64" => DType::I64,
        "UInt8" => DType::U8,
        "UInt16" => DType::U16,
        "UInt32" => DType::U32,
        "UInt64" => DType::U64,
        "Float16" => DType::F16,
        "BFloat16" => DType::BF16,
        "Float32" => DType::F32,
        "Float64" => DType::F64,
        "Complex64" => DType::C64,
        "Complex128" => DType::C128,
        // Ascend's spellings (upper case, the tensor's original dtype).
        "BOOL" => DType::Bool,
        "INT8" => DType::I8,
        "INT16" => DType::I16,
        "INT32" => DType::I32,
        "INT64" => DType::I64,
        "UINT8" => DType::U8,
        "UINT16" => DType::U16,
        "UINT32" => DType::U32,
        "UINT64" => DType::U64,
        "FLOAT16" => DType::F16,
        "BF16" => DType::BF16,
        "FLOAT" => DType::F32,
        "DOUBLE" => DType::F64,
        "COMPLEX64" => DType::C64,
        "COMPLEX128" => DType::C128,
        _ => return None,
    })
}

/// One (rank, net, graph, iteration) folder of tensor files or `statistic.csv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelStep {
    pub rank: u32,
    pub net_name: String,
    pub graph_id: u32,
    pub iteration: u64,
    pub dir: PathBuf,
}

/// A tensor file of a [`KernelStep`], its name parsed (through `mapping.csv` where the name on
/// disk is a shortened one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelTensorFile {
    pub path: PathBuf,
    pub name: KernelFileName,
    /// A raw file's shape from the folder's `statistic.csv` (`None` for `.npy` files, and for
    /// raw files without such a row: [`read_raw`] then reads one dimension).
    pub raw_shape: Option<Vec<usize>>,
    /// Whether the file is raw bytes without a header (else `.npy`).
    pub raw: bool,
}

impl KernelTensorFile {
    /// The tensor: a `.npy` file as [`crate::tensor::read_tensor`] reads it, a raw file by
    /// [`read_raw`] with the shape the folder's `statistic.csv` gives.
    pub fn read(&self) -> Result<crate::Tensor> {
        if self.raw {
            read_raw(&self.path, &self.name, self.raw_shape.as_deref())
        } else {
            crate::tensor::read_tensor(&self.path)
        }
    }

    /// dtype, shape and size without reading the payload (a `.npy` file's header; a raw file's
    /// size), as [`crate::tensor::inspect`] gives them.
    pub fn info(&self) -> Result<crate::tensor::FileInfo> {
        if self.raw {
            raw_info(&self.path, &self.name, self.raw_shape.as_deref())
                .map(crate::tensor::FileInfo::Tensor)
        } else {
            crate::tensor::inspect(&self.path)
        }
    }
}

/// Reads a raw kernel tensor file: its bytes in the dtype `name` states, in `shape` when given
/// and its size agrees (a `statistic.csv` row of the same tensor), else as one dimension. The
/// size must be a whole number of elements; a dtype numprobe cannot read (`INT4`, whose packing
/// no name states) is an error naming the file.
pub fn read_raw(
    path: &Path,
    name: &KernelFileName,
    shape: Option<&[usize]>,
) -> Result<crate::Tensor> {
    let file = crate::tensor::FileBytes::open_populated(path)?;
    let len = file.bytes().len();
    let info = raw_layout(path, name, shape, len as u64)?;
    Ok(crate::Tensor::from_file(
        info.dtype, info.shape, file, 0, len,
    ))
}

/// What [`read_raw`] would read, from the file's size alone.
pub fn raw_info(path: &Path, name: &KernelFileName, shape: Option<&[usize]>) -> Result<TensorInfo> {
    let f = fsio::open_regular(path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    raw_layout(path, name, shape, len)
}

fn raw_layout(
    path: &Path,
    name: &KernelFileName,
    shape: Option<&[usize]>,
    len: u64,
) -> Result<TensorInfo> {
    let Some(dtype) = name.dtype() else {
        return Err(Error::tensor(
            path,
            0,
            format!(
                "a raw kernel file of dtype {:?}, which numprobe cannot read without a header",
                name.dtype_name.as_deref().unwrap_or("(none)")
            ),
        ));
    };
    let size = dtype.size() as u64;
    if !len.is_multiple_of(size) {
        return Err(Error::tensor(
            path,
            0,
            format!(
                "{len} bytes is not a whole number of {} elements ({size} bytes each)",
                dtype.mindspore_name()
            ),
        ));
    }
    let numel = len / size;
    let shape = match shape {
        Some(s) if crate::tensor::checked_numel(s) == Some(numel) => s.to_vec(),
        _ => vec![usize::try_from(numel).map_err(|_| Error::tensor(path, 0, "too large"))?],
    };
    Ok(TensorInfo {
        dtype,
        shape,
        nbytes: len,
    })
}

/// [`read_raw`] of a file found on its own (`numprobe inspect`/`stats`): the shape from the
/// `statistic.csv` beside it, when that has the tensor's row.
pub fn read_raw_beside(path: &Path) -> Result<crate::Tensor> {
    let (name, shape) = raw_name_and_shape_beside(path)?;
    read_raw(path, &name, shape.as_deref())
}

/// [`raw_info`] of a file found on its own, as [`read_raw_beside`] would read it.
pub fn raw_info_beside(path: &Path) -> Result<TensorInfo> {
    let (name, shape) = raw_name_and_shape_beside(path)?;
    raw_info(path, &name, shape.as_deref())
}

fn raw_name_and_shape_beside(path: &Path) -> Result<(KernelFileName, Option<Vec<usize>>)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(KernelFileName::parse_raw)
        .ok_or_else(|| Error::tensor(path, 0, "not a raw kernel tensor file name"))?;
    let csv = path.with_file_name("statistic.csv");
    let shape = if exists_no_follow(&csv) {
        read_statistic_csv(&csv)?
            .iter()
            .find(|r| r.is_row_of(&name))
            .map(|r| r.shape.clone())
    } else {
        None
    };
    Ok((name, shape))
}

/// A rank folder (`rank_{id}`) of a kernel dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRank {
    pub rank: u32,
    pub dir: PathBuf,
    pub steps: Vec<KernelStep>,
}

impl KernelRank {
    /// The kernels of `graph_id` in execution order (scopes with `/`), from
    /// `execution_order/ms_execution_order_graph_{graph_id}.csv`; `None` when the file is absent.
    pub fn execution_order(&self, graph_id: u32) -> Result<Option<Vec<String>>> {
        let path = self
            .dir
            .join("execution_order")
            .join(format!("ms_execution_order_graph_{graph_id}.csv"));
        if !exists_no_follow(&path) {
            return Ok(None);
        }
        read_execution_order(&path).map(Some)
    }
}

/// A kernel dump: its rank folders, sorted by rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelDump {
    pub root: PathBuf,
    pub ranks: Vec<KernelRank>,
}

impl KernelDump {
    /// Every step folder, by rank, then iteration, then graph.
    pub fn steps(&self) -> impl Iterator<Item = &KernelStep> {
        self.ranks.iter().flat_map(|r| r.steps.iter())
    }
}

/// Whether `path` looks like a kernel dump: a folder holding `rank_{id}` folders with
/// `execution_order/` or `.dump_metadata/`, or such a rank folder itself.
pub fn is_kernel_dump(path: &Path) -> bool {
    if is_kernel_rank_dir(path) {
        return true;
    }
    let Ok(rd) = std::fs::read_dir(path) else {
        return false;
    };
    rd.flatten().any(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|n| parse_rank_dir_name(n).is_some())
            && e.file_type().is_ok_and(|t| t.is_dir())
            && is_kernel_rank_dir(&e.path())
    })
}

fn is_kernel_rank_dir(dir: &Path) -> bool {
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| parse_rank_dir_name(n).is_some());
    named
        && ["execution_order", ".dump_metadata"]
            .iter()
            .any(|d| is_real_dir(&dir.join(d)))
}

fn parse_rank_dir_name(name: &str) -> Option<u32> {
    let id = name.strip_prefix("rank_")?;
    if is_uint(id) { id.parse().ok() } else { None }
}

fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn exists_no_follow(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// Opens a kernel dump at `path` (the dump's root or one `rank_{id}` folder) and lists its step
/// folders. Folders that are links are not entered (a link could lead out of the dump); they
/// and anything else off the layout are reported by [`crate::validate`], not followed.
pub fn open(path: &Path) -> Result<KernelDump> {
    let rank_dirs: Vec<(u32, PathBuf)> = if is_kernel_rank_dir(path) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        vec![(parse_rank_dir_name(name).unwrap_or(0), path.to_path_buf())]
    } else {
        let mut v = Vec::new();
        for e in read_dir_sorted(path)? {
            if let Some(rank) = e.to_str().and_then(parse_rank_dir_name) {
                let p = path.join(&e);
                if is_real_dir(&p) {
                    v.push((rank, p));
                }
            }
        }
        v
    };
    if rank_dirs.is_empty() {
        return Err(Error::Layout {
            dir: path.to_path_buf(),
            msg: "no rank_{id} folder of a MindSpore kernel dump here".into(),
        });
    }
    let mut ranks = Vec::new();
    for (rank, dir) in rank_dirs {
        let mut steps = Vec::new();
        for net in read_dir_sorted(&dir)? {
            let Some(net_name) = net.to_str() else {
                continue;
            };
            if net_name == "execution_order" || net_name == "graphs" || net_name.starts_with('.') {
                continue;
            }
            let net_dir = dir.join(net_name);
            if !is_real_dir(&net_dir) {
                continue;
            }
            for graph in read_dir_sorted(&net_dir)? {
                let Some(graph_id) = graph.to_str().filter(|s| is_uint(s)) else {
                    continue;
                };
                let graph_dir = net_dir.join(graph_id);
                if !is_real_dir(&graph_dir) {
                    continue;
                }
                for it in read_dir_sorted(&graph_dir)? {
                    let Some(iteration) = it.to_str().filter(|s| is_uint(s)) else {
                        continue;
                    };
                    let it_dir = graph_dir.join(iteration);
                    if !is_real_dir(&it_dir) {
                        continue;
                    }
                    let (Ok(graph_id), Ok(iteration)) = (graph_id.parse(), iteration.parse())
                    else {
                        continue;
                    };
                    steps.push(KernelStep {
                        rank,
                        net_name: net_name.to_owned(),
                        graph_id,
                        iteration,
                        dir: it_dir,
                    });
                }
            }
        }
        steps.sort_by(|a, b| {
            (a.iteration, a.graph_id, &a.net_name).cmp(&(b.iteration, b.graph_id, &b.net_name))
        });
        ranks.push(KernelRank { rank, dir, steps });
    }
    ranks.sort_by_key(|r| r.rank);
    Ok(KernelDump {
        root: path.to_path_buf(),
        ranks,
    })
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<std::ffi::OsString>> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .map(|e| e.map(|e| e.file_name()).map_err(|e| Error::io(dir, e)))
        .collect::<Result<_>>()?;
    v.sort();
    Ok(v)
}

/// What a step folder holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepContents {
    /// Tensor files whose names parse, in time order (timestamp, then name).
    pub tensors: Vec<KernelTensorFile>,
    /// `.npy` files whose names do not follow the grammar (nor map through `mapping.csv`), and
    /// raw files of a dtype numprobe cannot read.
    pub unparsed: Vec<PathBuf>,
    /// Rows of `statistic.csv`, when the folder has one.
    pub statistics: Option<Vec<StatisticRow>>,
    /// Entries that are neither files nor folders of the layout (links, FIFOs, …), never read.
    pub not_regular: Vec<PathBuf>,
}

impl KernelStep {
    /// Lists the folder: tensor files (names through `mapping.csv` where present), and
    /// `statistic.csv`'s rows.
    pub fn contents(&self) -> Result<StepContents> {
        let mapping_path = self.dir.join("mapping.csv");
        let mapping = if exists_no_follow(&mapping_path) {
            read_mapping_csv(&mapping_path)?
        } else {
            HashMap::new()
        };
        let mut out = StepContents::default();
        for name in read_dir_sorted(&self.dir)? {
            let path = self.dir.join(&name);
            let Some(name) = name.to_str() else {
                out.unparsed.push(path);
                continue;
            };
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
            if !meta.is_file() {
                out.not_regular.push(path);
                continue;
            }
            if name == "statistic.csv" {
                out.statistics = Some(read_statistic_csv(&path)?);
                continue;
            }
            if name == "mapping.csv" {
                continue;
            }
            if !name.ends_with(".npy") {
                let raw = KernelFileName::parse_raw(name).or_else(|| {
                    let orig = mapping.get(name)?;
                    KernelFileName::parse_raw(orig.rsplit('/').next().unwrap_or(orig))
                });
                match raw {
                    Some(name) => out.tensors.push(KernelTensorFile {
                        path,
                        name,
                        raw_shape: None,
                        raw: true,
                    }),
                    // Named like a tensor but of a dtype no reader knows (`INT4`): listed, so
                    // that validate and compare say so instead of passing over it.
                    None if KernelFileName::parse(&format!("{name}.npy")).is_some() => {
                        out.unparsed.push(path)
                    }
                    None => {}
                }
                continue;
            }
            let stem = name.strip_suffix(".npy").unwrap_or(name);
            let parsed = KernelFileName::parse(name).or_else(|| {
                mapping
                    .get(name)
                    .or_else(|| mapping.get(stem))
                    .and_then(|orig| {
                        let orig = orig.rsplit('/').next().unwrap_or(orig);
                        if orig.ends_with(".npy") {
                            KernelFileName::parse(orig)
                        } else {
                            KernelFileName::parse(&format!("{orig}.npy"))
                        }
                    })
            });
            match parsed {
                Some(name) => out.tensors.push(KernelTensorFile {
                    path,
                    name,
                    raw_shape: None,
                    raw: false,
                }),
                None => out.unparsed.push(path),
            }
        }
        if let Some(rows) = &out.statistics
            && out.tensors.iter().any(|t| t.raw)
        {
            // Indexed once: a step may hold tens of thousands of tensors and rows.
            let by_time: HashMap<u64, Vec<&StatisticRow>> =
                rows.iter().fold(HashMap::new(), |mut m, r| {
                    m.entry(r.timestamp).or_default().push(r);
                    m
                });
            for t in out.tensors.iter_mut().filter(|t| t.raw) {
                t.raw_shape = by_time
                    .get(&t.name.timestamp)
                    .and_then(|rs| rs.iter().find(|r| r.is_row_of(&t.name)))
                    .map(|r| r.shape.clone());
            }
        }
        out.tensors
            .sort_by(|a, b| (a.name.timestamp, &a.path).cmp(&(b.name.timestamp, &b.path)));
        Ok(out)
    }
}

/// Reads a whole small text file of the dump (CSV), bounded: kernel dumps' CSVs are tables of
/// one row per tensor, never near this size. A link is refused, not followed: MindSpore writes
/// these files itself, so a link can only lead out of the dump.
fn read_text(path: &Path, limit: u64) -> Result<String> {
    if let Ok(m) = std::fs::symlink_metadata(path)
        && m.file_type().is_symlink()
    {
        return Err(Error::NotRegularFile {
            file: path.to_path_buf(),
            kind: "symbolic link",
        });
    }
    let f = fsio::open_regular(path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    if len > limit {
        return Err(Error::tensor(
            path,
            0,
            format!("{len} bytes; more than the {limit} bytes a kernel dump's CSV may hold here"),
        ));
    }
    let mut s = String::new();
    f.take(limit)
        .read_to_string(&mut s)
        .map_err(|e| Error::io(path, e))?;
    Ok(s.strip_prefix('\u{feff}').map(str::to_owned).unwrap_or(s))
}

const CSV_LIMIT: u64 = 4 << 30;

fn csv_reader(text: &str) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes())
}

fn csv_error(path: &Path, e: &csv::Error) -> Error {
    let offset = e.position().map_or(0, |p| p.byte());
    Error::tensor(path, offset, format!("malformed CSV: {e}"))
}

/// The kernels of one graph in execution order (their scopes, `/`-separated).
pub fn read_execution_order(path: &Path) -> Result<Vec<String>> {
    let text = read_text(path, CSV_LIMIT)?;
    let mut out = Vec::new();
    for (i, rec) in csv_reader(&text).records().enumerate() {
        let rec = rec.map_err(|e| csv_error(path, &e))?;
        let Some(first) = rec.get(0) else { continue };
        if i == 0 && first == "NodeExecutionOrder-FullNameWithScope" {
            continue;
        }
        if !first.is_empty() {
            out.push(first.to_owned());
        }
    }
    Ok(out)
}

/// `mapping.csv`: shortened file name → original name (Ascend writes it when a name would
/// exceed 255 characters). The first row is a header when its first cell is not a file name.
pub fn read_mapping_csv(path: &Path) -> Result<HashMap<String, String>> {
    let text = read_text(path, CSV_LIMIT)?;
    let mut out = HashMap::new();
    for (i, rec) in csv_reader(&text).records().enumerate() {
        let rec = rec.map_err(|e| csv_error(path, &e))?;
        match (rec.get(0), rec.get(1)) {
            (Some(short), Some(orig)) if !short.is_empty() => {
                out.insert(short.trim().to_owned(), orig.trim().to_owned());
            }
            _ if i == 0 => {}
            _ => {
                return Err(Error::tensor(
                    path,
                    rec.position().map_or(0, |p| p.byte()),
                    format!("row {}: expected two cells (short name, original)", i + 1),
                ));
            }
        }
    }
    Ok(out)
}

/// One row of `statistic.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatisticRow {
    pub op_type: String,
    pub op_name: String,
    pub task_id: u64,
    pub stream_id: u64,
    pub timestamp: u64,
    pub io: Io,
    pub slot: u32,
    /// Bytes.
    pub data_size: u64,
    /// MindSpore's dtype name (`float32` or `Float32`; kept as written).
    pub data_type: String,
    pub shape: Vec<usize>,
    /// The `Shape` cell as written (msprobe's comparator shows and compares this text).
    pub shape_text: String,
    /// The row's line in the file (the header is line 1), for messages.
    pub line: usize,
    /// The statistic columns after `Shape`, by header name (`Max Value`, `Min Value`,
    /// `Avg Value`, `L2Norm Value`, counts, hashes), as written.
    pub values: BTreeMap<String, String>,
}

impl StatisticRow {
    /// The same key as [`KernelFileName::compare_key`].
    pub fn compare_key(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.op_name, self.task_id, self.io, self.slot
        )
    }

    /// Whether this row describes the tensor file `name` (same kernel, time, input/output and
    /// slot).
    pub fn is_row_of(&self, name: &KernelFileName) -> bool {
        self.op_type == name.op_type
            && self.op_name == name.op_name
            && self.task_id == name.task_id
            && self.stream_id == name.stream_id
            && self.timestamp == name.timestamp
            && self.io == name.io
            && self.slot == name.slot
    }

    /// A statistic column as a number: `None` when absent; `null`/empty as NaN; `True`/`False`
    /// as 1/0 (bool tensors' max and min).
    pub fn value(&self, column: &str) -> Option<f64> {
        let v = self.values.get(column)?.trim();
        Some(match v {
            "" | "null" | "nan" | "NaN" => f64::NAN,
            "True" | "true" => 1.0,
            "False" | "false" => 0.0,
            "inf" | "Inf" => f64::INFINITY,
            "-inf" | "-Inf" => f64::NEG_INFINITY,
            _ => v.parse().unwrap_or(f64::NAN),
        })
    }
}

/// The columns every `statistic.csv` starts with, in order.
pub const STATISTIC_FIXED_COLUMNS: [&str; 10] = [
    "Op Type",
    "Op Name",
    "Task ID",
    "Stream ID",
    "Timestamp",
    "IO",
    "Slot",
    "Data Size",
    "Data Type",
    "Shape",
];

/// Reads `statistic.csv` (MindSpore's statistics-mode kernel dump, or numprobe's own).
pub fn read_statistic_csv(path: &Path) -> Result<Vec<StatisticRow>> {
    read_statistic_csv_text(path).map(|(rows, _)| rows)
}

/// [`read_statistic_csv`]'s rows and the file's text (without a byte-order mark), read once:
/// for a writer that appends to a table it has checked.
pub fn read_statistic_csv_text(path: &Path) -> Result<(Vec<StatisticRow>, String)> {
    let text = read_text(path, CSV_LIMIT)?;
    let rows = parse_statistic_csv(path, &text)?;
    Ok((rows, text))
}

fn parse_statistic_csv(path: &Path, text: &str) -> Result<Vec<StatisticRow>> {
    let mut records = csv_reader(text).into_records();
    let header = match records.next() {
        Some(r) => r.map_err(|e| csv_error(path, &e))?,
        None => return Err(Error::tensor(path, 0, "empty statistic.csv (no header)")),
    };
    let header: Vec<String> = header.iter().map(|h| h.trim().to_owned()).collect();
    for (i, want) in STATISTIC_FIXED_COLUMNS.iter().enumerate() {
        if header.get(i).map(String::as_str) != Some(*want) {
            return Err(Error::tensor(
                path,
                0,
                format!(
                    "header column {} is {:?}, expected {want:?}",
                    i + 1,
                    header.get(i).map(String::as_str).unwrap_or("")
                ),
            ));
        }
    }
    let mut rows = Vec::new();
    for (i, rec) in records.enumerate() {
        let rec = rec.map_err(|e| csv_error(path, &e))?;
        let at = rec.position().map_or(0, |p| p.byte());
        let line = i + 2;
        let bad = |what: &str| Error::tensor(path, at, format!("line {line}: {what}"));
        if rec.iter().all(|c| c.trim().is_empty()) {
            continue;
        }
        if rec.len() < STATISTIC_FIXED_COLUMNS.len() {
            return Err(bad(&format!(
                "{} cells, fewer than the {} fixed columns",
                rec.len(),
                STATISTIC_FIXED_COLUMNS.len()
            )));
        }
        let cell = |k: usize| rec.get(k).unwrap_or("").trim();
        let uint = |k: usize| -> Result<u64> {
            cell(k)
                .parse()
                .map_err(|_| bad(&format!("{} {:?} is not a number", header[k], cell(k))))
        };
        let io = Io::parse(cell(5)).ok_or_else(|| bad(&format!("IO {:?}", cell(5))))?;
        let shape = parse_shape(cell(9)).ok_or_else(|| bad(&format!("Shape {:?}", cell(9))))?;
        let mut values = BTreeMap::new();
        for (k, name) in header
            .iter()
            .enumerate()
            .skip(STATISTIC_FIXED_COLUMNS.len())
        {
            if let Some(v) = rec.get(k) {
                values.insert(name.clone(), v.trim().to_owned());
            }
        }
        rows.push(StatisticRow {
            op_type: cell(0).to_owned(),
            op_name: cell(1).to_owned(),
            task_id: uint(2)?,
            stream_id: uint(3)?,
            timestamp: uint(4)?,
            io,
            slot: u32::try_from(uint(6)?).map_err(|_| bad("Slot out of range"))?,
            data_size: uint(7)?,
            data_type: cell(8).to_owned(),
            shape,
            shape_text: cell(9).to_owned(),
            line,
            values,
        });
    }
    Ok(rows)
}

/// `"(2,3)"`, `"[2, 3]"`, `"2x3"` or `"()"` (MindSpore writes tuples; older versions `x`).
fn parse_shape(s: &str) -> Option<Vec<usize>> {
    let inner = s
        .trim()
        .trim_start_matches(['(', '['])
        .trim_end_matches([')', ']']);
    let sep = if inner.contains('x') && !inner.contains(',') {
        'x'
    } else {
        ','
    };
    inner
        .split(sep)
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().ok())
        .collect()
}

/// The header of a `statistic.csv` with the statistics MindSpore writes by default
/// (`max, min, avg, l2norm`), plus `MD5` when asked.
pub fn statistic_header(with_md5: bool) -> Vec<&'static str> {
    let mut h: Vec<&str> = STATISTIC_FIXED_COLUMNS.to_vec();
    h.extend(["Max Value", "Min Value", "Avg Value", "L2Norm Value"]);
    if with_md5 {
        h.push("MD5");
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_names_with_dtype() {
        let n = KernelFileName::parse(
            "MatMul.Default_network-WithLossCell__backbone-Net_fc-Dense_MatMul-op0.0.0.1796131964538435.input.0.DefaultFormat.Float32.npy",
        )
        .unwrap();
        assert_eq!(n.op_type, "MatMul");
        assert_eq!(
            n.op_name,
            "Default_network-WithLossCell__backbone-Net_fc-Dense_MatMul-op0"
        );
        assert_eq!((n.task_id, n.stream_id), (0, 0));
        assert_eq!(n.timestamp, 1796131964538435);
        assert_eq!((n.io, n.slot), (Io::Input, 0));
        assert_eq!(n.format, "DefaultFormat");
        assert_eq!(n.dtype(), Some(DType::F32));
        assert_eq!(
            n.compare_key(),
            "Default_network-WithLossCell__backbone-Net_fc-Dense_MatMul-op0.0.input.0"
        );
    }

    #[test]
    fn parses_names_without_dtype_and_dotted_op_names() {
        let n = KernelFileName::parse("Conv2D.Default_conv.1.3.17.output.2.NC1HWC0.npy").unwrap();
        assert_eq!((n.task_id, n.stream_id, n.timestamp), (1, 3, 17));
        assert_eq!((n.io, n.slot), (Io::Output, 2));
        assert_eq!(n.format, "NC1HWC0");
        assert_eq!(n.dtype_name, None);
        let n = KernelFileName::parse(
            "Parameter.layer.0.weight.0.0.9.output.0.DefaultFormat.BFloat16.npy",
        )
        .unwrap();
        assert_eq!(n.op_name, "layer.0.weight");
        assert_eq!(n.dtype(), Some(DType::BF16));
    }

    #[test]
    fn rejects_what_is_not_a_kernel_file_name() {
        for bad in [
            "x.npy",
            "Functional.relu.0.forward.input.0.npy",
            "MatMul.op.0.0.123.inout.0.DefaultFormat.Float32.npy",
            "MatMul.op.0.0.12a.input.0.DefaultFormat.Float32.npy",
            "MatMul.op.0.0.1.input.x.DefaultFormat.Float32.npy",
            "MatMul.op.0.0.1.input.0.DefaultFormat.Float32.pt",
            ".op.0.0.1.input.0.DefaultFormat.npy",
        ] {
            assert_eq!(KernelFileName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn shapes() {
        assert_eq!(parse_shape("(2,3)"), Some(vec![2, 3]));
        assert_eq!(parse_shape("[2, 3]"), Some(vec![2, 3]));
        assert_eq!(parse_shape("2x3"), Some(vec![2, 3]));
        assert_eq!(parse_shape("()"), Some(vec![]));
        assert_eq!(parse_shape("(2,a)"), None);
    }
}
