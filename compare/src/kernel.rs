//! Comparing two MindSpore kernel-level (L2) dumps ([`dumpfmt::kernel`]) the way msprobe's
//! graph-mode comparator (`msprobe compare --rank`) does: one table per rank and iteration,
//! `compare_result_{rank}_{step}_{timestamp}.csv`.
//!
//! Matching: a tensor file's key is its op name, task id, input/output, slot and format (the
//! fields msprobe's comparator takes from the name), and occurrences of one key are numbered in
//! time order; the two sides are joined on (key, number), both sides' rows kept, in msprobe's
//! order (keys sorted as strings, then by number). Each side's cells are numpy's `max`, `min`,
//! `mean` and `linalg.norm` of the file; a pair of equal shape and dtype gets msprobe's tensor
//! metrics ([`crate::tensor::compare_arrays`]) and its "Accuracy Reached or Not" verdict.
//!
//! Cells are printed as pandas prints msprobe's table: a column that holds only numbers is a
//! float64 column (`1.0`, the float32 `2.2412093` widened to `2.241209268569946`, NaN empty),
//! a column mixing numbers and booleans keeps each value's own `str` (`2.2412093`, `True`).
//! msprobe splits its table into one chunk per 4 CPUs and pandas decides per chunk; this
//! writer decides once per table, which is msprobe's output on machines with fewer than 7 CPUs.
//!
//! Beyond msprobe: bfloat16 files (descr `'<E2'`, which msprobe cannot load) are compared, as
//! float32 for the statistics; `summary.md` names the first kernel, in execution order, whose
//! output disagrees while its inputs agree.
//!
//! Two cells cannot be msprobe's bit for bit on every machine: numpy's `linalg.norm` of a
//! float32 or float64 tensor is the square root of a BLAS dot product, whose summation order
//! depends on the CPU's kernel; numprobe sums in float64 and rounds once (within an ulp or two).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use dumpfmt::kernel::{KernelDump, KernelFileName, KernelStep};
use dumpfmt::{DType, Tensor};
use half::f16;

use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::tensor::compare_arrays;

/// The table's columns, as msprobe writes them in tensor mode.
pub const COLUMNS: [&str; 22] = [
    "NPU Name",
    "Bench Name",
    "NPU Dtype",
    "Bench Dtype",
    "NPU Tensor Shape",
    "Bench Tensor Shape",
    "NPU max",
    "NPU min",
    "NPU mean",
    "NPU l2norm",
    "Bench max",
    "Bench min",
    "Bench mean",
    "Bench l2norm",
    "Accuracy Reached or Not",
    "Err_message",
    "Cosine",
    "EucDist",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
];

/// A numpy scalar as a reduction returns it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NpScalar {
    Bool(bool),
    Int(i64),
    UInt(u64),
    F16(f16),
    F32(f32),
    F64(f64),
}

impl NpScalar {
    /// `str()` of the numpy scalar.
    pub fn py_str(self) -> String {
        match self {
            NpScalar::Bool(b) => if b { "True" } else { "False" }.into(),
            NpScalar::Int(i) => i.to_string(),
            NpScalar::UInt(u) => u.to_string(),
            NpScalar::F16(h) => str_f16(h),
            NpScalar::F32(f) => pyrepr::str_f32(f),
            NpScalar::F64(f) => pyrepr::repr_f64(f),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            NpScalar::Bool(b) => b as u8 as f64,
            NpScalar::Int(i) => i as f64,
            NpScalar::UInt(u) => u as f64,
            NpScalar::F16(h) => h.to_f64(),
            NpScalar::F32(f) => f as f64,
            NpScalar::F64(f) => f,
        }
    }
}

/// numpy's `str(np.float16(x))`: the shortest digits that read back as the same float16,
/// positional iff `1e-4 <= |x| < 1e16` (or zero) by the float16's value.
fn str_f16(h: f16) -> String {
    let x = h.to_f32();
    if !x.is_finite() {
        return pyrepr::str_f32(x);
    }
    let positional = x == 0.0 || x.abs() >= 1e-4;
    for digits in 1..=5 {
        let s = format!("{:.*e}", digits - 1, x);
        if let Ok(v) = s.parse::<f64>()
            && f16::from_f64(v) == h
        {
            // Python's repr of the short decimal has the same digits; its layout follows the
            // decimal's exponent, numpy's the float16's value (they differ just below 1e-4).
            let text = pyrepr::repr_f64(v);
            return if positional || text.contains('e') {
                text
            } else {
                pyrepr::str_f32(v as f32)
            };
        }
    }
    pyrepr::str_f32(x)
}

