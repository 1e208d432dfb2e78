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

/// Builds the tensor-mode tables of every (rank, iteration) both dumps hold (filtered by
/// `opts`); statistics-mode iterations are left out ([`compare_kernel_dumps_all`] has both).
pub fn compare_kernel_dumps(
    target: &KernelDump,
    golden: &KernelDump,
    opts: &KernelCompareOptions,
) -> Result<Vec<KernelTable>> {
    Ok(compare_kernel_dumps_all(target, golden, opts)?
        .into_iter()
        .filter_map(|t| match t {
            AnyKernelTable::Tensor(t) => Some(t),
            AnyKernelTable::Statistic(_) => None,
        })
        .collect())
}

/// Builds the table of every (rank, iteration) both dumps hold (filtered by `opts`): from the
/// tensor files where both have them, from `statistic.csv` where both have only that. An
/// iteration that one dump holds as tensors and the other as statistics is an error (msprobe
/// skips it with a log line); one that either holds neither in is left out, as msprobe does.
pub fn compare_kernel_dumps_all(
    target: &KernelDump,
    golden: &KernelDump,
    opts: &KernelCompareOptions,
) -> Result<Vec<AnyKernelTable>> {
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
        let (rank, step) = (*rank, *step);
        match (steps_mode(t_steps)?, steps_mode(g_steps)?) {
            (StepMode::Tensor, StepMode::Tensor) => {
                tables.push(AnyKernelTable::Tensor(KernelTable {
                    rank,
                    step,
                    rows: compare_steps(t_steps, g_steps)?,
                }))
            }
            (StepMode::Statistic, StepMode::Statistic) => {
                tables.push(AnyKernelTable::Statistic(StatTable {
                    rank,
                    step,
                    rows: compare_stat_steps(t_steps, g_steps)?,
                }))
            }
            (StepMode::Empty, _) | (_, StepMode::Empty) => {}
            (tm, gm) => {
                let what = |m: StepMode| match m {
                    StepMode::Tensor => "tensor files (.npy)",
                    _ => "statistic.csv only",
                };
                return Err(Error::Usage(format!(
                    "rank {rank} step {step}: the target ({}) holds {}, the golden ({}) {}; \
                     a kernel compare needs the same task (tensor or statistics) on both sides",
                    t_steps[0].dir.display(),
                    what(tm),
                    g_steps[0].dir.display(),
                    what(gm)
                )));
            }
        }
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
        match f.read() {
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
    // Each tensor's values read once (float32 in place, other dtypes widened); the
    // statistics, the checks and the difference all read them.
    let (nv, bv) = (n.as_ref().map(Vals::of), b.as_ref().map(Vals::of));
    row.npu = npu
        .zip(n.as_ref().zip(nv.as_ref()))
        .map(|(f, (t, v))| side_cells(f, t, v));
    row.bench = bench
        .zip(b.as_ref().zip(bv.as_ref()))
        .map(|(f, (t, v))| side_cells(f, t, v));
    let (Some(n), Some(b), Some(nv), Some(bv)) = (n.as_ref(), b.as_ref(), nv, bv) else {
        row.err_message = "Dump file is not ndarray.\n".into();
        return row;
    };
    // Float32 pairs: the difference and the inf/nan positions in one pass.
    let f32_pair = match (&nv, &bv) {
        (Vals::F32(x), Vals::F32(y)) => Some(f32_pair_scan(x, y)),
        _ => None,
    };
    row.value_diff = match f32_pair {
        Some((d, _)) => d,
        None => pair_vals(&nv, &bv, value_diff, value_diff, value_diff, value_diff),
    };
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
    if msg.is_empty()
        && !f32_pair.map(|(_, same)| same).unwrap_or_else(|| {
            pair_vals(
                &nv,
                &bv,
                same_inf_nan_positions,
                same_inf_nan_positions,
                same_inf_nan_positions,
                same_inf_nan_positions,
            )
        })
    {
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
fn value_diff<A: Copy + Into<f64>, B: Copy + Into<f64>>(x: &[A], y: &[B]) -> Option<f64> {
    if x.len() != y.len() {
        return None;
    }
    let (mut diff, mut scale) = (0f64, 0f64);
    for (&a, &b) in x.iter().zip(y) {
        let (a, b): (f64, f64) = (a.into(), b.into());
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

fn same_inf_nan_positions<A: Copy + Into<f64>, B: Copy + Into<f64>>(x: &[A], y: &[B]) -> bool {
    x.iter().zip(y).all(|(&a, &b)| {
        let (a, b): (f64, f64) = (a.into(), b.into());
        a.is_nan() == b.is_nan() && (a.is_infinite() == b.is_infinite())
    })
}

/// [`value_diff`] and [`same_inf_nan_positions`] of two float32 slices in one pass.
fn f32_pair_scan(x: &[f32], y: &[f32]) -> (Option<f64>, bool) {
    let s = crate::f32_scan::pair_scan(x, y);
    let d = if x.len() != y.len() {
        None
    } else if s.nonfinite_mismatch {
        Some(f64::INFINITY)
    } else {
        Some(if s.scale > 0.0 {
            s.diff / s.scale
        } else {
            s.diff
        })
    };
    (d, s.same_positions)
}

/// A tensor's values for the table: float32 read in place (no copy when the bytes are
/// aligned), every other dtype widened to float64 (empty when it has no numeric widening).
enum Vals<'a> {
    F32(std::borrow::Cow<'a, [f32]>),
    F64(Vec<f64>),
}

impl<'a> Vals<'a> {
    fn of(t: &'a Tensor) -> Vals<'a> {
        if t.dtype() == DType::F32 {
            return Vals::F32(match bytemuck::try_cast_slice::<u8, f32>(t.bytes()) {
                Ok(s) => std::borrow::Cow::Borrowed(s),
                Err(_) => std::borrow::Cow::Owned(
                    t.bytes()
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                ),
            });
        }
        Vals::F64(crate::tensor::widen_to_f64(&t.view()).unwrap_or_default())
    }

    fn is_empty(&self) -> bool {
        match self {
            Vals::F32(v) => v.is_empty(),
            Vals::F64(v) => v.is_empty(),
        }
    }
}

/// `f` on the two sides' values, whatever their kinds.
fn pair_vals<R>(
    x: &Vals<'_>,
    y: &Vals<'_>,
    ff: impl Fn(&[f32], &[f32]) -> R,
    fd: impl Fn(&[f32], &[f64]) -> R,
    df: impl Fn(&[f64], &[f32]) -> R,
    dd: impl Fn(&[f64], &[f64]) -> R,
) -> R {
    match (x, y) {
        (Vals::F32(a), Vals::F32(b)) => ff(a, b),
        (Vals::F32(a), Vals::F64(b)) => fd(a, b),
        (Vals::F64(a), Vals::F32(b)) => df(a, b),
        (Vals::F64(a), Vals::F64(b)) => dd(a, b),
    }
}

fn side_cells(f: &dumpfmt::kernel::KernelTensorFile, t: &Tensor, v: &Vals<'_>) -> SideCells {
    let (max, min, mean, norm) = if v.is_empty() {
        (None, None, None, None)
    } else {
        let typed = |x: f64| typed_scalar(t.dtype(), x);
        let ((max, min), mean, norm) = match v {
            // The float32 reductions of np_mean / np_norm, on the values in place.
            Vals::F32(v) => {
                // One pass for the extremes and the squares.
                let s = crate::f32_scan::side_scan(v);
                let extremes = if s.nan {
                    (f64::NAN, f64::NAN)
                } else {
                    (f64::from(s.max), f64::from(s.min))
                };
                let sq = s.squares;
                (
                    extremes,
                    NpScalar::F32(ulp::elem::np_mean(&v[..])),
                    NpScalar::F32((sq as f32).sqrt()),
                )
            }
            Vals::F64(v) => (extremes(v), np_mean(t.dtype(), v), np_norm(t.dtype(), v)),
        };
        (Some(typed(max)), Some(typed(min)), Some(mean), Some(norm))
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
fn extremes<T: Copy + Into<f64>>(v: &[T]) -> (f64, f64) {
    let mut max = f64::NEG_INFINITY;
    let mut min = f64::INFINITY;
    for &x in v {
        let x: f64 = x.into();
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
        msprobe_csv(&COLUMNS, self.cells(name_of))
    }

    /// Where the difference starts: the first kernel, in execution order, whose outputs differ (relative difference above
    /// `tolerance`, 0 = bit for bit, values widened so dtypes may differ) while its inputs do
    /// not. When the first differing kernel's inputs already differ and kernels only one dump
    /// has come before it (a Cast only the low-precision run has, say), the first of those is
    /// the origin.
    pub fn first_divergence(&self, tolerance: f64) -> Option<FirstDivergence> {
        let rows: Vec<DivRow<'_>> = self
            .rows
            .iter()
            .filter_map(|r| {
                let side = r.npu.as_ref().or(r.bench.as_ref())?;
                Some(DivRow {
                    op_type: &side.name.op_type,
                    op_name: &side.name.op_name,
                    io: side.name.io,
                    occurrence: r.occurrence,
                    npu_ts: r.npu.as_ref().map(|s| s.name.timestamp),
                    bench_ts: r.bench.as_ref().map(|s| s.name.timestamp),
                    differs: r.read_error.is_some()
                        || match r.value_diff {
                            Some(d) => d > tolerance,
                            None => r.npu.is_some() && r.bench.is_some(),
                        },
                })
            })
            .collect();
        first_divergence_of(&rows)
    }
}

/// One row as the first-divergence search sees it (tensor or statistics mode).
/// A table as msprobe's graph-mode comparator writes it (pandas `to_csv`: `\n` line ends, no
/// byte-order mark); formula cells get a leading `'` as in every CSV numprobe writes.
fn msprobe_csv<const N: usize>(columns: &[&str; N], rows: Vec<[String; N]>) -> String {
    let mut out = String::new();
    pyrepr::write_csv_record(columns.iter(), "\n", &mut out);
    for row in rows {
        pyrepr::write_csv_record(row.iter(), "\n", &mut out);
    }
    out
}

struct DivRow<'a> {
    op_type: &'a str,
    op_name: &'a str,
    io: dumpfmt::kernel::Io,
    occurrence: usize,
    npu_ts: Option<u64>,
    bench_ts: Option<u64>,
    /// The two sides disagree (or one could not be read).
    differs: bool,
}

fn first_divergence_of(all: &[DivRow<'_>]) -> Option<FirstDivergence> {
    // Kernel occurrences with their rows.
    let mut kernels: BTreeMap<(String, usize), Vec<&DivRow<'_>>> = BTreeMap::new();
    for r in all {
        kernels
            .entry((r.op_name.to_owned(), r.occurrence))
            .or_default()
            .push(r);
    }
    // Execution order: a synchronous dump writes each kernel's files as it runs, so the
    // timestamps are the order (MindSpore's execution-order file numbers ops differently
    // from the file names). Kernels only the golden ran slot in after the matched kernel
    // that precedes them in the golden's own order.
    let first_ts = |rows: &[&DivRow<'_>], npu: bool| {
        rows.iter()
            .filter_map(|r| if npu { r.npu_ts } else { r.bench_ts })
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
    let is_parameter = |rows: &[&DivRow<'_>]| rows.iter().any(|r| r.op_type == "Parameter");
    let one_sided = |rows: &[&DivRow<'_>]| {
        rows.iter().all(|r| r.npu_ts.is_none()) || rows.iter().all(|r| r.bench_ts.is_none())
    };
    let describe =
        |(op, occ): &(String, usize), rows: &[&DivRow<'_>], why: Origin| FirstDivergence {
            op_type: rows.first().map(|r| r.op_type).unwrap_or("").to_owned(),
            op_name: op.clone(),
            occurrence: *occ,
            why,
            differing_after: 0,
        };
    let mut first_one_sided: Option<FirstDivergence> = None;
    let mut found: Option<FirstDivergence> = None;
    let mut differing_after = 0usize;
    for (k, rows) in &ordered {
        if one_sided(rows) {
            if first_one_sided.is_none() && found.is_none() {
                let why = if rows.iter().all(|r| r.bench_ts.is_none()) {
                    Origin::OnlyInTarget
                } else {
                    Origin::OnlyInGolden
                };
                first_one_sided = Some(describe(k, rows, why));
            }
            continue;
        }
        let out_differs = rows
            .iter()
            .any(|r| r.differs && r.npu_ts.is_some() && r.io == dumpfmt::kernel::Io::Output);
        if !out_differs {
            continue;
        }
        if found.is_some() {
            differing_after += 1;
            continue;
        }
        let in_differs = rows.iter().any(|r| {
            r.io == dumpfmt::kernel::Io::Input
                && (r.differs || r.npu_ts.is_none() || r.bench_ts.is_none())
        });
        // A differing graph input (MindSpore's `Parameter.inputs{N}` files) explains a first
        // kernel whose inputs differ already.
        let graph_input = || {
            ordered.iter().find(|((op, _), rows)| {
                op.starts_with("inputs")
                    && is_parameter(rows)
                    && !one_sided(rows)
                    && rows.iter().any(|r| r.differs)
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

/// The table's columns in statistics mode (both dumps hold `statistic.csv`, no tensor files),
/// as msprobe's graph-mode comparator writes them.
pub const STAT_COLUMNS: [&str; 26] = [
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
    "Max diff",
    "Min diff",
    "Mean diff",
    "L2norm diff",
    "MaxRelativeErr",
    "MinRelativeErr",
    "MeanRelativeErr",
    "NormRelativeErr",
    "NPU CSV File",
    "Bench CSV File",
];

/// The `statistic.csv` columns msprobe reads as max, min, mean and l2norm.
const STAT_VALUE_COLUMNS: [&str; 4] = ["Max Value", "Min Value", "Avg Value", "L2Norm Value"];

/// msprobe's pass mark for a statistics row: `Max diff / (max(NPU max, Bench max) + 1e-10)`
/// at most this.
const MAGNITUDE: f64 = 0.5;

/// One side of a statistics row: a `statistic.csv` row and the four values msprobe takes from
/// it.
#[derive(Clone, Debug, PartialEq)]
pub struct StatSide {
    /// The `statistic.csv` the row comes from.
    pub csv: PathBuf,
    pub row: dumpfmt::kernel::StatisticRow,
    /// max, min, mean, l2norm as msprobe reads them (`null` and `False` as 0, `True` as 1, an
    /// absent column as NaN), rounded to float32 as its comparator does.
    pub values: [f32; 4],
    /// The same before rounding (numprobe's first divergence).
    pub exact: [f64; 4],
}

/// One row of a statistics-mode table.
#[derive(Clone, Debug, PartialEq)]
pub struct StatRow {
    /// Op name, task id, input/output and slot (msprobe's key in this mode, and its `Name`
    /// cells), and the occurrence number in time order.
    pub key: String,
    pub occurrence: usize,
    pub npu: Option<StatSide>,
    pub bench: Option<StatSide>,
    /// `Yes`, `No`, or empty when the pair was not compared.
    pub accuracy: String,
    pub err_message: String,
    /// NPU minus Bench for max, min, mean, l2norm (float32), when compared.
    pub diffs: Option<[f32; 4]>,
    /// The four relative-error cells (`12.5%`, `N/A` for a zero Bench value, `Nan`).
    pub relative: Option<[String; 4]>,
    /// The largest difference of the four statistics relative to the golden's largest
    /// magnitude (NaN agreeing with NaN); `None` when the shapes differ or a side is missing.
    pub value_diff: Option<f64>,
}

impl StatRow {
    pub fn is_error(&self) -> bool {
        self.accuracy == "No"
    }
}

/// A statistics-mode table: a rank and an iteration of both dumps.
#[derive(Clone, Debug, PartialEq)]
pub struct StatTable {
    pub rank: u32,
    pub step: u64,
    pub rows: Vec<StatRow>,
}

/// What a (rank, iteration) of a kernel dump holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepMode {
    /// `.npy` tensor files.
    Tensor,
    /// `statistic.csv` and no tensor file.
    Statistic,
    /// Neither.
    Empty,
}

/// A kernel compare's table for one (rank, iteration), in the mode both dumps share.
#[derive(Clone, Debug, PartialEq)]
pub enum AnyKernelTable {
    Tensor(KernelTable),
    Statistic(StatTable),
}

impl AnyKernelTable {
    pub fn rank_step(&self) -> (u32, u64) {
        match self {
            AnyKernelTable::Tensor(t) => (t.rank, t.step),
            AnyKernelTable::Statistic(t) => (t.rank, t.step),
        }
    }
}

/// The mode of a group of step folders: tensors when any folder has a tensor file (msprobe
/// reads `statistic.csv` only where no `.npy` is), else statistics when any has a
/// `statistic.csv`.
fn steps_mode(steps: &[KernelStep]) -> Result<StepMode> {
    let mut mode = StepMode::Empty;
    for s in steps {
        let c = s.contents()?;
        if !c.tensors.is_empty() || !c.unparsed.is_empty() {
            return Ok(StepMode::Tensor);
        }
        if c.statistics.is_some() {
            mode = StepMode::Statistic;
        }
    }
    Ok(mode)
}

/// msprobe's reading of a statistic cell: `null` and `False` as 0, `True` as 1, then Python's
/// `float()`; anything else stops its comparator, and is an error here naming the place.
fn msprobe_stat_value(
    csv: &Path,
    row: &dumpfmt::kernel::StatisticRow,
    column: &str,
) -> Result<f64> {
    let Some(text) = row.values.get(column) else {
        return Ok(f64::NAN);
    };
    match text.as_str() {
        "null" | "False" => Ok(0.0),
        "True" => Ok(1.0),
        t => pyrepr::python_float(t).ok_or_else(|| {
            Error::Format(format!(
                "{}: line {}: {column} {t:?} is not a number",
                csv.display(),
                row.line
            ))
        }),
    }
}

type NumberedStats = BTreeMap<(String, usize), StatSide>;

fn numbered_stats(steps: &[KernelStep]) -> Result<NumberedStats> {
    let mut sides = Vec::new();
    for s in steps {
        let Some(rows) = s.contents()?.statistics else {
            continue;
        };
        let csv = s.dir.join("statistic.csv");
        for row in rows {
            let mut exact = [0f64; 4];
            for (v, col) in exact.iter_mut().zip(STAT_VALUE_COLUMNS) {
                *v = msprobe_stat_value(&csv, &row, col)?;
            }
            sides.push(StatSide {
                csv: csv.clone(),
                values: exact.map(|x| x as f32),
                exact,
                row,
            });
        }
    }
    // Occurrences of a key numbered in time order (stable for equal timestamps).
    sides.sort_by_key(|s| s.row.timestamp);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeMap::new();
    for s in sides {
        let key = s.row.compare_key();
        let n = seen.entry(key.clone()).or_insert(0);
        out.insert((key, *n), s);
        *n += 1;
    }
    Ok(out)
}

fn compare_stat_steps(target: &[KernelStep], golden: &[KernelStep]) -> Result<Vec<StatRow>> {
    let (mut t, mut g) = (numbered_stats(target)?, numbered_stats(golden)?);
    let mut keys: Vec<(String, usize)> = t.keys().chain(g.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    Ok(keys
        .into_iter()
        .map(|k| {
            let (npu, bench) = (t.remove(&k), g.remove(&k));
            stat_row(k, npu, bench)
        })
        .collect())
}

/// `str(abs(q * 100)) + "%"` of msprobe (numpy 1.x: the float32 quotient times a Python int
/// is a float64), `N/A` for a zero denominator, `Nan` for a NaN quotient.
fn relative_cell(diff: f32, bench: f32) -> String {
    if bench == 0.0 {
        return "N/A".into();
    }
    let q = diff / bench;
    if q.is_nan() {
        return "Nan".into();
    }
    format!("{}%", pyrepr::repr_f64((q as f64 * 100.0).abs()))
}

fn stat_row(
    (key, occurrence): (String, usize),
    npu: Option<StatSide>,
    bench: Option<StatSide>,
) -> StatRow {
    // msprobe's checks (statistics_data_check), in its order and words. A missing side's
    // shape and dtype are NaN there: not empty, and unequal to anything.
    fn shape(s: &Option<StatSide>) -> Option<&str> {
        s.as_ref().map(|s| s.row.shape_text.as_str())
    }
    fn dtype(s: &Option<StatSide>) -> Option<&str> {
        s.as_ref().map(|s| s.row.data_type.as_str())
    }
    let mut msg = String::new();
    if shape(&npu) == Some("") || shape(&bench) == Some("") {
        msg.push_str("This is type of scalar data, can not compare.\n");
    } else if shape(&npu).is_none() || shape(&npu) != shape(&bench) {
        msg.push_str("Tensor shapes do not match.\n");
    }
    if dtype(&npu).is_none() || dtype(&npu) != dtype(&bench) {
        msg.push_str("Dtype of NPU and bench Tensor do not match. Skipped.\n");
    }
    let value_diff = match (&npu, &bench) {
        (Some(n), Some(b)) if n.row.shape == b.row.shape => value_diff(&n.exact, &b.exact),
        _ => None,
    };
    let mut row = StatRow {
        key,
        occurrence,
        npu,
        bench,
        accuracy: String::new(),
        err_message: msg,
        diffs: None,
        relative: None,
        value_diff,
    };
    if !row.err_message.is_empty() {
        return row;
    }
    let (Some(n), Some(b)) = (&row.npu, &row.bench) else {
        return row;
    };
    let (n, b) = (n.values, b.values);
    let diffs = [n[0] - b[0], n[1] - b[1], n[2] - b[2], n[3] - b[3]];
    row.relative = Some([0, 1, 2, 3].map(|i| relative_cell(diffs[i], b[i])));
    // Python's max() of the two float32 maxima keeps the first unless the second is greater;
    // adding 1e-10 makes it a float64.
    let larger = if b[0] > n[0] { b[0] } else { n[0] };
    let magnitude = if n[0].is_nan() && b[0].is_nan() {
        0.0
    } else {
        diffs[0] as f64 / (larger as f64 + 1e-10)
    };
    row.accuracy = if magnitude <= MAGNITUDE { "Yes" } else { "No" }.into();
    row.diffs = Some(diffs);
    row
}

/// A cell of a float column of msprobe's statistics table. pandas infers each column from its
/// numpy float32 scalars: all float32 (NaN included) stays a float32 column, written with each
/// value's `str` (`2.2412093`); float32 mixed with missing cells (`None`, rows not compared)
/// becomes float64, written widened (`2.241209268569946`). NaN and missing are empty, ±inf
/// msprobe's ` inf` / ` -inf`.
fn float_cell(x: Option<f32>, widened: bool) -> String {
    match x {
        None => String::new(),
        Some(x) if x.is_nan() => String::new(),
        Some(x) => inf_text(x as f64).unwrap_or_else(|| {
            if widened {
                pyrepr::repr_f64(x as f64)
            } else {
                pyrepr::str_f32(x)
            }
        }),
    }
}

impl StatTable {
    /// The table's rows as the CSV's cells, `name_of` turning a `statistic.csv` path into the
    /// text the `CSV File` columns show.
    pub fn cells(&self, name_of: &dyn Fn(&Path) -> String) -> Vec<[String; 26]> {
        let diffs_widened = self.rows.iter().any(|r| r.diffs.is_none());
        self.rows
            .iter()
            .map(|r| {
                let (n, b) = (r.npu.as_ref(), r.bench.as_ref());
                let name = |s: Option<&StatSide>| s.map(|_| r.key.clone()).unwrap_or_default();
                let dtype =
                    |s: Option<&StatSide>| s.map(|s| s.row.data_type.clone()).unwrap_or_default();
                // msprobe writes shapes with `[` `]` for `(` `)`; a missing side's NaN as `nan`.
                let shape = |s: Option<&StatSide>| match s {
                    Some(s) => s.row.shape_text.replace('(', "[").replace(')', "]"),
                    None => "nan".into(),
                };
                // Every row has its four values (NaN for a missing side): float32 columns.
                let value = |s: Option<&StatSide>, i: usize| {
                    float_cell(Some(s.map_or(f32::NAN, |s| s.values[i])), false)
                };
                let diff = |i: usize| float_cell(r.diffs.map(|d| d[i]), diffs_widened);
                let rel = |i: usize| {
                    r.relative
                        .as_ref()
                        .map(|v| v[i].clone())
                        .unwrap_or_default()
                };
                let csv = |s: Option<&StatSide>| s.map(|s| name_of(&s.csv)).unwrap_or_default();
                [
                    name(n),
                    name(b),
                    dtype(n),
                    dtype(b),
                    shape(n),
                    shape(b),
                    value(n, 0),
                    value(n, 1),
                    value(n, 2),
                    value(n, 3),
                    value(b, 0),
                    value(b, 1),
                    value(b, 2),
                    value(b, 3),
                    r.accuracy.clone(),
                    r.err_message.clone(),
                    diff(0),
                    diff(1),
                    diff(2),
                    diff(3),
                    rel(0),
                    rel(1),
                    rel(2),
                    rel(3),
                    csv(n),
                    csv(b),
                ]
            })
            .collect()
    }

    /// The table as msprobe's CSV (pandas `to_csv`: `\n` line ends, no byte-order mark).
    pub fn to_csv(&self, name_of: &dyn Fn(&Path) -> String) -> String {
        msprobe_csv(&STAT_COLUMNS, self.cells(name_of))
    }

    /// As [`KernelTable::first_divergence`], on the statistics: a kernel's outputs differ
    /// when any of their statistics differs by more than `tolerance` relative to the golden's
    /// largest one (shapes must agree), its inputs agree when all of theirs do. Statistics
    /// that agree cannot prove the tensors do; the kernel named is the first the statistics
    /// can see.
    pub fn first_divergence(&self, tolerance: f64) -> Option<FirstDivergence> {
        let rows: Vec<DivRow<'_>> = self
            .rows
            .iter()
            .filter_map(|r| {
                let side = r.npu.as_ref().or(r.bench.as_ref())?;
                Some(DivRow {
                    op_type: &side.row.op_type,
                    op_name: &side.row.op_name,
                    io: side.row.io,
                    occurrence: r.occurrence,
                    npu_ts: r.npu.as_ref().map(|s| s.row.timestamp),
                    bench_ts: r.bench.as_ref().map(|s| s.row.timestamp),
                    differs: match r.value_diff {
                        Some(d) => d > tolerance,
                        None => r.npu.is_some() && r.bench.is_some(),
                    },
                })
            })
            .collect();
        first_divergence_of(&rows)
    }
}

/// What [`run_kernel_compare`] wrote.
#[derive(Clone, Debug)]
pub struct KernelCompareOutcome {
    /// Tensor-mode tables and where they were written.
    pub tables: Vec<(KernelTable, PathBuf)>,
    /// Statistics-mode tables (from `statistic.csv`) and where they were written.
    pub stat_tables: Vec<(StatTable, PathBuf)>,
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
    let tables = compare_kernel_dumps_all(&t, &g, opts)?;
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
    let mut stat_written = Vec::new();
    for table in tables {
        let (rank, step) = table.rank_step();
        let path = out_dir.join(format!("compare_result_{rank}_{step}_{ts}.csv"));
        // rows, Yes, No, one side only, first divergence
        let (csv, counts, first) = match &table {
            AnyKernelTable::Tensor(t) => {
                let count = |f: &dyn Fn(&KernelRow) -> bool| t.rows.iter().filter(|r| f(r)).count();
                (
                    t.to_csv(&|p| abs(p)),
                    [
                        t.rows.len(),
                        count(&|r| r.accuracy.as_deref() == Some("Yes")),
                        count(&|r| r.is_error()),
                        count(&|r| r.npu.is_none() || r.bench.is_none()),
                    ],
                    t.first_divergence(tolerance),
                )
            }
            AnyKernelTable::Statistic(t) => {
                let count = |f: &dyn Fn(&StatRow) -> bool| t.rows.iter().filter(|r| f(r)).count();
                (
                    t.to_csv(&|p| abs(p)),
                    [
                        t.rows.len(),
                        count(&|r| r.accuracy == "Yes"),
                        count(&|r| r.is_error()),
                        count(&|r| r.npu.is_none() || r.bench.is_none()),
                    ],
                    t.first_divergence(tolerance),
                )
            }
        };
        dumpfmt::outfile::write(&path, csv.as_bytes())?;
        let [rows, yes, errors, one_sided] = counts;
        error_rows += errors;
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            rank,
            step,
            path.file_name().unwrap_or_default().to_string_lossy(),
            rows,
            yes,
            errors,
            rows - yes - errors - one_sided,
            one_sided,
            match &first {
                Some(f) => format!("{} `{}`", f.op_type, f.op_name),
                None => "none".into(),
            }
        ));
        if first_overall.is_none()
            && let Some(f) = first
        {
            first_overall = Some((rank, step, f));
        }
        match table {
            AnyKernelTable::Tensor(t) => written.push((t, path)),
            AnyKernelTable::Statistic(t) => stat_written.push((t, path)),
        }
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
    if !written.is_empty() {
        md.push_str(
            "\n`No` rows are msprobe's verdict (Cosine < 0.99 with MaxAbsErr > 0.001, Cosine < 0.9, or MaxAbsErr > 1); the first divergence compares values themselves.\n",
        );
    }
    if !stat_written.is_empty() {
        md.push_str(
            "\nStatistics mode (statistic.csv on both sides): `No` rows are msprobe's verdict (Max diff / max(NPU max, Bench max) above 0.5); the first divergence compares the four statistics (max, min, mean, l2norm), which can agree while tensors differ.\n",
        );
    }
    let summary_path = out_dir.join("summary.md");
    dumpfmt::outfile::write(&summary_path, md.as_bytes())?;
    Ok(KernelCompareOutcome {
        tables: written,
        stat_tables: stat_written,
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

    fn stat_side(shape: &str, dtype: &str, values: [&str; 4]) -> StatSide {
        let mut row = dumpfmt::kernel::StatisticRow {
            op_type: "MatMul".into(),
            op_name: "Default_MatMul-op0".into(),
            task_id: 0,
            stream_id: 0,
            timestamp: 1,
            io: dumpfmt::kernel::Io::Output,
            slot: 0,
            data_size: 24,
            data_type: dtype.into(),
            shape: vec![2, 3],
            shape_text: shape.into(),
            line: 2,
            values: BTreeMap::new(),
        };
        for (c, v) in STAT_VALUE_COLUMNS.iter().zip(values) {
            row.values.insert((*c).to_owned(), v.to_owned());
        }
        let csv = PathBuf::from("statistic.csv");
        let mut exact = [0f64; 4];
        for (x, c) in exact.iter_mut().zip(STAT_VALUE_COLUMNS) {
            *x = msprobe_stat_value(&csv, &row, c).unwrap();
        }
        StatSide {
            csv,
            values: exact.map(|x| x as f32),
            exact,
            row,
        }
    }

    fn key() -> (String, usize) {
        ("Default_MatMul-op0.0.output.0".into(), 0)
    }

    #[test]
    fn statistics_rows_follow_msprobes_rules() {
        let n = stat_side("(2,3)", "float32", ["3.3", "-1", "0.5", "null"]);
        let b = stat_side("(2,3)", "float32", ["1.1", "0", "0.5", "2"]);
        let r = stat_row(key(), Some(n.clone()), Some(b.clone()));
        assert_eq!(r.err_message, "");
        // null reads as 0; the relative error is float32 / float32, times 100 in float64.
        assert_eq!(n.values[3], 0.0);
        let rel = r.relative.clone().unwrap();
        assert_eq!(
            rel[0],
            format!(
                "{}%",
                pyrepr::repr_f64((((3.3f32 - 1.1f32) / 1.1f32) as f64 * 100.0).abs())
            )
        );
        assert_eq!(rel[1], "N/A", "zero bench min");
        assert_eq!(rel[2], "0.0%");
        assert_eq!(rel[3], "100.0%");
        // Max diff 2.2 over max 3.3: 0.67 > 0.5.
        assert_eq!(r.accuracy, "No");
        // A smaller target maximum gives a negative difference: always within the mark.
        let r = stat_row(key(), Some(b.clone()), Some(n.clone()));
        assert_eq!(r.accuracy, "Yes");
        assert_eq!(r.diffs.unwrap()[0], 1.1f32 - 3.3f32);
        let cells = StatTable {
            rank: 0,
            step: 0,
            rows: vec![r],
        }
        .cells(&|p| p.display().to_string());
        assert_eq!(cells[0][4], "[2,3]");
        assert_eq!(cells[0][6], "1.1");
        assert_eq!(cells[0][16], pyrepr::str_f32(1.1f32 - 3.3f32));
        // Beside a row not compared, the difference column is float64.
        let two = StatTable {
            rank: 0,
            step: 0,
            rows: vec![
                stat_row(key(), Some(b.clone()), Some(n.clone())),
                stat_row(key(), None, Some(b.clone())),
            ],
        }
        .cells(&|p| p.display().to_string());
        assert_eq!(two[0][16], pyrepr::repr_f64((1.1f32 - 3.3f32) as f64));
        assert_eq!((two[1][16].as_str(), two[1][6].as_str()), ("", ""));
        assert_eq!(cells[0][24], "statistic.csv");
        // NaN maxima on both sides agree; a NaN quotient is `Nan`.
        let nan = stat_side("(2,3)", "float32", ["nan", "nan", "1", "1"]);
        let r = stat_row(key(), Some(nan.clone()), Some(nan));
        assert_eq!(r.accuracy, "Yes");
        assert_eq!(r.relative.unwrap()[0], "Nan");
    }

    #[test]
    fn statistics_rows_that_msprobe_does_not_compare() {
        let b = stat_side("(2,3)", "float32", ["1", "0", "0.5", "2"]);
        // One side only: its shape and dtype are NaN in msprobe's table.
        let r = stat_row(key(), None, Some(b.clone()));
        assert_eq!(
            r.err_message,
            "Tensor shapes do not match.\nDtype of NPU and bench Tensor do not match. Skipped.\n"
        );
        assert_eq!((r.accuracy.as_str(), r.diffs), ("", None));
        let cells = StatTable {
            rank: 0,
            step: 0,
            rows: vec![r],
        }
        .cells(&|p| p.display().to_string());
        assert_eq!(
            (cells[0][0].as_str(), cells[0][1].as_str()),
            ("", "Default_MatMul-op0.0.output.0")
        );
        assert_eq!((cells[0][4].as_str(), cells[0][6].as_str()), ("nan", ""));
        // An empty shape is msprobe's scalar; another dtype is skipped.
        let s = stat_side("", "float16", ["1", "0", "0.5", "2"]);
        let r = stat_row(key(), Some(s), Some(b));
        assert_eq!(
            r.err_message,
            "This is type of scalar data, can not compare.\nDtype of NPU and bench Tensor do not match. Skipped.\n"
        );
        // A cell that is no number stops msprobe; here it is an error naming the place.
        let mut bad = stat_side("(2,3)", "float32", ["1", "0", "0.5", "2"]).row;
        bad.values.insert("Max Value".into(), "abc".into());
        let e = msprobe_stat_value(Path::new("x/statistic.csv"), &bad, "Max Value")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x/statistic.csv: line 2: Max Value \"abc\""),
            "{e}"
        );
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
