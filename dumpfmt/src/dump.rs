//! Typed view of `dump.json` and `debug.json` (spec §2, §4.3).
//!
//! A [`DumpFile`] owns the parsed [`Value`] tree and checks its schema once when it is built;
//! entries and records are then read through cheap views ([`Entry`], [`Record`],
//! [`TensorRecord`]). Because the tree itself is kept, unknown keys and key order survive a
//! read → write cycle unchanged, while [`DumpFile::new`], [`DumpFile::insert_entry`] and the
//! record builders produce the 26.2 form for writers.
//!
//! Schema errors are [`Error::Schema`] / [`Error::UnknownDtype`] naming the file and a JSON path
//! such as `$.data["Torch.abs.0.forward"].input_args[0].dtype`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::DType;
use crate::error::{Error, Result};
use crate::json::{self, Map, Str, Value};
pub use crate::names::Framework;
use crate::names::{Category, Direction, EntryName};
use crate::tensor::Tensor;

/// Deepest nesting of records inside an entry that msprobe writes (deeper data is an error there).
pub const MAX_RECORD_DEPTH: usize = 400;

/// A parsed `dump.json` / `debug.json` whose schema has been checked.
#[derive(Clone, Debug)]
pub struct DumpFile {
    path: PathBuf,
    value: Value,
    /// Entry names, built on the first insert so that writers adding many entries stay linear.
    names: Option<HashSet<Str>>,
}