/// One side of a row: the file and numpy's four reductions of it.
#[derive(Clone, Debug, PartialEq)]
pub struct SideCells {
    pub path: PathBuf,
    pub name: KernelFileName,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// `None` for an empty tensor (numpy refuses its max).
    pub max: Option<NpScalar>,
    pub min: Option<NpScalar>,
    pub mean: Option<NpScalar>,
    pub norm: Option<NpScalar>,
}

/// One row of a kernel compare table.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRow {
    /// The join key (op name, task id, io, slot, format) and the occurrence number.
    pub key: String,
    pub occurrence: usize,
    pub npu: Option<SideCells>,
    pub bench: Option<SideCells>,
    /// "Accuracy Reached or Not": `Yes`, `No`, `None`, `Unmatched`, or empty.
    pub accuracy: Option<String>,
    pub err_message: String,
    /// The six metric cells, or `None` when the pair was not compared.
    pub metrics: Option<[Cell; 6]>,
    /// Set when a side's file could not be read (an error row; msprobe would stop).
    pub read_error: Option<String>,
    /// The difference of the two sides' values widened to float64, relative to the golden's
    /// largest magnitude (dtypes may differ; NaN/inf at the same places agree), `None` when the
    /// sides do not pair up
    /// (one side missing, different element counts). numprobe's, for the first divergence.
    pub value_diff: Option<f64>,
}

impl KernelRow {
    /// Whether the row says the two sides disagree (or could not be compared for a reason
    /// that is the data's fault, not the layout's).
    pub fn is_error(&self) -> bool {
        self.read_error.is_some() || self.accuracy.as_deref() == Some("No")
    }
}

/// One table: a rank and an iteration of both dumps.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTable {
    pub rank: u32,
    pub step: u64,
    pub rows: Vec<KernelRow>,
}

/// Which (rank, iteration) tables to build.
#[derive(Clone, Debug, Default)]
pub struct KernelCompareOptions {
    pub ranks: Option<Vec<u32>>,
    pub steps: Option<Vec<u64>>,
}

/// Builds the tables of every (rank, iteration) both dumps hold (filtered by `opts`).
pub fn compare_kernel_dumps(
    target: &KernelDump,
    golden: &KernelDump,
    opts: &KernelCompareOptions,
) -> Result<Vec<KernelTable>> {
    let group = |d: &KernelDump| -> BTreeMap<(u32, u64), Vec<KernelStep>> {
        let mut m: BTreeMap<(u32, u64), Vec<KernelStep>> = BTreeMap::new();
        for s in d.steps() {
            m.entry((s.rank, s.iteration)).or_default().push(s.clone());
        }
        m
    };
    let (t, g) = (group(target), group(golden));
    let mut tables = Vec::new();
    for ((rank, step), t_steps) in &t {
        let Some(g_steps) = g.get(&(*rank, *step)) else {
            continue;
        };
        if opts.ranks.as_ref().is_some_and(|r| !r.contains(rank))
            || opts.steps.as_ref().is_some_and(|s| !s.contains(step))
        {
            continue;
        }
        let rows = compare_steps(t_steps, g_steps)?;
        tables.push(KernelTable {
            rank: *rank,
            step: *step,
            rows,
        });
    }
    Ok(tables)
}

/// msprobe's key: op name, task id, `input.N`/`output.N`, and the field after the slot (the
/// format when the name carries a dtype; without a dtype msprobe's pattern shifts by one).
fn msprobe_key(n: &KernelFileName) -> String {
    if n.dtype_name.is_some() {
        format!(
            "{}.{}.{}.{}.{}",
            n.op_name, n.task_id, n.io, n.slot, n.format
        )
    } else {
        format!("{}.{}.{}.{}", n.op_name, n.task_id, n.io, n.slot)
    }
}

type Numbered = BTreeMap<(String, usize), dumpfmt::kernel::KernelTensorFile>;

fn numbered(steps: &[KernelStep]) -> Result<Numbered> {
    let mut files = Vec::new();
    for s in steps {
        files.extend(s.contents()?.tensors);
    }
    // Occurrences of a key numbered in time order (stable for equal timestamps).
    files.sort_by_key(|f| f.name.timestamp);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeMap::new();
    for f in files {
        let key = msprobe_key(&f.name);
        let n = seen.entry(key.clone()).or_insert(0);
        out.insert((key, *n), f);
        *n += 1;
    }
    Ok(out)
}

fn compare_steps(target: &[KernelStep], golden: &[KernelStep]) -> Result<Vec<KernelRow>> {
    let (t, g) = (numbered(target)?, numbered(golden)?);
    let mut keys: Vec<&(String, usize)> = t.keys().chain(g.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut rows = Vec::with_capacity(keys.len());
    for k in keys {
        rows.push(compare_row(k, t.get(k), g.get(k)));
    }
    Ok(rows)
}

fn compare_row(
    (key, occurrence): &(String, usize),
    npu: Option<&dumpfmt::kernel::KernelTensorFile>,
    bench: Option<&dumpfmt::kernel::KernelTensorFile>,
) -> KernelRow {
    let mut row = KernelRow {
        key: key.clone(),
        occurrence: *occurrence,
        npu: None,
        bench: None,
        accuracy: None,
        err_message: String::new(),
        metrics: None,
        read_error: None,
        value_diff: None,
    };
    let mut load = |f: Option<&dumpfmt::kernel::KernelTensorFile>| -> Option<Tensor> {
        let f = f?;
        match dumpfmt::tensor::read_tensor(&f.path) {
            Ok(t) => Some(t),
            Err(e) => {
                row.read_error = Some(e.to_string());
                None
            }
        }
    };
    let (n, b) = (load(npu), load(bench));
    if let Some(msg) = row.read_error.clone() {
        row.err_message = format!("Dump file could not be read: {msg}");
        return row;
    }
    // Each tensor widened once; the statistics, the checks and the difference all read it.
    let widen = |t: &Option<Tensor>| {
        t.as_ref()
            .map(|t| crate::tensor::widen_to_f64(&t.view()).unwrap_or_default())
    };
    let (nv, bv) = (widen(&n), widen(&b));
    row.npu = npu
        .zip(n.as_ref().zip(nv.as_deref()))
        .map(|(f, (t, v))| side_cells(f, t, v));
    row.bench = bench
        .zip(b.as_ref().zip(bv.as_deref()))
        .map(|(f, (t, v))| side_cells(f, t, v));
    let (Some(n), Some(b), Some(nv), Some(bv)) = (n, b, nv, bv) else {
        row.err_message = "Dump file is not ndarray.\n".into();
        return row;
    };
    row.value_diff = value_diff(&nv, &bv);
    // msprobe's checks before any metric (npy_data_check), in its order and words.
    let mut msg = String::new();
    if n.numel() == 0 || b.numel() == 0 {
        msg.push_str("This is empty data, can not compare.\n");
    } else {
        if n.shape().is_empty() || b.shape().is_empty() {
            msg.push_str("This is type of scalar data, can not compare.\n");
        }
        if n.shape() != b.shape() {
            msg.push_str("Shape of NPU and bench Tensor do not match.\n");
        }
        if n.dtype() != b.dtype() {
            msg.push_str("Dtype of NPU and bench Tensor do not match. Skipped.\n");
        }
    }
    if msg.is_empty() && !same_inf_nan_positions(&nv, &bv) {
        msg.push_str("The position of inf or nan in NPU and bench Tensor do not match.\n");
    }
    if !msg.is_empty() {
        row.err_message = msg;
        return row;
    }
    let r = compare_arrays(&n.view(), &b.view());
    row.accuracy = Some(check_accuracy(&r.values[0], &r.values[2]).to_owned());
    row.err_message = r.err_msg;
    row.metrics = Some(r.values);
    row
}

/// msprobe's "Accuracy Reached or Not" from the Cosine and MaxAbsErr cells.
pub fn check_accuracy(cos: &Cell, max_abs: &Cell) -> &'static str {
    let text = |c: &Cell| c.py_str();
    let (c, m) = (text(cos), text(max_abs));
    if c == "shape unmatched" {
        return "Unmatched";
    }
    if c == "None" || m == "None" {
        return "None";
    }
    if c == "N/A" || m == "N/A" {
        return "No";
    }
    let (Some(c), Some(m)) = (pyrepr::python_float(&c), pyrepr::python_float(&m)) else {
        return "None";
    };
    if c < 0.99 && m > 0.001 {
        return "No";
    }
    if c < 0.9 || m > 1.0 {
        return "No";
    }
    "Yes"
}