/// JSON path helpers: `$.data["name"].input_args[0].dtype`. `base` extended by an object key.
pub fn path_key(base: &str, key: &str) -> String {
    let ident = !key.is_empty()
        && key
            .bytes()
            .enumerate()
            .all(|(i, c)| c == b'_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
    if ident {
        format!("{base}.{key}")
    } else {
        format!("{base}[{}]", quote(key))
    }
}

/// `base` extended by an array index.
pub fn path_index(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

fn quote(s: &str) -> String {
    let mut out = Vec::new();
    json::write_python(&Value::from(s), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// JSON path of an entry: `$.data["Torch.abs.0.forward"]`.
pub fn entry_path(name: &str) -> String {
    format!("$.data[{}]", quote(name))
}

impl DumpFile {
    /// Reads and checks a dump.json/debug.json; the first schema problem is the error.
    pub fn open(path: &Path) -> Result<DumpFile> {
        let value = json::parse_file(path)?;
        DumpFile::from_value(value, path)
    }

    /// [`DumpFile::open`] of a file found in a dump directory, not named by the user
    /// ([`json::parse_found`]: not read through a link out of its directory).
    pub fn open_found(path: &Path) -> Result<DumpFile> {
        let value = json::parse_found(path)?;
        DumpFile::from_value(value, path)
    }

    /// Checks `value` and wraps it; `path` labels errors and locates `dump_tensor_data`.
    pub fn from_value(value: Value, path: impl Into<PathBuf>) -> Result<DumpFile> {
        let path = path.into();
        let mut problems = Vec::new();
        check_file(&value, &path, &mut problems, 1);
        match problems.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(DumpFile {
                path,
                value,
                names: None,
            }),
        }
    }

    /// Wraps `value` without checking it (the caller reports [`DumpFile::schema_problems`]);
    /// views skip what they cannot decode.
    pub(crate) fn from_value_unchecked(value: Value, path: &Path) -> DumpFile {
        DumpFile {
            path: path.to_path_buf(),
            value,
            names: None,
        }
    }

    /// Every schema problem of `value` (empty when [`DumpFile::from_value`] would succeed).
    pub fn schema_problems(value: &Value, path: &Path) -> Vec<Error> {
        let mut problems = Vec::new();
        check_file(value, path, &mut problems, usize::MAX);
        problems
    }

    /// An empty dump in the 26.2 form: `task, level, framework, dump_data_dir, data`.
    pub fn new(
        path: impl Into<PathBuf>,
        task: &str,
        level: &str,
        framework: Framework,
        dump_data_dir: Option<&str>,
    ) -> DumpFile {
        let top = Map::new()
            .with("task", task)
            .with("level", level)
            .with("framework", framework.as_str())
            .with("dump_data_dir", dump_data_dir)
            .with("data", Map::new());
        DumpFile {
            path: path.into(),
            value: Value::Object(top),
            names: None,
        }
    }

    /// Adds or replaces an entry (a replaced entry keeps its position, like msprobe's dict;
    /// msprobe's pop-and-reinsert of modules is [`DumpFile::remove_entry`] then insert).
    /// Checks the entry's schema first.
    pub fn insert_entry(&mut self, name: &str, body: Value) -> Result<()> {
        let mut problems = Vec::new();
        check_entry(name, &body, &self.path, &mut problems, 1);
        if let Some(e) = problems.into_iter().next() {
            return Err(e);
        }
        if self.names.is_none() {
            self.names = Some(self.data().keys().cloned().collect());
        }
        let key = Str::from(name);
        let known = self.names.as_ref().is_some_and(|n| n.contains(&key));
        if let Some(data) = self.data_mut() {
            if known {
                data.insert(key, body);
            } else {
                data.push_unique(key.clone(), body);
                if let Some(n) = &mut self.names {
                    n.insert(key);
                }
            }
        }
        Ok(())
    }

    /// Removes an entry (the others keep their order).
    pub fn remove_entry(&mut self, name: &str) -> Option<Value> {
        if let Some(n) = &mut self.names {
            n.remove(&Str::from(name));
        }
        self.data_mut()?.remove(name)
    }

    fn data_mut(&mut self) -> Option<&mut Map> {
        self.value.as_object_mut()?.get_mut("data")?.as_object_mut()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole tree, exactly as read (or as built).
    pub fn value(&self) -> &Value {
        &self.value
    }

    pub fn into_value(self) -> Value {
        self.value
    }

    fn top(&self) -> &Map {
        static EMPTY: std::sync::OnceLock<Map> = std::sync::OnceLock::new();
        self.value
            .as_object()
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    pub fn task(&self) -> &str {
        self.top().get("task").and_then(Value::as_str).unwrap_or("")
    }

    /// `level`; absent in some hand-made files.
    pub fn level(&self) -> Option<&str> {
        self.top().get("level").and_then(Value::as_str)
    }

    /// The `framework` key as written (absent in [1.x ≤1.1]).
    pub fn declared_framework(&self) -> Option<&str> {
        self.top().get("framework").and_then(Value::as_str)
    }

    /// `framework`, or when absent the flavour of the first `"type": "torch…"` /
    /// `"mindspore…"` record (msprobe's rule).
    pub fn framework(&self) -> Framework {
        if let Some(f) = self.declared_framework() {
            return Framework::parse(f);
        }
        detect_framework(self.data())
    }

    /// `dump_data_dir` as written. Informative only: use [`DumpFile::tensor_dir`] to find files.
    pub fn dump_data_dir(&self) -> Option<&str> {
        self.top().get("dump_data_dir").and_then(Value::as_str)
    }

    /// `{dir(dump.json)}/dump_tensor_data`, where msprobe's tensor files are.
    pub fn tensor_dir(&self) -> PathBuf {
        self.path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join("dump_tensor_data")
    }

    /// The file a record's `data_name` names in [`DumpFile::tensor_dir`], refusing names that
    /// are not plain file names and links leaving the directory
    /// ([`crate::layout::resolve_data_name`]).
    pub fn tensor_path(&self, data_name: &str) -> Result<PathBuf> {
        crate::layout::resolve_data_name(&self.tensor_dir(), data_name)
    }

    /// Reads the tensor file a record's `data_name` names (see [`DumpFile::tensor_path`]);
    /// [`Tensor::array`] is its `ndarray` view.
    pub fn tensor(&self, data_name: &str) -> Result<Tensor> {
        crate::tensor::read_tensor(&self.tensor_path(data_name)?)
    }

    pub fn data(&self) -> &Map {
        static EMPTY: std::sync::OnceLock<Map> = std::sync::OnceLock::new();
        self.top()
            .get("data")
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    pub fn len(&self) -> usize {
        self.data().len()
    }

    pub fn is_empty(&self) -> bool {
        self.data().is_empty()
    }

    /// Entries in file order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        let file = self.path.as_path();
        self.data().iter().map(move |(k, v)| Entry {
            name: k.as_str().unwrap_or(""),
            value: v,
            file,
        })
    }

    /// Looks an entry up by name (a linear scan; see [`DumpFile::entries_by_name`] for many
    /// lookups).
    pub fn entry(&self, name: &str) -> Option<Entry<'_>> {
        self.data()
            .iter()
            .find(|(k, _)| **k == *name)
            .map(|(k, v)| Entry {
                name: k.as_str().unwrap_or(""),
                value: v,
                file: &self.path,
            })
    }

    /// All entries keyed by name, for matching two dumps.
    pub fn entries_by_name(&self) -> HashMap<&str, Entry<'_>> {
        self.entries().map(|e| (e.name, e)).collect()
    }

    /// msprobe's bytes for this file (`json.dump(…, indent=1)`).
    pub fn to_bytes(&self) -> Vec<u8> {
        json::to_python_bytes(&self.value)
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        json::write_file(path, &self.value)
    }
}

fn detect_framework(data: &Map) -> Framework {
    fn walk(v: &Value, depth: usize) -> Option<Framework> {
        if depth > MAX_RECORD_DEPTH + 4 {
            return None;
        }
        match v {
            Value::Object(m) => {
                if let Some(t) = m.get("type").and_then(Value::as_str) {
                    if t.starts_with("torch") {
                        return Some(Framework::PyTorch);
                    }
                    if t.starts_with("mindspore") {
                        return Some(Framework::MindSpore);
                    }
                }
                m.values().find_map(|x| walk(x, depth + 1))
            }
            Value::Array(a) => a.iter().find_map(|x| walk(x, depth + 1)),
            _ => None,
        }
    }
    data.values()
        .find_map(|v| walk(v, 0))
        .unwrap_or(Framework::Unknown)
}

/// One entry of `data`.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    pub name: &'a str,
    /// The entry body (an object for every kind except debug entries, which hold whatever
    /// was saved).
    pub value: &'a Value,
    pub file: &'a Path,
}

/// A value-carrying key of an entry with the tensor-file category it maps to.
#[derive(Clone, Copy, Debug)]
pub struct Section<'a> {
    /// The JSON key (`input_args`, `bias` for parameters_grad, or `""` for a debug entry's body).
    pub key: &'a str,
    pub category: Category,
    pub value: &'a Value,
}

/// A tensor record found inside an entry.
#[derive(Clone, Debug)]
pub struct TensorAt<'a> {
    /// JSON path of the record, `$.data["…"].input_args[0]`.
    pub json_path: String,
    pub category: Category,
    /// Data-name path after the category: arg index, list indices, dict keys.
    pub data_path: Vec<String>,
    pub record: TensorRecord,
    pub value: &'a Map,
}