/// max |a − b| / max |b| over the elements (max |a − b| when the golden is all zeros), both
/// widened to float64: the difference relative to the tensor's scale, so that elements near
/// zero do not dominate. NaN and ±inf agree only with the same value at the same place
/// (∞ otherwise).
fn value_diff(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() {
        return None;
    }
    let (mut diff, mut scale) = (0f64, 0f64);
    for (&a, &b) in x.iter().zip(y) {
        if !a.is_finite() || !b.is_finite() {
            let same = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            if !same {
                return Some(f64::INFINITY);
            }
            continue;
        }
        diff = diff.max((a - b).abs());
        scale = scale.max(b.abs());
    }
    Some(if scale > 0.0 { diff / scale } else { diff })
}

fn same_inf_nan_positions(x: &[f64], y: &[f64]) -> bool {
    x.iter()
        .zip(y)
        .all(|(a, b)| a.is_nan() == b.is_nan() && (a.is_infinite() == b.is_infinite()))
}

fn side_cells(f: &dumpfmt::kernel::KernelTensorFile, t: &Tensor, v: &[f64]) -> SideCells {
    let (max, min, mean, norm) = if v.is_empty() {
        (None, None, None, None)
    } else {
        let (max, min) = extremes(v);
        let typed = |x: f64| typed_scalar(t.dtype(), x);
        (
            Some(typed(max)),
            Some(typed(min)),
            Some(np_mean(t.dtype(), v)),
            Some(np_norm(t.dtype(), v)),
        )
    };
    SideCells {
        path: f.path.clone(),
        name: f.name.clone(),
        dtype: t.dtype(),
        shape: t.shape().to_vec(),
        max,
        min,
        mean,
        norm,
    }
}

/// `np.max`/`np.min`: NaN wins.
fn extremes(v: &[f64]) -> (f64, f64) {
    let mut max = f64::NEG_INFINITY;
    let mut min = f64::INFINITY;
    for &x in v {
        if x.is_nan() {
            return (f64::NAN, f64::NAN);
        }
        max = max.max(x);
        min = min.min(x);
    }
    (max, min)
}

fn typed_scalar(d: DType, x: f64) -> NpScalar {
    match d {
        DType::Bool => NpScalar::Bool(x != 0.0),
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => NpScalar::UInt(x as u64),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => NpScalar::Int(x as i64),
        DType::F16 => NpScalar::F16(f16::from_f64(x)),
        DType::F64 => NpScalar::F64(x),
        _ => NpScalar::F32(x as f32),
    }
}

/// `np.mean`: float32 sums pairwise in float32 (float16 too, cast back at the end); integers
/// and booleans in float64; bfloat16 (numprobe only) as float32.
fn np_mean(d: DType, v: &[f64]) -> NpScalar {
    match d {
        DType::F64 => NpScalar::F64(ulp::elem::np_mean(v)),
        DType::F32 | DType::BF16 => {
            let w: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            NpScalar::F32(ulp::elem::np_mean(&w))
        }
        DType::F16 => {
            let w: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            NpScalar::F16(f16::from_f32(ulp::elem::np_mean(&w)))
        }
        _ => NpScalar::F64(ulp::elem::np_mean(v)),
    }
}

/// `np.linalg.norm`: float16 accumulates the squares in float32 in order and takes the root of
/// the float16 sum; float32 is the root of a float32 dot product (here: summed in float64,
/// rounded once); integers and booleans in float64.
fn np_norm(d: DType, v: &[f64]) -> NpScalar {
    match d {
        DType::F16 => {
            let mut acc = 0f32;
            for &x in v {
                let x = x as f32;
                acc += x * x;
            }
            let sq = f16::from_f32(acc);
            NpScalar::F16(f16::from_f32(sq.to_f32().sqrt()))
        }
        DType::F32 | DType::BF16 => {
            let sq: f64 = v.iter().map(|x| x * x).sum();
            NpScalar::F32((sq as f32).sqrt())
        }
        _ => NpScalar::F64(v.iter().map(|x| x * x).sum::<f64>().sqrt()),
    }
}