impl<'a> Entry<'a> {
    pub fn kind(&self) -> EntryName<'a> {
        EntryName::parse(self.name)
    }

    pub fn json_path(&self) -> String {
        entry_path(self.name)
    }

    fn body(&self) -> Option<&'a Map> {
        self.value.as_object()
    }

    fn array(&self, key: &str) -> Option<&'a [Value]> {
        self.body()?.get(key)?.as_array()
    }

    /// Forward `input_args`.
    pub fn input_args(&self) -> Option<&'a [Value]> {
        self.array("input_args")
    }

    /// Forward `input_kwargs`.
    pub fn input_kwargs(&self) -> Option<&'a Map> {
        self.body()?.get("input_kwargs")?.as_object()
    }

    /// Forward `output`, or backward `output` (gradients w.r.t. the forward inputs).
    pub fn output(&self) -> Option<&'a [Value]> {
        self.array("output")
    }

    /// Backward `input` (gradients w.r.t. the forward outputs).
    pub fn grad_input(&self) -> Option<&'a [Value]> {
        self.array("input")
    }

    /// Module/cell forward `parameters`.
    pub fn parameters(&self) -> Option<&'a Map> {
        self.body()?.get("parameters")?.as_object()
    }

    /// The keys that hold records, in file order, with their data-name category. Unknown keys
    /// (`is_recompute`, `is_nan`, …) are skipped.
    pub fn sections(&self) -> Vec<Section<'a>> {
        let kind = self.kind();
        match kind {
            EntryName::Debug { .. } => vec![Section {
                key: "",
                category: Category::Debug,
                value: self.value,
            }],
            EntryName::ParametersGrad { .. } => self
                .body()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| Section {
                            key: k.as_str().unwrap_or(""),
                            category: Category::ParametersGrad,
                            value: v,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            _ => {
                let backward = kind.direction() == Some(Direction::Backward);
                let Some(m) = self.body() else {
                    return Vec::new();
                };
                m.iter()
                    .filter_map(|(k, v)| {
                        let key = k.as_str()?;
                        let category = match (key, backward) {
                            ("input_args", _) => Category::Input,
                            ("input_kwargs", _) => Category::Kwargs,
                            ("output", _) => Category::Output,
                            ("parameters", _) => Category::Parameters,
                            ("input", _) => Category::Input,
                            _ => return None,
                        };
                        Some(Section {
                            key,
                            category,
                            value: v,
                        })
                    })
                    .collect()
            }
        }
    }

    /// Every tensor record of the entry, in file order, with its JSON path and the path that
    /// its data name is built from. Records that fail to decode are skipped (the file's schema
    /// check reports them).
    pub fn tensors(&self) -> Vec<TensorAt<'a>> {
        let mut out = Vec::new();
        let base = self.json_path();
        for s in self.sections() {
            let jp = if s.key.is_empty() {
                base.clone()
            } else {
                path_key(&base, s.key)
            };
            let mut dp = Vec::new();
            match s.category {
                // `{"bias": [record]}` → file `….parameters_grad.{k}.bias.pt` (no list index).
                Category::ParametersGrad => {
                    dp.push(s.key.to_string());
                    if let Some(a) = s.value.as_array() {
                        for (i, v) in a.iter().enumerate() {
                            collect_tensors(
                                v,
                                path_index(&jp, i),
                                s.category,
                                &mut dp.clone(),
                                &mut out,
                                0,
                            );
                        }
                    }
                }
                Category::Parameters => {
                    // Each parameter is one record keyed by name.
                    collect_tensors(s.value, jp, s.category, &mut dp, &mut out, 0);
                }
                _ => collect_tensors(s.value, jp, s.category, &mut dp, &mut out, 0),
            }
        }
        out
    }

    /// The data name msprobe gives the tensor at `t` (`ext` = `pt` or `npy`).
    pub fn expected_data_name(&self, t: &TensorAt<'_>, ext: &str) -> String {
        crate::names::tensor_data_name(self.name, t.category, &t.data_path, ext)
    }
}

fn collect_tensors<'a>(
    v: &'a Value,
    jp: String,
    category: Category,
    dp: &mut Vec<String>,
    out: &mut Vec<TensorAt<'a>>,
    depth: usize,
) {
    if depth > MAX_RECORD_DEPTH + 4 {
        return;
    }
    match v {
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                dp.push(i.to_string());
                collect_tensors(x, path_index(&jp, i), category, dp, out, depth + 1);
                dp.pop();
            }
        }
        Value::Object(m) => match classify(m) {
            RecordClass::Tensor => {
                if let Ok(record) = TensorRecord::from_map(m, Path::new(""), &jp) {
                    out.push(TensorAt {
                        json_path: jp,
                        category,
                        data_path: dp.clone(),
                        record,
                        value: m,
                    });
                }
            }
            RecordClass::Scalar => {}
            RecordClass::Container => {
                for (k, x) in m.iter() {
                    let key = k.to_string_lossy();
                    dp.push(key.to_string());
                    collect_tensors(x, path_key(&jp, &key), category, dp, out, depth + 1);
                    dp.pop();
                }
            }
        },
        _ => {}
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecordClass {
    /// `type` + `dtype` + `shape` (tensors, numpy arrays).
    Tensor,
    /// Any other `type`/`class_type`-less leaf record with a `type` key.
    Scalar,
    /// A dict (or namedtuple/dataclass, P2POp) whose members are values again.
    Container,
}