/// How pandas prints a column of numpy scalars after `infer_objects`: all numbers (ints and
/// floats, possibly missing) become float64; numbers mixed with booleans stay objects.
fn scalar_column(values: &[Option<NpScalar>]) -> Vec<String> {
    let present: Vec<NpScalar> = values.iter().flatten().copied().collect();
    let any_bool = present.iter().any(|v| matches!(v, NpScalar::Bool(_)));
    let all_bool = any_bool && present.iter().all(|v| matches!(v, NpScalar::Bool(_)));
    let any_float = present
        .iter()
        .any(|v| matches!(v, NpScalar::F16(_) | NpScalar::F32(_) | NpScalar::F64(_)));
    let any_missing = values.iter().any(Option::is_none);
    let object = (any_bool && !all_bool) || (all_bool && any_missing);
    values
        .iter()
        .map(|v| match v {
            None => String::new(),
            Some(v) if object || all_bool => inf_text(v.as_f64()).unwrap_or_else(|| v.py_str()),
            Some(v) if any_float || any_missing => {
                let x = v.as_f64();
                if x.is_nan() {
                    String::new()
                } else {
                    inf_text(x).unwrap_or_else(|| pyrepr::repr_f64(x))
                }
            }
            Some(v) => v.py_str(),
        })
        .collect()
}

/// msprobe replaces ±inf by ` inf` / ` -inf` before writing (so spreadsheets read text).
fn inf_text(x: f64) -> Option<String> {
    if x == f64::INFINITY {
        Some(" inf".into())
    } else if x == f64::NEG_INFINITY {
        Some(" -inf".into())
    } else {
        None
    }
}

fn cell_text(c: &Cell) -> String {
    match c {
        Cell::None => String::new(),
        Cell::Float(x) if x.is_infinite() => inf_text(*x).unwrap_or_default(),
        other => other.py_str(),
    }
}

/// A shape as msprobe's table prints it: the tuple with `[` `]` (`[2, 4]`, `[3,]`, `[]`), and
/// `None` for a side without a file.
fn shape_text(side: Option<&SideCells>) -> String {
    match side {
        None => "None".into(),
        Some(s) => pyrepr::shape_tuple(&s.shape)
            .replace('(', "[")
            .replace(')', "]"),
    }
}