/// `type` values that only tensor records carry.
const TENSOR_TYPES: [&str; 5] = [
    "torch.Tensor",
    "mindspore.Tensor",
    "numpy.ndarray",
    "torch.nn.parameter.Parameter",
    "mindspore.Parameter",
];

fn classify(m: &Map) -> RecordClass {
    match m.get("type") {
        Some(Value::Str(_)) if m.contains_key("dtype") && m.contains_key("shape") => {
            RecordClass::Tensor
        }
        // A record that names a tensor file or a tensor type is a tensor record even when its
        // dtype or shape is missing: TensorRecord::from_map then reports what is missing,
        // rather than the record passing silently as a scalar.
        Some(Value::Str(t))
            if m.contains_key("data_name")
                || t.as_str().is_some_and(|t| TENSOR_TYPES.contains(&t)) =>
        {
            RecordClass::Tensor
        }
        Some(Value::Str(_)) => RecordClass::Scalar,
        _ => RecordClass::Container,
    }
}

/// Whether a record object is a tensor record (see `classify`): a `type` string and a
/// `dtype` and `shape`, a `data_name`, or a tensor type name.
pub fn is_tensor_record(m: &Map) -> bool {
    classify(m) == RecordClass::Tensor
}

/// A value record decoded one level (spec §2.6).
#[derive(Clone, Debug)]
pub enum Record<'a> {
    /// `null`: `None`, an unsupported type or an ignored position.
    Null,
    /// `{}`: a supported-but-unrecognised object (positional dtype/device).
    Empty,
    Tensor(Box<TensorRecord>),
    /// `{"type": …, "value": …}` and the other non-tensor records of §2.6.2.
    Scalar {
        type_name: &'a str,
        map: &'a Map,
    },
    List(&'a [Value]),
    /// A dict, namedtuple, dataclass or P2POp object.
    Dict(&'a Map),
    /// A bare JSON scalar where a record was expected (older or hand-made files).
    Bare(&'a Value),
}

impl<'a> Record<'a> {
    /// Decodes `v`; `file`/`json_path` label errors.
    pub fn from_value(v: &'a Value, file: &Path, json_path: &str) -> Result<Record<'a>> {
        Ok(match v {
            Value::Null => Record::Null,
            Value::Array(a) => Record::List(a),
            Value::Object(m) if m.is_empty() => Record::Empty,
            Value::Object(m) => match classify(m) {
                RecordClass::Tensor => {
                    Record::Tensor(Box::new(TensorRecord::from_map(m, file, json_path)?))
                }
                RecordClass::Scalar => Record::Scalar {
                    type_name: m.get("type").and_then(Value::as_str).unwrap_or(""),
                    map: m,
                },
                RecordClass::Container => Record::Dict(m),
            },
            other => Record::Bare(other),
        })
    }
}

/// A statistic (`Max`, `Min`, `Mean`, `Norm`) as msprobe writes it.
#[derive(Clone, Copy, Debug)]
pub enum Stat {
    Null,
    Bool(bool),
    /// Integer tensors keep their native values (uint64 may exceed i64).
    Int(i128),
    Float(f64),
}

impl PartialEq for Stat {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Stat::Null, Stat::Null) => true,
            (Stat::Bool(a), Stat::Bool(b)) => a == b,
            (Stat::Int(a), Stat::Int(b)) => a == b,
            (Stat::Float(a), Stat::Float(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            _ => false,
        }
    }
}

impl Stat {
    /// The value as a double (`true` = 1); `None` for null.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Stat::Null => None,
            Stat::Bool(b) => Some(b as u8 as f64),
            Stat::Int(i) => Some(i as f64),
            Stat::Float(f) => Some(f),
        }
    }

    fn from_value(v: &Value) -> Option<Stat> {
        Some(match v {
            Value::Null => Stat::Null,
            Value::Bool(b) => Stat::Bool(*b),
            Value::Int(i) => Stat::Int(*i as i128),
            Value::BigInt(s) => Stat::Int(s.parse().ok()?),
            Value::Float(f) => Stat::Float(*f),
            _ => return None,
        })
    }

    pub fn to_value(&self) -> Value {
        match *self {
            Stat::Null => Value::Null,
            Stat::Bool(b) => Value::Bool(b),
            Stat::Int(i) => match i64::try_from(i) {
                Ok(i) => Value::Int(i),
                Err(_) => Value::BigInt(i.to_string().into()),
            },
            Stat::Float(f) => Value::Float(f),
        }
    }
}

/// The overloaded `md5` key (spec §10.5).
#[derive(Clone, Copy, Debug)]
pub enum Checksum {
    /// `summary_mode: md5`: zlib CRC-32 of the raw bytes, written as 8 lowercase hex digits.
    Crc32(u32),
    /// `summary_mode: xor`: `0x` + 16 hex digits.
    Xor(u64),
    /// `summary_mode: xor` of a 0-dim float tensor: the element as a number.
    XorFloat(f64),
    /// `null` (xor of an empty or float8 tensor, md5 of a meta tensor).
    Null,
}

impl PartialEq for Checksum {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Checksum::Crc32(a), Checksum::Crc32(b)) => a == b,
            (Checksum::Xor(a), Checksum::Xor(b)) => a == b,
            (Checksum::XorFloat(a), Checksum::XorFloat(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            (Checksum::Null, Checksum::Null) => true,
            _ => false,
        }
    }
}