impl KernelTable {
    /// The table's rows as the CSV's cells, `root_of` turning a file path into the text the
    /// `Name` columns show.
    pub fn cells(&self, name_of: &dyn Fn(&Path) -> String) -> Vec<[String; 22]> {
        let col = |f: &dyn Fn(&KernelRow) -> Option<NpScalar>| -> Vec<String> {
            scalar_column(&self.rows.iter().map(f).collect::<Vec<_>>())
        };
        let stats = [
            col(&|r| r.npu.as_ref().and_then(|s| s.max)),
            col(&|r| r.npu.as_ref().and_then(|s| s.min)),
            col(&|r| r.npu.as_ref().and_then(|s| s.mean)),
            col(&|r| r.npu.as_ref().and_then(|s| s.norm)),
            col(&|r| r.bench.as_ref().and_then(|s| s.max)),
            col(&|r| r.bench.as_ref().and_then(|s| s.min)),
            col(&|r| r.bench.as_ref().and_then(|s| s.mean)),
            col(&|r| r.bench.as_ref().and_then(|s| s.norm)),
        ];
        self.rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let name = |s: Option<&SideCells>| s.map(|s| name_of(&s.path)).unwrap_or_default();
                let dtype = |s: Option<&SideCells>| {
                    s.map(|s| s.dtype.numpy_name().to_owned())
                        .unwrap_or_default()
                };
                let m = |k: usize| {
                    r.metrics
                        .as_ref()
                        .map(|m| cell_text(&m[k]))
                        .unwrap_or_default()
                };
                [
                    name(r.npu.as_ref()),
                    name(r.bench.as_ref()),
                    dtype(r.npu.as_ref()),
                    dtype(r.bench.as_ref()),
                    shape_text(r.npu.as_ref()),
                    shape_text(r.bench.as_ref()),
                    stats[0][i].clone(),
                    stats[1][i].clone(),
                    stats[2][i].clone(),
                    stats[3][i].clone(),
                    stats[4][i].clone(),
                    stats[5][i].clone(),
                    stats[6][i].clone(),
                    stats[7][i].clone(),
                    r.accuracy.clone().unwrap_or_default(),
                    r.err_message.clone(),
                    m(0),
                    m(1),
                    m(2),
                    m(3),
                    m(4),
                    m(5),
                ]
            })
            .collect()
    }

    /// The table as msprobe's CSV (pandas `to_csv`: `\n` line ends, no byte-order mark);
    /// formula cells get a leading `'` as in every CSV numprobe writes.
    pub fn to_csv(&self, name_of: &dyn Fn(&Path) -> String) -> String {
        let mut out = String::new();
        pyrepr::write_csv_record(COLUMNS, "\n", &mut out);
        for row in self.cells(name_of) {
            pyrepr::write_csv_record(row.iter(), "\n", &mut out);
        }
        out
    }

    /// Where the difference starts: the first kernel, in execution order, whose outputs differ (relative difference above
    /// `tolerance`, 0 = bit for bit, values widened so dtypes may differ) while its inputs do
    /// not. When the first differing kernel's inputs already differ and kernels only one dump
    /// has come before it (a Cast only the low-precision run has, say), the first of those is
    /// the origin.
    pub fn first_divergence(&self, tolerance: f64) -> Option<FirstDivergence> {
        // Kernel occurrences with their rows.
        let mut kernels: BTreeMap<(String, usize), Vec<&KernelRow>> = BTreeMap::new();
        for r in &self.rows {
            if let Some(side) = r.npu.as_ref().or(r.bench.as_ref()) {
                kernels
                    .entry((side.name.op_name.clone(), r.occurrence))
                    .or_default()
                    .push(r);
            }
        }
        // Execution order: a synchronous dump writes each kernel's files as it runs, so the
        // timestamps are the order (MindSpore's execution-order file numbers ops differently
        // from the file names). Kernels only the golden ran slot in after the matched kernel
        // that precedes them in the golden's own order.
        let first_ts = |rows: &[&KernelRow], npu: bool| {
            rows.iter()
                .filter_map(|r| {
                    if npu {
                        r.npu.as_ref()
                    } else {
                        r.bench.as_ref()
                    }
                })
                .map(|s| s.name.timestamp)
                .min()
        };
        let mut target_order: Vec<(u64, (String, usize))> = kernels
            .iter()
            .filter_map(|(k, rows)| first_ts(rows, true).map(|t| (t, k.clone())))
            .collect();
        target_order.sort();
        let target_rank: HashMap<(String, usize), usize> = target_order
            .into_iter()
            .enumerate()
            .map(|(i, (_, k))| (k, 2 * i + 1))
            .collect();
        let mut golden_order: Vec<(u64, (String, usize))> = kernels
            .iter()
            .filter_map(|(k, rows)| first_ts(rows, false).map(|t| (t, k.clone())))
            .collect();
        golden_order.sort();
        let mut rank = target_rank.clone();
        let mut last = 0usize;
        for (_, k) in golden_order {
            match target_rank.get(&k) {
                Some(r) => last = *r,
                None => {
                    rank.insert(k, last + 1);
                }
            }
        }
        let mut ordered: Vec<_> = kernels.into_iter().collect();
        ordered.sort_by_key(|(k, _)| rank.get(k).copied().unwrap_or(usize::MAX));
        let is_parameter = |rows: &[&KernelRow]| {
            rows.iter()
                .filter_map(|r| r.npu.as_ref().or(r.bench.as_ref()))
                .any(|s| s.name.op_type == "Parameter")
        };
        let differs = |r: &KernelRow| {
            r.read_error.is_some()
                || match r.value_diff {
                    Some(d) => d > tolerance,
                    None => r.npu.is_some() && r.bench.is_some(),
                }
        };
        let one_sided = |rows: &[&KernelRow]| {
            rows.iter().all(|r| r.npu.is_none()) || rows.iter().all(|r| r.bench.is_none())
        };
        let describe = |(op, occ): &(String, usize), rows: &[&KernelRow], why: Origin| {
            let side = rows
                .iter()
                .find_map(|r| r.npu.as_ref().or(r.bench.as_ref()))
                .expect("a kernel has a file");
            FirstDivergence {
                op_type: side.name.op_type.clone(),
                op_name: op.clone(),
                occurrence: *occ,
                why,
                differing_after: 0,
            }
        };
        let mut first_one_sided: Option<FirstDivergence> = None;
        let mut found: Option<FirstDivergence> = None;
        let mut differing_after = 0usize;
        for (k, rows) in &ordered {
            if one_sided(rows) {
                if first_one_sided.is_none() && found.is_none() {
                    let why = if rows.iter().all(|r| r.bench.is_none()) {
                        Origin::OnlyInTarget
                    } else {
                        Origin::OnlyInGolden
                    };
                    first_one_sided = Some(describe(k, rows, why));
                }
                continue;
            }
            let out_differs = rows.iter().any(|r| {
                differs(r)
                    && r.npu
                        .as_ref()
                        .is_some_and(|s| s.name.io == dumpfmt::kernel::Io::Output)
            });
            if !out_differs {
                continue;
            }
            if found.is_some() {
                differing_after += 1;
                continue;
            }
            let in_differs = rows.iter().any(|r| {
                r.npu
                    .as_ref()
                    .or(r.bench.as_ref())
                    .is_some_and(|s| s.name.io == dumpfmt::kernel::Io::Input)
                    && (differs(r) || r.npu.is_none() || r.bench.is_none())
            });
            // A differing graph input (MindSpore's `Parameter.inputs{N}` files) explains a first
            // kernel whose inputs differ already.
            let graph_input = || {
                ordered.iter().find(|((op, _), rows)| {
                    op.starts_with("inputs")
                        && is_parameter(rows)
                        && !one_sided(rows)
                        && rows.iter().any(|r| differs(r))
                })
            };
            found = Some(match (&first_one_sided, in_differs) {
                (_, false) => describe(k, rows, Origin::Produced),
                (Some(o), true) => o.clone(),
                (None, true) => match graph_input() {
                    Some((gk, grows)) => describe(gk, grows, Origin::GraphInput),
                    None => describe(k, rows, Origin::InputsDiffer),
                },
            });
        }
        found.map(|mut f| {
            f.differing_after = differing_after;
            f
        })
    }
}