impl Checksum {
    fn from_value(v: &Value) -> Option<Checksum> {
        match v {
            Value::Null => Some(Checksum::Null),
            Value::Float(f) => Some(Checksum::XorFloat(*f)),
            Value::Str(s) => {
                let s = s.as_str()?;
                if let Some(h) = s.strip_prefix("0x")
                    && h.len() == 16
                    && h.bytes().all(|c| c.is_ascii_hexdigit())
                {
                    return u64::from_str_radix(h, 16).ok().map(Checksum::Xor);
                }
                if s.len() == 8 && s.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return u32::from_str_radix(s, 16).ok().map(Checksum::Crc32);
                }
                None
            }
            _ => None,
        }
    }

    pub fn to_value(&self) -> Value {
        match *self {
            Checksum::Crc32(c) => Value::from(format!("{c:08x}")),
            Checksum::Xor(x) => Value::from(format!("0x{x:016x}")),
            Checksum::XorFloat(f) => Value::Float(f),
            Checksum::Null => Value::Null,
        }
    }

    pub fn is_xor(&self) -> bool {
        matches!(self, Checksum::Xor(_) | Checksum::XorFloat(_))
    }
}

/// Where msprobe puts the `md5` key of a tensor record (spec §2.6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Md5Slot {
    /// Right after `shape`, in place of the statistics (`summary_mode: xor`).
    AfterShape,
    /// Between `requires_grad` and `data_name` (task tensor + `bench_path`, computed
    /// synchronously).
    BeforeDataName,
    /// The last key (`summary_mode: md5`).
    Last,
}

/// A tensor record (spec §2.6.1), also used for `numpy.ndarray` records (same keys).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorRecord {
    /// `torch.Tensor`, `mindspore.Tensor`, `numpy.ndarray`, tensor subclasses…
    pub type_name: String,
    /// The dtype text as written (`torch.float32`, `Float32`, `float32`).
    pub dtype: String,
    pub shape: Vec<u64>,
    /// `None` = key absent (xor mode), `Some(Stat::Null)` = `null`.
    pub max: Option<Stat>,
    pub min: Option<Stat>,
    pub mean: Option<Stat>,
    pub norm: Option<Stat>,
    pub md5: Option<Checksum>,
    /// Where `md5` goes in the record.
    pub md5_slot: Md5Slot,
    /// PyTorch only.
    pub requires_grad: Option<bool>,
    pub data_name: Option<String>,
    /// Other keys (`layout`, `device_mesh`, `Max_except_inf_nan`, …) in file order.
    pub extra: Vec<(String, Value)>,
}

const STAT_KEYS: [&str; 4] = ["Max", "Min", "Mean", "Norm"];
/// Extra keys msprobe writes between the statistics and `requires_grad`.
const BEFORE_REQUIRES_GRAD: [&str; 2] = ["layout", "hsdp_shard_size"];

/// A member value of a tensor record, as [`TensorRecord::members`] hands it out.
enum Member<'a> {
    Str(&'a str),
    Shape(&'a [u64]),
    Stat(&'a Stat),
    Checksum(&'a Checksum),
    Bool(bool),
    Value(&'a Value),
}

impl TensorRecord {
    /// A record with the given identity and no statistics.
    pub fn new(type_name: &str, dtype: &str, shape: Vec<u64>) -> TensorRecord {
        TensorRecord {
            type_name: type_name.into(),
            dtype: dtype.into(),
            shape,
            max: None,
            min: None,
            mean: None,
            norm: None,
            md5: None,
            md5_slot: Md5Slot::Last,
            requires_grad: None,
            data_name: None,
            extra: Vec::new(),
        }
    }

    /// Makes this record what [`TensorRecord::new`] makes of the same identity, keeping the
    /// allocations of its type name, dtype and shape (a capture writes hundreds of records a
    /// step over one). Every other member comes from `new`, so none is left over.
    pub fn reset(&mut self, type_name: &str, dtype: &str, shape: impl IntoIterator<Item = u64>) {
        let mut kept = std::mem::replace(self, TensorRecord::new("", "", Vec::new()));
        kept.type_name.clear();
        kept.type_name.push_str(type_name);
        kept.dtype.clear();
        kept.dtype.push_str(dtype);
        kept.shape.clear();
        kept.shape.extend(shape);
        self.type_name = kept.type_name;
        self.dtype = kept.dtype;
        self.shape = kept.shape;
    }

    /// The element type named by `dtype` (either framework's spelling); `None` for numpy
    /// arrays' names and unknown dtypes.
    pub fn dtype(&self) -> Option<DType> {
        DType::from_any_name(&self.dtype)
    }

    /// `true` for `torch.*` / `mindspore.*` tensor types (not numpy arrays).
    pub fn is_framework_tensor(&self) -> bool {
        self.type_name != "numpy.ndarray"
    }

    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Decodes a record object; `json_path` is the record's path for errors.
    pub fn from_map(m: &Map, file: &Path, json_path: &str) -> Result<TensorRecord> {
        let err = |key: &str, msg: String| Error::schema(file, path_key(json_path, key), msg);
        let string = |key: &str| -> Result<String> {
            match m.get(key) {
                Some(Value::Str(s)) => s
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| err(key, "string holds a lone surrogate".into())),
                Some(v) => Err(err(
                    key,
                    format!("expected a string, found {}", v.kind_name()),
                )),
                None => Err(Error::schema(
                    file,
                    json_path,
                    format!("tensor record without \"{key}\""),
                )),
            }
        };
        let type_name = string("type")?;
        let dtype = string("dtype")?;
        let shape = match m.get("shape") {
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, d)| match d {
                    Value::Int(n) if *n >= 0 => Ok(*n as u64),
                    other => Err(Error::schema(
                        file,
                        path_index(&path_key(json_path, "shape"), i),
                        format!(
                            "expected a non-negative integer, found {}",
                            other.kind_name()
                        ),
                    )),
                })
                .collect::<Result<Vec<u64>>>()?,
            Some(v) => {
                return Err(err(
                    "shape",
                    format!("expected an array, found {}", v.kind_name()),
                ));
            }
            None => {
                return Err(Error::schema(
                    file,
                    json_path,
                    "tensor record without \"shape\"",
                ));
            }
        };
        let mut rec = TensorRecord::new(&type_name, &dtype, shape);
        let keys: Vec<&str> = m.keys().map(|k| k.as_str().unwrap_or("")).collect();
        if let Some(at) = keys.iter().position(|k| *k == "md5") {
            let placed =
                |k: &&str| STAT_KEYS.contains(k) || *k == "requires_grad" || *k == "data_name";
            let before = keys[..at].iter().any(placed);
            let after = &keys[at + 1..];
            rec.md5_slot = if !before && after.iter().any(placed) {
                Md5Slot::AfterShape
            } else if !before {
                // Nothing to tell the slots apart: pick the one its kind is written in.
                match Checksum::from_value(m.get("md5").unwrap_or(&Value::Null)) {
                    Some(Checksum::Crc32(_)) => Md5Slot::Last,
                    _ => Md5Slot::AfterShape,
                }
            } else if after.contains(&"data_name") {
                Md5Slot::BeforeDataName
            } else {
                Md5Slot::Last
            };
        }
        if type_name != "numpy.ndarray" && DType::from_any_name(&dtype).is_none() {
            return Err(Error::UnknownDtype {
                file: file.into(),
                path: path_key(json_path, "dtype"),
                dtype,
            });
        }
        for (k, v) in m.iter() {
            let key = k.to_string_lossy();
            match &*key {
                "type" | "dtype" | "shape" => {}
                "Max" | "Min" | "Mean" | "Norm" => {
                    let s = Stat::from_value(v).ok_or_else(|| {
                        err(&key, format!("expected a number, bool or null, found {}", v.kind_name()))
                    })?;
                    match &*key {
                        "Max" => rec.max = Some(s),
                        "Min" => rec.min = Some(s),
                        "Mean" => rec.mean = Some(s),
                        _ => rec.norm = Some(s),
                    }
                }
                "md5" => {
                    rec.md5 = Some(Checksum::from_value(v).ok_or_else(|| {
                        err(
                            "md5",
                            "expected 8 hex digits (CRC-32), \"0x\" + 16 hex digits (XOR), a number or null".into(),
                        )
                    })?)
                }
                "requires_grad" => {
                    rec.requires_grad = Some(v.as_bool().ok_or_else(|| {
                        err("requires_grad", format!("expected a bool, found {}", v.kind_name()))
                    })?)
                }
                "data_name" => {
                    let s = v
                        .as_str()
                        .ok_or_else(|| err("data_name", format!("expected a string, found {}", v.kind_name())))?;
                    if !crate::layout::is_file_name(s) {
                        return Err(err("data_name", format!("{s:?} is not a file name")));
                    }
                    rec.data_name = Some(s.to_string());
                }
                _ => rec.extra.push((key.into_owned(), v.clone())),
            }
        }
        Ok(rec)
    }

    /// The record in msprobe 26.2's key order: `type, dtype, shape, [md5 (xor)], Max, Min, Mean,
    /// Norm, layout, hsdp_shard_size, requires_grad, other extras, [md5 (diff_check)],
    /// data_name, [md5 (md5 mode)]` (see [`Md5Slot`]).
    pub fn to_value(&self) -> Value {
        let mut m = Map::with_capacity(10 + self.extra.len());
        self.members(|k, v| match v {
            Member::Str(s) => m.push_unique(k, s.into()),
            Member::Shape(d) => {
                m.push_unique(k, Value::Array(d.iter().map(|&d| Value::from(d)).collect()))
            }
            Member::Stat(s) => m.push_unique(k, s.to_value()),
            Member::Checksum(c) => m.push_unique(k, c.to_value()),
            Member::Bool(b) => m.push_unique(k, Value::Bool(b)),
            // An extra key may repeat one written before it: it replaces that one in place.
            Member::Value(v) => {
                m.insert(k, v.clone());
            }
        });
        Value::Object(m)
    }

    /// The record as [`json::write_python_at`] writes its [`to_value`](TensorRecord::to_value)
    /// `level` containers deep, without building the value.
    pub fn write_python_at(&self, level: usize, out: &mut Vec<u8>) {
        if !self.extra.is_empty() {
            // Extra keys may replace earlier ones in place (see `to_value`), which a writer
            // that only appends cannot do; they are rare (records read from other dumps).
            json::write_python_at(&self.to_value(), level, out);
            return;
        }
        let mut c = json::PyContainer::object(out, level);
        let inner = c.member_level();
        self.members(|k, v| {
            let out = c.key(k);
            match v {
                Member::Str(s) => json::write_python_text(s, out),
                Member::Shape(d) => {
                    let mut a = json::PyContainer::array(out, inner);
                    for &d in d {
                        json::write_python_int(d as i64, a.item());
                    }
                    a.end();
                }
                Member::Stat(Stat::Float(f)) => json::write_python_float(*f, out),
                Member::Stat(Stat::Bool(b)) => json::write_python_bool(*b, out),
                Member::Bool(b) => json::write_python_bool(b, out),
                Member::Stat(s) => json::write_python_at(&s.to_value(), inner, out),
                Member::Checksum(c) => json::write_python_at(&c.to_value(), inner, out),
                Member::Value(v) => json::write_python_at(v, inner, out),
            }
        });
        c.end();
    }

    /// The record's keys and values in msprobe's order: the one place [`to_value`] and
    /// [`write_python_at`] take it from.
    ///
    /// [`to_value`]: TensorRecord::to_value
    /// [`write_python_at`]: TensorRecord::write_python_at
    fn members<'a>(&'a self, mut f: impl FnMut(&'a str, Member<'a>)) {
        f("type", Member::Str(&self.type_name));
        f("dtype", Member::Str(&self.dtype));
        f("shape", Member::Shape(&self.shape));
        let md5_at = |slot: Md5Slot| self.md5.as_ref().filter(|_| self.md5_slot == slot);
        if let Some(c) = md5_at(Md5Slot::AfterShape) {
            f("md5", Member::Checksum(c));
        }
        for (k, s) in STAT_KEYS
            .iter()
            .zip([&self.max, &self.min, &self.mean, &self.norm])
        {
            if let Some(s) = s {
                f(k, Member::Stat(s));
            }
        }
        for (k, v) in &self.extra {
            if BEFORE_REQUIRES_GRAD.contains(&k.as_str()) {
                f(k, Member::Value(v));
            }
        }
        if let Some(r) = self.requires_grad {
            f("requires_grad", Member::Bool(r));
        }
        for (k, v) in &self.extra {
            if !BEFORE_REQUIRES_GRAD.contains(&k.as_str()) {
                f(k, Member::Value(v));
            }
        }
        if let Some(c) = md5_at(Md5Slot::BeforeDataName) {
            f("md5", Member::Checksum(c));
        }
        if let Some(d) = &self.data_name {
            f("data_name", Member::Str(d));
        }
        if let Some(c) = md5_at(Md5Slot::Last) {
            f("md5", Member::Checksum(c));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Record builders for writers (spec §2.6.2)

/// `{"type": type_name, "value": value}` (bool/int/float/str, numpy scalars, `torch.Size`,
/// `torch.dtype`, `torch.device`, `mindspore.dtype`, `torch.distributed.ReduceOp`).
pub fn scalar_record(type_name: &str, value: impl Into<Value>) -> Value {
    Value::Object(
        Map::new()
            .with("type", type_name)
            .with("value", value.into()),
    )
}

/// `slice(a, b, c)` → `{"type": "slice", "value": [a, b, c]}`.
pub fn slice_record(start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> Value {
    scalar_record(
        "slice",
        vec![Value::from(start), Value::from(stop), Value::from(step)],
    )
}

/// `Ellipsis`.
pub fn ellipsis_record() -> Value {
    scalar_record("ellipsis", "...")
}

/// `torch.Size([..])`.
pub fn size_record(dims: &[u64]) -> Value {
    scalar_record(
        "torch.Size",
        dims.iter().map(|&d| Value::from(d)).collect::<Vec<_>>(),
    )
}

/// `dist.ProcessGroup` with `group_id = format(crc32(str(ranks)), "08x")`.
pub fn process_group_record(ranks: &[i64]) -> Value {
    let text = format!(
        "[{}]",
        ranks
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let id = crc32fast::hash(text.as_bytes());
    Value::Object(
        Map::new()
            .with("type", "torch.ProcessGroup")
            .with(
                "group_ranks",
                ranks.iter().map(|&r| Value::Int(r)).collect::<Vec<_>>(),
            )
            .with("group_id", format!("{id:08x}")),
    )
}

/// API forward entry body: `input_args`, `input_kwargs`, `output`.
pub fn api_forward_body(input_args: Vec<Value>, input_kwargs: Map, output: Vec<Value>) -> Value {
    Value::Object(
        Map::new()
            .with("input_args", input_args)
            .with("input_kwargs", input_kwargs)
            .with("output", output),
    )
}

/// Module/cell forward entry body: `input_args`, `input_kwargs`, `output`, `parameters`.
pub fn module_forward_body(
    input_args: Vec<Value>,
    input_kwargs: Map,
    output: Vec<Value>,
    parameters: Map,
) -> Value {
    Value::Object(
        Map::new()
            .with("input_args", input_args)
            .with("input_kwargs", input_kwargs)
            .with("output", output)
            .with("parameters", parameters),
    )
}

/// Backward entry body: `input` (grads of the outputs), `output` (grads of the inputs).
pub fn backward_body(input: Vec<Value>, output: Vec<Value>) -> Value {
    Value::Object(Map::new().with("input", input).with("output", output))
}

// ---------------------------------------------------------------------------------------------
// Schema checks

fn check_file(v: &Value, file: &Path, out: &mut Vec<Error>, limit: usize) {
    let Some(top) = v.as_object() else {
        out.push(Error::schema(
            file,
            "$",
            format!("expected an object at top level, found {}", v.kind_name()),
        ));
        return;
    };
    match top.get("task") {
        Some(Value::Str(_)) => {}
        Some(other) => out.push(Error::schema(
            file,
            "$.task",
            format!("expected a string, found {}", other.kind_name()),
        )),
        None => out.push(Error::schema(file, "$", "missing \"task\"")),
    }
    for key in ["level", "framework"] {
        if let Some(x) = top.get(key)
            && !matches!(x, Value::Str(_))
        {
            out.push(Error::schema(
                file,
                format!("$.{key}"),
                format!("expected a string, found {}", x.kind_name()),
            ));
        }
    }
    if let Some(x) = top.get("dump_data_dir")
        && !matches!(x, Value::Str(_) | Value::Null)
    {
        out.push(Error::schema(
            file,
            "$.dump_data_dir",
            format!("expected a string or null, found {}", x.kind_name()),
        ));
    }
    let data = match top.get("data") {
        Some(Value::Object(m)) => m,
        Some(other) => {
            out.push(Error::schema(
                file,
                "$.data",
                format!("expected an object, found {}", other.kind_name()),
            ));
            return;
        }
        None => {
            out.push(Error::schema(file, "$", "missing \"data\""));
            return;
        }
    };
    for (k, body) in data.iter() {
        if out.len() >= limit {
            return;
        }
        check_entry(&k.to_string_lossy(), body, file, out, limit);
    }
}

fn check_entry(name: &str, body: &Value, file: &Path, out: &mut Vec<Error>, limit: usize) {
    let ep = entry_path(name);
    let kind = EntryName::parse(name);
    if let EntryName::Debug { .. } = kind {
        check_values(body, &ep, file, out, limit, 0);
        return;
    }
    let Some(m) = body.as_object() else {
        out.push(Error::schema(
            file,
            ep,
            format!("expected an entry object, found {}", body.kind_name()),
        ));
        return;
    };
    let is_pgrad = matches!(kind, EntryName::ParametersGrad { .. });
    for (k, v) in m.iter() {
        if out.len() >= limit {
            return;
        }
        let key = k.to_string_lossy();
        let p = path_key(&ep, &key);
        let want = if is_pgrad {
            Some("array")
        } else {
            match &*key {
                "input_args" | "output" | "input" => Some("array"),
                "input_kwargs" | "parameters" => Some("object"),
                _ => None,
            }
        };
        match (want, v) {
            (Some("array"), Value::Array(a)) => {
                for (i, x) in a.iter().enumerate() {
                    check_values(x, &path_index(&p, i), file, out, limit, 1);
                }
            }
            (Some("object"), Value::Object(o)) => {
                for (kk, x) in o.iter() {
                    check_values(x, &path_key(&p, &kk.to_string_lossy()), file, out, limit, 1);
                }
            }
            (Some(w), other) => out.push(Error::schema(
                file,
                p,
                format!("expected an {w}, found {}", other.kind_name()),
            )),
            // Unknown keys (`is_recompute`, `is_nan`, …) are carried, not checked.
            (None, _) => {}
        }
    }
}

fn check_values(
    v: &Value,
    jp: &str,
    file: &Path,
    out: &mut Vec<Error>,
    limit: usize,
    depth: usize,
) {
    if out.len() >= limit {
        return;
    }
    if depth > MAX_RECORD_DEPTH {
        out.push(Error::schema(
            file,
            jp,
            format!("records nested deeper than {MAX_RECORD_DEPTH} levels"),
        ));
        return;
    }
    match v {
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                check_values(x, &path_index(jp, i), file, out, limit, depth + 1);
            }
        }
        Value::Object(m) => match classify(m) {
            RecordClass::Tensor => {
                if let Err(e) = TensorRecord::from_map(m, file, jp) {
                    out.push(e);
                }
            }
            RecordClass::Scalar => {}
            RecordClass::Container => {
                if m.contains_key("type") {
                    out.push(Error::schema(
                        file,
                        path_key(jp, "type"),
                        "expected a string",
                    ));
                    return;
                }
                for (k, x) in m.iter() {
                    check_values(
                        x,
                        &path_key(jp, &k.to_string_lossy()),
                        file,
                        out,
                        limit,
                        depth + 1,
                    );
                }
            }
        },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_record_is_a_new_one() {
        let mut r = TensorRecord::new("torch.Tensor", "torch.float32", vec![2, 3]);
        r.max = Some(Stat::Float(1.5));
        r.min = Some(Stat::Null);
        r.mean = Some(Stat::Float(0.5));
        r.norm = Some(Stat::Float(2.0));
        r.md5 = Some(Checksum::Crc32(7));
        r.md5_slot = Md5Slot::AfterShape;
        r.requires_grad = Some(true);
        r.data_name = Some("x.pt".into());
        r.extra
            .push(("layout".into(), Value::Str("torch.strided".into())));
        r.reset("mindspore.Tensor", "Float16", [4]);
        assert_eq!(r, TensorRecord::new("mindspore.Tensor", "Float16", vec![4]));
    }

    #[test]
    fn json_paths() {
        assert_eq!(
            path_key(
                &path_index(
                    &path_key(&entry_path("Torch.abs.0.forward"), "input_args"),
                    0
                ),
                "dtype"
            ),
            "$.data[\"Torch.abs.0.forward\"].input_args[0].dtype"
        );
        assert_eq!(path_key("$", "my key"), "$[\"my key\"]");
    }

    #[test]
    fn process_group_id() {
        // spec §2.6.2: ranks [0] → "553403f9"
        assert_eq!(
            process_group_record(&[0])
                .get("group_id")
                .and_then(Value::as_str),
            Some("553403f9")
        );
    }
}