/// Why [`KernelTable::first_divergence`] names a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Its outputs differ while its inputs agree.
    Produced,
    /// Only the target runs it, before the first differing kernel.
    OnlyInTarget,
    /// Only the golden runs it, before the first differing kernel.
    OnlyInGolden,
    /// A graph input (`Parameter.inputs{N}`) differs, and the first differing kernel's inputs
    /// differ with it.
    GraphInput,
    /// The first differing kernel; its inputs differ already but no earlier kernel explains it
    /// (inputs that are not dumped, e.g. with `input_output` 2).
    InputsDiffer,
}

/// Where a kernel table's difference starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirstDivergence {
    pub op_type: String,
    /// The op's scope with `_` for `/`, as in its file names.
    pub op_name: String,
    pub occurrence: usize,
    pub why: Origin,
    /// Matched kernels with differing outputs after the first one.
    pub differing_after: usize,
}

impl std::fmt::Display for FirstDivergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}`", self.op_type, self.op_name)?;
        if self.occurrence > 0 {
            write!(f, " (occurrence {})", self.occurrence)?;
        }
        f.write_str(match self.why {
            Origin::Produced => ": its outputs differ while its inputs agree",
            Origin::OnlyInTarget => {
                ": a kernel only the target runs, before the first differing one"
            }
            Origin::OnlyInGolden => {
                ": a kernel only the golden runs, before the first differing one"
            }
            Origin::GraphInput => {
                ": a graph input that differs, feeding the first differing kernel"
            }
            Origin::InputsDiffer => {
                ": the first kernel whose outputs differ (its inputs differ too)"
            }
        })
    }
}

/// What [`run_kernel_compare`] wrote.
#[derive(Clone, Debug)]
pub struct KernelCompareOutcome {
    pub tables: Vec<(KernelTable, PathBuf)>,
    pub summary_path: PathBuf,
    pub summary_text: String,
    /// Rows judged `No` or unreadable, over all tables.
    pub error_rows: usize,
}

/// Compares two kernel dumps and writes `compare_result_{rank}_{step}_{timestamp}.csv` per
/// table and a `summary.md` into `out_dir`. `tolerance` is the relative difference under which
/// values count as equal for the first divergence (0: bit for bit).
pub fn run_kernel_compare(
    target: &Path,
    golden: &Path,
    out_dir: &Path,
    opts: &KernelCompareOptions,
    timestamp: Option<&str>,
    tolerance: f64,
) -> Result<KernelCompareOutcome> {
    if let Some(ts) = timestamp {
        dumpfmt::outfile::check_timestamp(ts).map_err(Error::Usage)?;
    }
    let t = dumpfmt::kernel::open(target)?;
    let g = dumpfmt::kernel::open(golden)?;
    let tables = compare_kernel_dumps(&t, &g, opts)?;
    if tables.is_empty() {
        return Err(Error::Usage(format!(
            "{} and {} share no (rank, iteration) to compare{}",
            target.display(),
            golden.display(),
            if opts.ranks.is_some() || opts.steps.is_some() {
                " under the given --rank/--step"
            } else {
                ""
            }
        )));
    }
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    let ts = timestamp
        .map(str::to_owned)
        .unwrap_or_else(crate::run::timestamp_now);
    // msprobe names files by absolute path (os.path.abspath, links not resolved).
    let abs = |p: &Path| -> String {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let mut written = Vec::new();
    let mut error_rows = 0;
    let mut md = String::from("# numprobe compare: MindSpore kernel dumps\n\n");
    md.push_str(&format!(
        "- target: `{}`\n- golden: `{}`\n\n",
        target.display(),
        golden.display()
    ));
    md.push_str(
        "| rank | step | table | rows | Yes | No | not compared | one side only | first divergence |\n",
    );
    md.push_str("|---|---|---|---|---|---|---|---|---|\n");
    let mut first_overall = None;
    for table in tables {
        let path = out_dir.join(format!(
            "compare_result_{}_{}_{ts}.csv",
            table.rank, table.step
        ));
        dumpfmt::outfile::write(&path, table.to_csv(&|p| abs(p)).as_bytes())?;
        let count = |f: &dyn Fn(&KernelRow) -> bool| table.rows.iter().filter(|r| f(r)).count();
        let yes = count(&|r| r.accuracy.as_deref() == Some("Yes"));
        let errors = count(&|r| r.is_error());
        let one_sided = count(&|r| r.npu.is_none() || r.bench.is_none());
        error_rows += errors;
        let first = table.first_divergence(tolerance);
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            table.rank,
            table.step,
            path.file_name().unwrap_or_default().to_string_lossy(),
            table.rows.len(),
            yes,
            errors,
            table.rows.len() - yes - errors - one_sided,
            one_sided,
            match &first {
                Some(f) => format!("{} `{}`", f.op_type, f.op_name),
                None => "none".into(),
            }
        ));
        if first_overall.is_none()
            && let Some(f) = first
        {
            first_overall = Some((table.rank, table.step, f));
        }
        written.push((table, path));
    }
    md.push('\n');
    match &first_overall {
        Some((rank, step, f)) => md.push_str(&format!(
            "First divergence: rank {rank}, step {step}, {f}; {} later kernel(s) differ too.\n",
            f.differing_after
        )),
        None => md.push_str(&format!(
            "Every kernel both dumps ran gives the same values{}.\n",
            if tolerance > 0.0 {
                format!(" (relative difference at most {tolerance})")
            } else {
                " bit for bit".into()
            }
        )),
    }
    md.push_str(
        "\n`No` rows are msprobe's verdict (Cosine < 0.99 with MaxAbsErr > 0.001, Cosine < 0.9, or MaxAbsErr > 1); the first divergence compares values themselves.\n",
    );
    let summary_path = out_dir.join("summary.md");
    dumpfmt::outfile::write(&summary_path, md.as_bytes())?;
    Ok(KernelCompareOutcome {
        tables: written,
        summary_path,
        summary_text: md,
        error_rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float16_str_is_numpys() {
        for (v, s) in [
            (2.24f32, "2.24"),
            (-0.977, "-0.977"),
            (4.48, "4.48"),
            (1.0, "1.0"),
            (65504.0, "65500.0"),
            (0.0001, "0.0001"),
            (6e-8, "6e-08"),
            (std::f32::consts::PI, "3.14"),
            (1024.5, "1024.0"),
        ] {
            assert_eq!(str_f16(f16::from_f32(v)), s);
        }
    }

    #[test]
    fn accuracy_verdicts() {
        let f = Cell::Float;
        assert_eq!(check_accuracy(&f(1.0), &f(0.0)), "Yes");
        assert_eq!(check_accuracy(&f(0.98), &f(0.01)), "No");
        assert_eq!(check_accuracy(&f(0.98), &f(0.0001)), "Yes");
        assert_eq!(check_accuracy(&f(0.5), &f(0.0)), "No");
        assert_eq!(check_accuracy(&Cell::s("unsupported"), &f(0.0)), "None");
        assert_eq!(check_accuracy(&Cell::s("N/A"), &f(0.0)), "No");
    }

    #[test]
    fn pandas_column_rules() {
        let col = scalar_column(&[
            Some(NpScalar::F32(2.2412093)),
            Some(NpScalar::Bool(true)),
            None,
        ]);
        assert_eq!(col, ["2.2412093", "True", ""]);
        let col = scalar_column(&[Some(NpScalar::F32(0.8841942)), Some(NpScalar::F64(0.5))]);
        assert_eq!(col[0], pyrepr::repr_f64(0.8841942f32 as f64));
        let col = scalar_column(&[Some(NpScalar::Int(1)), None]);
        assert_eq!(col, ["1.0", ""]);
        let col = scalar_column(&[Some(NpScalar::Int(1)), Some(NpScalar::Int(2))]);
        assert_eq!(col, ["1", "2"]);
    }
}
