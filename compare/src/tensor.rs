//! Tensor mode: msprobe's validation chain and its six metrics (spec 5.2), computed in one
//! pass over the two tensors' bytes, chunked and merged so any size streams on all cores.
//!
//! The tensors come as [`TensorView`]s; [`compare_tensors`] runs on the CPU,
//! [`compare_tensors_on`] on the backend of an [`Engine`].

/// `EucDist` in OpenBLAS's summation order.
mod euc;
/// Where the metrics run (CPU, or the GPU with feature `gpu`).
pub mod gpu;

pub use euc::default_blas_threads;

pub use gpu::Engine;

use dumpfmt::pt::{Stored, StridedTensor};
use half::f16;
use half::slice::HalfFloatSliceExt;
use numprobe_tensor::{DType, TensorView, bf16, float8};
use rayon::prelude::*;
use std::ops::Range;

use crate::cell::Cell;
use crate::pyfmt::{fmt12, round_places};

/// Whether the metrics read tensors of `dtype`: bool, the signed integers, uint8 and the real
/// floats, the dtypes msprobe's numpy path computes on (bfloat16 and float8 widened to float32
/// first, as msprobe does before numpy sees them). Rows of the others (complex, wider unsigned)
/// are `error` rows saying so ([`TensorResult::uncompared_dtype`]).
pub fn is_compared(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Bool
            | DType::U8
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::F16
            | DType::BF16
            | DType::F8E4M3FN
            | DType::F8E5M2
            | DType::F32
            | DType::F64
    )
}

/// The numpy dtype msprobe computes on for a tensor stored as `dtype`: bfloat16 and float8
/// become float32 when the file is read (numpy has neither); every other dtype stays.
fn numpy_dtype(dtype: DType) -> DType {
    match dtype {
        DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 => DType::F32,
        other => other,
    }
}

/// A tensor the metrics read: the view, and whether its bytes are a read-only file mapping,
/// whose pages already compared may be handed back to the kernel (resident memory stays
/// bounded on tensors far larger than RAM).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand<'a> {
    pub(crate) view: TensorView<'a>,
    pub(crate) mapped: bool,
}

impl<'a> Operand<'a> {
    /// A tensor in ordinary memory.
    pub(crate) fn in_memory(view: TensorView<'a>) -> Operand<'a> {
        Operand {
            view,
            mapped: false,
        }
    }

    fn dtype(&self) -> DType {
        self.view.dtype()
    }

    fn bytes(&self) -> &'a [u8] {
        self.view.bytes()
    }

    /// Element `i` as f64 (exact for every float type; ints as numpy's `astype(float)`).
    /// Reads bytes, so a hand-made file's unaligned payload reads too.
    #[inline]
    fn get(&self, i: usize) -> f64 {
        let s = self.dtype().size();
        let b = &self.bytes()[i * s..i * s + s];
        match self.dtype() {
            DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::F8E4M3FN => f64::from(float8::e4m3fn_to_f32(b[0])),
            DType::F8E5M2 => f64::from(float8::e5m2_to_f32(b[0])),
            DType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
            DType::I8 => b[0] as i8 as f64,
            DType::U8 => b[0] as f64,
            DType::Bool => (b[0] != 0) as u8 as f64,
            DType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
            DType::I32 => i32::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::U16 => u16::from_le_bytes([b[0], b[1]]) as f64,
            DType::U32 => u32::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::U64 => u64::from_le_bytes(b.try_into().unwrap()) as f64,
            other => unreachable!("{other:?} has no real value (complex)"),
        }
    }

    fn get_i64(&self, i: usize) -> i64 {
        let s = self.dtype().size();
        let b = &self.bytes()[i * s..i * s + s];
        match self.dtype() {
            DType::I8 => b[0] as i8 as i64,
            DType::U8 => b[0] as i64,
            DType::Bool => (b[0] != 0) as i64,
            DType::I16 => i16::from_le_bytes([b[0], b[1]]) as i64,
            DType::I32 => i32::from_le_bytes(b.try_into().unwrap()) as i64,
            DType::I64 => i64::from_le_bytes(b.try_into().unwrap()),
            _ => self.get(i) as i64,
        }
    }
}

/// One side of a pair as the metrics read it: C-order bytes (a file mapping, or memory), or a
/// strided `.pt` view (sliced, transposed, broadcast with stride 0) read through its strides.
/// A strided side is never gathered whole: each chunk of the pass reads the same logical
/// element range of both sides (a view's range gathered into a per-thread buffer of one
/// chunk), so memory stays bounded by the chunk size whatever the view's element count, and
/// the cells are those of the gathered view, bit for bit.
#[derive(Clone, Copy)]
pub struct Side<'a>(Repr<'a>);

#[derive(Clone, Copy)]
enum Repr<'a> {
    Dense(Operand<'a>),
    Strided(&'a StridedTensor),
}

impl<'a> Side<'a> {
    /// A C-order tensor in memory.
    pub fn view(view: TensorView<'a>) -> Side<'a> {
        Side(Repr::Dense(Operand::in_memory(view)))
    }

    /// A strided view, read a range at a time.
    pub fn strided(t: &'a StridedTensor) -> Side<'a> {
        Side(Repr::Strided(t))
    }

    /// A tensor as [`dumpfmt::pt::open`] or [`dumpfmt::tensor::open_tensor`] gives it; the pages
    /// of a mapped C-order file are handed back once compared.
    pub fn stored(s: &'a Stored) -> Side<'a> {
        match s {
            Stored::Dense(t) => Side(Repr::Dense(Operand {
                view: t.view(),
                mapped: t.is_mapped(),
            })),
            Stored::Strided(t) => Side::strided(t),
        }
    }

    #[cfg(feature = "gpu")]
    fn dense(op: Operand<'a>) -> Side<'a> {
        Side(Repr::Dense(op))
    }

    pub fn dtype(&self) -> DType {
        match &self.0 {
            Repr::Dense(o) => o.dtype(),
            Repr::Strided(t) => t.dtype(),
        }
    }

    pub fn shape(&self) -> &[usize] {
        match &self.0 {
            Repr::Dense(o) => o.view.shape(),
            Repr::Strided(t) => t.shape(),
        }
    }

    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// Both sides as C-order operands (no strided side).
    fn operands<'s>(
        n: &'s Side<'a>,
        b: &'s Side<'a>,
    ) -> Option<(&'s Operand<'a>, &'s Operand<'a>)> {
        match (&n.0, &b.0) {
            (Repr::Dense(x), Repr::Dense(y)) => Some((x, y)),
            _ => None,
        }
    }
}

thread_local! {
    /// Per-thread buffers of the gathered ranges of strided sides (one chunk each).
    static GATHERED: std::cell::Cell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// Calls `f` with elements `range` of both sides as operands, and the range to read in them:
/// the operands and `range` themselves when both sides are C-order (the path every plain dump
/// takes, unchanged), else each side's elements `range` as a 1-d operand read over
/// `0..range.len()` (a strided side gathered into this thread's buffer, a C-order side
/// borrowed). The metrics depend only on the values and on each element's place relative to
/// the range's start, so both ways give the same bits.
#[inline(always)]
fn with_pair<R>(
    n: &Side,
    b: &Side,
    range: Range<usize>,
    f: impl FnOnce(&Operand, &Operand, Range<usize>) -> R,
) -> R {
    if let Some((x, y)) = Side::operands(n, b) {
        return f(x, y, range);
    }
    let (mut xbuf, mut ybuf) = GATHERED.take();
    let shape = [range.len()];
    let r = {
        let x = range_operand(n, range.clone(), &mut xbuf, &shape);
        let y = range_operand(b, range.clone(), &mut ybuf, &shape);
        f(&x, &y, 0..range.len())
    };
    GATHERED.set((xbuf, ybuf));
    r
}

/// Elements `range` of `side` as a 1-d operand of `shape` (`[range.len()]`).
fn range_operand<'s>(
    side: &Side<'s>,
    range: Range<usize>,
    buf: &'s mut Vec<u8>,
    shape: &'s [usize],
) -> Operand<'s> {
    match &side.0 {
        Repr::Dense(o) => {
            let sz = o.dtype().size();
            let bytes = &o.bytes()[range.start * sz..range.end * sz];
            Operand {
                view: TensorView::new(o.dtype(), shape, bytes).expect("whole elements"),
                mapped: o.mapped,
            }
        }
        Repr::Strided(t) => {
            t.read_range(range, buf);
            let bytes: &'s [u8] = buf;
            Operand::in_memory(TensorView::new(t.dtype(), shape, bytes).expect("whole elements"))
        }
    }
}

/// `np.squeeze`: drop every length-1 axis.
pub fn squeeze(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// Names of the metric columns, in table order.
pub const METRIC_COLUMNS: [&str; 6] = [
    "Cosine",
    "EucDist",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
];

/// Metrics of one tensor pair as msprobe writes them, plus its (pre-judgement) message.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorResult {
    pub values: [Cell; 6],
    pub err_msg: String,
    pub error_flag: bool,
}

/// Why a row has no metrics (msprobe's error values and the texts they become).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoMetrics {
    /// The NPU leaf has no tensor file (`-1`).
    NpuNoData,
    /// The bench leaf has no tensor file.
    BenchNoData,
    /// No bench row matched.
    Unmatched,
    /// A file is missing or unreadable.
    ReadFailed,
}

impl TensorResult {
    fn filled(text: &str, msg: &str, flag: bool) -> TensorResult {
        TensorResult {
            values: std::array::from_fn(|_| Cell::s(text)),
            err_msg: msg.to_string(),
            error_flag: flag,
        }
    }

    pub fn no_metrics(why: NoMetrics, detail: &str) -> TensorResult {
        let msg = match why {
            NoMetrics::NpuNoData => "NPU does not have data file.".to_string(),
            NoMetrics::BenchNoData => "Bench does not have data file.".to_string(),
            NoMetrics::Unmatched => "Bench api/module unmatched.".to_string(),
            NoMetrics::ReadFailed => {
                format!("{READ_FAILED_PREFIX}{detail} not found or read failed.")
            }
        };
        TensorResult::filled("unsupported", &msg, true)
    }

    /// A row whose tensor file `data_name` could not be read (`why` names the file and the
    /// problem): msprobe's message, then numprobe's reason.
    pub fn read_failed(data_name: &str, why: &str) -> TensorResult {
        let mut r = TensorResult::no_metrics(NoMetrics::ReadFailed, data_name);
        r.err_msg = format!("{} {why}", r.err_msg);
        r
    }

    /// Whether this row's tensors could not be read. Decided from the message, which is what
    /// the resume journal keeps, so a resumed row is judged as a fresh one.
    pub fn is_read_failure(&self) -> bool {
        is_read_failure_message(&self.err_msg)
    }
}

/// Start of msprobe's message for a tensor file it could not read
/// (`Dump file: {file} not found or read failed.`).
pub const READ_FAILED_PREFIX: &str = "Dump file: ";

/// Whether a metric message says the row's tensors could not be read.
pub fn is_read_failure_message(msg: &str) -> bool {
    msg.starts_with(READ_FAILED_PREFIX) && msg.contains(" not found or read failed")
}

/// Start of the message of a row whose tensor was read but has a dtype the metrics do not
/// take. msprobe has no message for this case (it turns float8 into float32 and hands the
/// others to numpy as they are), so the wording is numprobe's; it must not say "not found or
/// read failed", which is false.
pub const UNCOMPARED_DTYPE_PREFIX: &str = "Dtype not compared: ";

/// Whether a metric message says a tensor's dtype is not compared.
pub fn is_uncompared_dtype_message(msg: &str) -> bool {
    msg.starts_with(UNCOMPARED_DTYPE_PREFIX)
}

/// Whether a row has no metrics because a tensor could not be read or is of a dtype the
/// metrics do not take: never agreement, always an `error` row.
pub fn is_not_compared_message(msg: &str) -> bool {
    is_read_failure_message(msg) || is_uncompared_dtype_message(msg)
}

impl TensorResult {
    /// A row whose `side` ("target" or "golden") tensor `data_name` was read but is of a dtype
    /// that [`is_compared`] refuses.
    pub fn uncompared_dtype(side: &str, data_name: &str, dtype: DType) -> TensorResult {
        TensorResult::filled(
            "unsupported",
            &format!(
                "{UNCOMPARED_DTYPE_PREFIX}{side} {data_name} is {}; {COMPARED_DTYPES}.",
                dtype.numpy_name()
            ),
            true,
        )
    }
}

/// The dtypes the metrics take, in words, for the messages of the others.
const COMPARED_DTYPES: &str =
    "compare takes bool, int8 to int64, uint8, float8, float16, bfloat16, float32 and float64";

impl TensorResult {}

const ERR_SCALAR: &str = "This is type of 0-d tensor, can not calculate";
const EPS64: f64 = f64::EPSILON;
/// Elements per work item: small enough to stay in L2, large enough to amortize scheduling
/// (and, for f32 and wider, at least a MiB so mapped pages can be released chunk by chunk).
const CHUNK: usize = 1 << 18;

/// Mergeable partial results of one chunk.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Partial {
    pub(crate) dot: f64,
    pub(crate) nn: f64,
    pub(crate) nb: f64,
    pub(crate) ss: f64,
    pub(crate) max_abs: f64,
    pub(crate) max_rel: f64,
    pub(crate) lt1: u64,
    pub(crate) lt5: u64,
    pub(crate) any_invalid: bool,
    pub(crate) mask_mismatch: bool,
}

impl Partial {
    fn zero() -> Partial {
        Partial {
            dot: 0.0,
            nn: 0.0,
            nb: 0.0,
            ss: 0.0,
            max_abs: f64::NEG_INFINITY,
            max_rel: f64::NEG_INFINITY,
            lt1: 0,
            lt5: 0,
            any_invalid: false,
            mask_mismatch: false,
        }
    }

    fn merge(mut self, o: Partial) -> Partial {
        self.dot += o.dot;
        self.nn += o.nn;
        self.nb += o.nb;
        self.ss += o.ss;
        self.max_abs = nan_max(self.max_abs, o.max_abs);
        self.max_rel = nan_max(self.max_rel, o.max_rel);
        self.lt1 += o.lt1;
        self.lt5 += o.lt5;
        self.any_invalid |= o.any_invalid;
        self.mask_mismatch |= o.mask_mismatch;
        self
    }
}

/// `np.max` semantics: NaN wins.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Relative error of one element in the precision numpy uses (fp32 for fp16/fp32 pairs).
#[inline(always)]
fn rel_err(x: f64, y: f64, in_f32: bool) -> f64 {
    if in_f32 {
        let (mut n, mut b) = (x as f32, y as f32);
        if b == 0.0 {
            n += f32::EPSILON;
            b += f32::EPSILON;
        }
        ((n - b) / b).abs() as f64
    } else {
        let (mut n, mut b) = (x, y);
        if b == 0.0 {
            n += EPS64;
            b += EPS64;
        }
        ((n - b) / b).abs()
    }
}

/// Decodes elements `range` of `t` into `out` as f64 (typed loops the compiler vectorizes).
#[inline(always)]
fn decode(t: &Operand, range: std::ops::Range<usize>, out: &mut Vec<f64>) {
    out.clear();
    let sz = t.dtype().size();
    let bytes = &t.bytes()[range.start * sz..range.end * sz];
    match t.dtype() {
        DType::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64),
        ),
        DType::F64 => out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap())),
        ),
        DType::F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()),
        ),
        DType::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64()),
        ),
        _ => out.extend(range.map(|i| t.get(i))),
    }
}

/// Every element of `view` as f64 (numpy's `astype(float)`), `None` for complex tensors.
pub(crate) fn widen_to_f64(view: &TensorView) -> Option<Vec<f64>> {
    if view.dtype().is_complex() {
        return None;
    }
    let mut out = Vec::with_capacity(view.numel());
    decode(&Operand::in_memory(*view), 0..view.numel(), &mut out);
    Some(out)
}

/// Hands the pages of elements `range` of a mapped tensor back to the kernel; they are never
/// read again (each file is read once). Only whole pages inside the range are released.
#[inline(always)]
fn release(t: &Operand, range: std::ops::Range<usize>) {
    #[cfg(unix)]
    {
        const MIN_RELEASE: usize = 1 << 20;
        let sz = t.dtype().size();
        if !t.mapped || (range.end - range.start) * sz < MIN_RELEASE {
            return;
        }
        let page = 4096usize;
        let start = t.bytes().as_ptr() as usize + range.start * sz;
        let end = t.bytes().as_ptr() as usize + range.end * sz;
        let (a, b) = (start.div_ceil(page) * page, end / page * page);
        if b > a {
            // SAFETY: [a, b) lies inside a read-only file mapping that is not written; after
            // MADV_DONTNEED a later access would fault the same file contents back in.
            unsafe {
                libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_DONTNEED);
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (t, range);
}

/// Lanes of independent accumulators: lets the compiler vectorize the sums.
const LANES: usize = 8;

/// Metrics of a chunk whose elements are all finite (the common case), branch-free per element.
#[inline(always)]
fn finite_partial<const F32: bool>(x: &[f64], y: &[f64]) -> Partial {
    let (t1, t5) = if F32 {
        (0.001f32 as f64, 0.005f32 as f64)
    } else {
        (0.001, 0.005)
    };
    let mut dot = [0.0f64; LANES];
    let mut nn = [0.0f64; LANES];
    let mut nb = [0.0f64; LANES];
    let mut ss = [0.0f64; LANES];
    let mut mabs = [0.0f64; LANES];
    let mut mrel = [0.0f64; LANES];
    let mut c1 = [0u64; LANES];
    let mut c5 = [0u64; LANES];
    let body = |k: usize,
                xv: f64,
                yv: f64,
                dot: &mut [f64; LANES],
                nn: &mut [f64; LANES],
                nb: &mut [f64; LANES],
                ss: &mut [f64; LANES],
                mabs: &mut [f64; LANES],
                mrel: &mut [f64; LANES],
                c1: &mut [u64; LANES],
                c5: &mut [u64; LANES]| {
        dot[k] += xv * yv;
        nn[k] += xv * xv;
        nb[k] += yv * yv;
        let d = xv - yv;
        ss[k] += d * d;
        let ad = d.abs();
        mabs[k] = if ad > mabs[k] { ad } else { mabs[k] };
        let r = rel_err(xv, yv, F32);
        mrel[k] = if r > mrel[k] { r } else { mrel[k] };
        c1[k] += (r < t1) as u64;
        c5[k] += (r < t5) as u64;
    };
    let full = x.len() / LANES * LANES;
    for (xs, ys) in x[..full]
        .chunks_exact(LANES)
        .zip(y[..full].chunks_exact(LANES))
    {
        for k in 0..LANES {
            body(
                k, xs[k], ys[k], &mut dot, &mut nn, &mut nb, &mut ss, &mut mabs, &mut mrel,
                &mut c1, &mut c5,
            );
        }
    }
    for (k, (&xv, &yv)) in x[full..].iter().zip(&y[full..]).enumerate() {
        body(
            k, xv, yv, &mut dot, &mut nn, &mut nb, &mut ss, &mut mabs, &mut mrel, &mut c1, &mut c5,
        );
    }
    let sum = |a: [f64; LANES]| a.iter().sum::<f64>();
    Partial {
        dot: sum(dot),
        nn: sum(nn),
        nb: sum(nb),
        ss: sum(ss),
        max_abs: mabs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        max_rel: mrel.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        lt1: c1.iter().sum(),
        lt5: c5.iter().sum(),
        any_invalid: false,
        mask_mismatch: false,
    }
}

fn chunk_partial(n: &Operand, b: &Operand, range: std::ops::Range<usize>, in_f32: bool) -> Partial {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            // SAFETY: the CPU supports AVX2 and F16C (checked just above).
            return unsafe { chunk_partial_avx2(n, b, range, in_f32) };
        }
    }
    chunk_partial_impl::<false>(n, b, range, in_f32)
}

/// The same code compiled for AVX2 and F16C (no FMA: results stay bit-identical to the
/// baseline path).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn chunk_partial_avx2(
    n: &Operand,
    b: &Operand,
    range: std::ops::Range<usize>,
    in_f32: bool,
) -> Partial {
    chunk_partial_impl::<true>(n, b, range, in_f32)
}

#[inline(always)]
fn chunk_partial_impl<const F16C: bool>(
    n: &Operand,
    b: &Operand,
    range: std::ops::Range<usize>,
    in_f32: bool,
) -> Partial {
    if in_f32 {
        return chunk_partial_f32::<F16C>(n, b, range);
    }
    thread_local! {
        static BUF: std::cell::Cell<(Vec<f64>, Vec<f64>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
    }
    // The buffers are taken out of the thread-local and put back, so that the work stays in
    // this function (inlined, with its target features) rather than in a closure.
    let (mut x, mut y) = BUF.take();
    decode(n, range.clone(), &mut x);
    decode(b, range.clone(), &mut y);
    release(n, range.clone());
    release(b, range);
    let (any_invalid, mask_mismatch) = zero_invalid(&mut x, &mut y);
    let mut p = finite_partial::<false>(&x, &y);
    p.any_invalid = any_invalid;
    p.mask_mismatch = mask_mismatch;
    BUF.set((x, y));
    p
}

/// msprobe zeroes inf/nan at identical positions (and gives up when they differ): returns
/// (any inf/nan, positions differ). The common all-finite chunk costs one compare pass.
#[inline(always)]
fn zero_invalid<T: Copy + PartialOrd + Default + FloatBits>(
    x: &mut [T],
    y: &mut [T],
) -> (bool, bool) {
    if x.iter().chain(y.iter()).all(|v| v.finite()) {
        return (false, false);
    }
    let mut mismatch = false;
    for (xv, yv) in x.iter_mut().zip(y.iter_mut()) {
        if !xv.finite() || !yv.finite() {
            if xv.nan() != yv.nan() || xv.inf() != yv.inf() {
                mismatch = true;
            }
            if !xv.finite() {
                *xv = T::default();
            }
            if !yv.finite() {
                *yv = T::default();
            }
        }
    }
    (true, mismatch)
}

trait FloatBits {
    fn finite(self) -> bool;
    fn nan(self) -> bool;
    fn inf(self) -> bool;
}

impl FloatBits for f64 {
    fn finite(self) -> bool {
        self.is_finite()
    }
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn inf(self) -> bool {
        self.is_infinite()
    }
}

impl FloatBits for f32 {
    fn finite(self) -> bool {
        self.is_finite()
    }
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn inf(self) -> bool {
        self.is_infinite()
    }
}

/// Elements decoded at a time inside a chunk: both f32 blocks stay in L1 between the decode
/// and the metric loop.
const SUB: usize = 2048;

/// Decodes the elements in `bytes` of an fp16/bf16/fp8/fp32 tensor into `out` as f32 (exact;
/// `out` holds `bytes.len() / dtype.size()` values). With `F16C` (a caller compiled for and
/// dispatched on a CPU with AVX2 and F16C) fp16 goes through [`decode_f16_f16c`]; otherwise
/// through half's slice conversion, or element by element where the bytes are not aligned for
/// `f16` (a hand-made file). Every way gives the same values.
#[inline(always)]
fn decode_f32<const F16C: bool>(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    match dtype {
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            #[cfg(target_arch = "x86_64")]
            if F16C {
                // SAFETY: F16C is only requested by the caller compiled for (and dispatched
                // on) a CPU with AVX2 and F16C.
                unsafe { decode_f16_f16c(bytes, out) };
                return;
            }
            match bytemuck::try_cast_slice::<u8, f16>(bytes) {
                Ok(h) => h.convert_to_f32_slice(out),
                Err(_) => {
                    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                        *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
                    }
                }
            }
        }
        // bf16 is the top half of an f32. (half's conversion also sets the quiet bit of a NaN,
        // a per-element select that costs a tenth of this pass; msprobe zeroes NaNs, so their
        // payload never shows.)
        DType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
        DType::F8E4M3FN => {
            for (o, &c) in out.iter_mut().zip(bytes) {
                *o = float8::e4m3fn_to_f32(c);
            }
        }
        DType::F8E5M2 => {
            for (o, &c) in out.iter_mut().zip(bytes) {
                *o = float8::e5m2_to_f32(c);
            }
        }
        _ => unreachable!("only fp16/bf16/fp8/fp32 take the f32 path"),
    }
}

/// fp16 → f32 with the F16C instruction, 8 values at a time, inlined into the AVX2 kernel.
/// half's slice conversion runs the same instruction but calls it per 8 values from a function
/// that cannot inline it, which makes this pass a fifth slower on fp16 pairs; the test
/// `fp16_and_bf16_decode_exactly_on_every_path` checks this against half for every bit pattern.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn decode_f16_f16c(bytes: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
    let n = out.len().min(bytes.len() / 2);
    let full = n / 8 * 8;
    let mut i = 0;
    while i < full {
        // SAFETY: i + 8 <= n, so 16 bytes are readable at 2i and 8 floats writable at i.
        unsafe {
            let h = _mm_loadu_si128(bytes.as_ptr().add(2 * i) as *const __m128i);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for k in full..n {
        out[k] = f16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]]).to_f32();
    }
}

/// The fp16/bf16/fp32 path: numpy computes the relative error in fp32, so the data stays
/// fp32 and only the sums widen to f64. The chunk is decoded and reduced in L1-sized blocks;
/// the lane accumulators run across blocks, so the summation order is that of one pass.
#[inline(always)]
fn chunk_partial_f32<const F16C: bool>(
    n: &Operand,
    b: &Operand,
    range: std::ops::Range<usize>,
) -> Partial {
    let (t1, t5) = (0.001f32, 0.005f32);
    let mut dot = [0.0f64; LANES];
    let mut nn = [0.0f64; LANES];
    let mut nb = [0.0f64; LANES];
    let mut ss = [0.0f64; LANES];
    let mut mabs = [0.0f64; LANES];
    let mut mrel = [0.0f32; LANES];
    let mut c1 = [0u32; LANES];
    let mut c5 = [0u32; LANES];
    let (mut any_invalid, mut mask_mismatch) = (false, false);
    let mut step = |k: usize, xs: f32, ys: f32| {
        let (xv, yv) = (xs as f64, ys as f64);
        dot[k] += xv * yv;
        nn[k] += xv * xv;
        nb[k] += yv * yv;
        let d = xv - yv;
        ss[k] += d * d;
        // Plain compares (not NaN-aware `max`): no NaN reaches here, and they vectorize.
        let ad = d.abs();
        mabs[k] = if ad > mabs[k] { ad } else { mabs[k] };
        let zero = ys == 0.0;
        let nz = if zero { xs + f32::EPSILON } else { xs };
        let bz = if zero { ys + f32::EPSILON } else { ys };
        let r = ((nz - bz) / bz).abs();
        mrel[k] = if r > mrel[k] { r } else { mrel[k] };
        c1[k] += (r < t1) as u32;
        c5[k] += (r < t5) as u32;
    };
    let (nsz, bsz) = (n.dtype().size(), b.dtype().size());
    let mut xbuf = [0.0f32; SUB];
    let mut ybuf = [0.0f32; SUB];
    let mut start = range.start;
    while start < range.end {
        let end = (start + SUB).min(range.end);
        let len = end - start;
        let (x, y) = (&mut xbuf[..len], &mut ybuf[..len]);
        decode_f32::<F16C>(n.dtype(), &n.bytes()[start * nsz..end * nsz], x);
        decode_f32::<F16C>(b.dtype(), &b.bytes()[start * bsz..end * bsz], y);
        // Branch-free inf/nan test (an early-exit `all` runs one element at a time): the
        // largest magnitude bit pattern is inf or nan exactly when some element is.
        let max_mag = x
            .iter()
            .chain(y.iter())
            .fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
        if max_mag >= 0x7f80_0000 {
            let (inv, mis) = zero_invalid(x, y);
            any_invalid |= inv;
            mask_mismatch |= mis;
        }
        // Only the chunk's last block can be partial, so the lane of element i is
        // (i - range.start) % LANES in every block, as in a single pass.
        let full = len / LANES * LANES;
        for (xs, ys) in x[..full]
            .chunks_exact(LANES)
            .zip(y[..full].chunks_exact(LANES))
        {
            for k in 0..LANES {
                step(k, xs[k], ys[k]);
            }
        }
        for (k, (&xv, &yv)) in x[full..].iter().zip(&y[full..]).enumerate() {
            step(k, xv, yv);
        }
        start = end;
    }
    release(n, range.clone());
    release(b, range);
    // u32 lane counters cannot overflow: a chunk holds far fewer than 2^32 elements.
    let lt1 = c1.iter().map(|&c| u64::from(c)).sum::<u64>();
    let lt5 = c5.iter().map(|&c| u64::from(c)).sum::<u64>();
    let sum = |a: [f64; LANES]| a.iter().sum::<f64>();
    Partial {
        dot: sum(dot),
        nn: sum(nn),
        nb: sum(nb),
        ss: sum(ss),
        max_abs: mabs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        max_rel: mrel
            .iter()
            .map(|&r| r as f64)
            .fold(f64::NEG_INFINITY, f64::max),
        lt1,
        lt5,
        any_invalid,
        mask_mismatch,
    }
}

/// The merged partials of every chunk, and EucDist, from one read of both sides when the
/// OpenBLAS parts keep the pool busy.
///
/// The partials are those of [`CHUNK`]-element chunks merged in order; EucDist is OpenBLAS's
/// `ddot` over its thread parts (see `euc`). Each part runs on one worker: it feeds its
/// elements to the part's sum and computes the partials of the chunks that start in it, chunk
/// by chunk from the same decoded range (the sum before the partial, whose pass hands a mapped
/// chunk's pages back); the few elements of a part before its first chunk (the end of the
/// previous part's last chunk) are read again. Partials and sums are those of the two separate
/// passes, bit for bit. With fewer parts than busy threads (a small tensor, few BLAS threads)
/// the two passes run separately, each on every thread.
fn partials_and_euc(
    n: &Side,
    b: &Side,
    numel: usize,
    in_f32: bool,
    blas_threads: usize,
) -> (Partial, f64) {
    let chunks = numel.div_ceil(CHUNK);
    let parts = euc::blas_parts(numel, blas_threads);
    if parts.len() < rayon::current_num_threads().min(chunks) {
        let p = (0..chunks)
            .into_par_iter()
            .map(|c| {
                let range = c * CHUNK..((c + 1) * CHUNK).min(numel);
                with_pair(n, b, range, |x, y, r| chunk_partial(x, y, r, in_f32))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .fold(Partial::zero(), Partial::merge);
        return (p, euc::euc_dist(n, b, blas_threads));
    }
    let per_part: Vec<(Vec<Partial>, f64)> = parts
        .into_par_iter()
        .map(|part| {
            let mut sum = euc::PartSum::new(part.len());
            // The chunks that start in this part.
            let (first, end) = (part.start.div_ceil(CHUNK), part.end.div_ceil(CHUNK));
            euc::feed_blocks(n, b, part.start..(first * CHUNK).min(part.end), &mut sum);
            let mut partials = Vec::with_capacity(end.saturating_sub(first));
            for c in first..end {
                let range = c * CHUNK..((c + 1) * CHUNK).min(numel);
                let inside = range.end.min(part.end) - range.start;
                with_pair(n, b, range, |x, y, r| {
                    sum.feed(x, y, r.start..r.start + inside);
                    partials.push(chunk_partial(x, y, r, in_f32));
                });
            }
            (partials, sum.finish())
        })
        .collect();
    let p = per_part
        .iter()
        .flat_map(|(ps, _)| ps.iter().copied())
        .fold(Partial::zero(), Partial::merge);
    // OpenBLAS adds the parts' sums in order, starting from 0.
    let ss = per_part.iter().fold(0.0, |acc, (_, s)| acc + s);
    (p, ss.sqrt())
}

/// Runs msprobe's validation chain and metrics on one tensor pair (NPU `n`, bench `b`) on the
/// CPU. Either tensor of a dtype that is not [`is_compared`] gives an `unsupported` row.
pub fn compare_tensors(n: &TensorView, b: &TensorView) -> TensorResult {
    compare_tensors_blas(n, b, default_blas_threads())
}

/// [`compare_tensors`] with `EucDist` summed as OpenBLAS does with `blas_threads` threads
/// (numpy's on a machine with that many CPUs; it matters above 10 000 elements).
pub fn compare_tensors_blas(n: &TensorView, b: &TensorView, blas_threads: usize) -> TensorResult {
    compare_sides_blas(&Side::view(*n), &Side::view(*b), blas_threads)
}

/// [`compare_tensors`] for sides that may be strided views (see [`Side`]): the same cells as
/// for the views gathered into C order, read a chunk at a time.
pub fn compare_sides(n: &Side, b: &Side) -> TensorResult {
    compare_sides_blas(n, b, default_blas_threads())
}

/// [`compare_tensors_blas`] for sides that may be strided views.
pub fn compare_sides_blas(n: &Side, b: &Side, blas_threads: usize) -> TensorResult {
    compare_tensors_with(n, b, blas_threads, |_| None)
}

/// [`compare_tensors_on`] for sides that may be strided views. A pair with a strided side runs
/// on the CPU (the GPU kernel reads C-order bytes).
pub fn compare_sides_on(n: &Side, b: &Side, engine: &Engine) -> TensorResult {
    compare_tensors_with(n, b, default_blas_threads(), |in_f32: bool| {
        let (x, y) = Side::operands(n, b)?;
        in_f32.then(|| engine.gpu_partial(x, y)).flatten()
    })
}

/// As [`compare_tensors`] on the backend of `engine`: the GPU (when built with feature `gpu`
/// and the pair suits it) gathers the partial results; the cells are decided the same way.
pub fn compare_tensors_on(n: &TensorView, b: &TensorView, engine: &Engine) -> TensorResult {
    compare_sides_on(&Side::view(*n), &Side::view(*b), engine)
}

/// As [`compare_tensors`] on the given Gpu with `chunk_elems` per chunk (tests: many chunks on
/// little data); pairs the GPU does not take run on the CPU.
#[cfg(feature = "gpu")]
pub fn compare_tensors_gpu(
    n: &TensorView,
    b: &TensorView,
    gpu: &stats_gpu::gpu::Gpu,
    chunk_elems: usize,
) -> TensorResult {
    let (n, b) = (Operand::in_memory(*n), Operand::in_memory(*b));
    let (ns, bs) = (Side::dense(n), Side::dense(b));
    compare_tensors_with(&ns, &bs, default_blas_threads(), |in_f32: bool| {
        in_f32
            .then(|| gpu::gpu_partial_with(&n, &b, gpu, chunk_elems))
            .flatten()
    })
}

/// msprobe's metrics on two arrays as numpy holds them, without the squeeze the API compare
/// applies to dump records: a `[1]` tensor is a one-element vector here ("This is a 1-d tensor
/// of length 1."), not a 0-d scalar. msprobe's graph-mode comparator of kernel dumps works so.
pub fn compare_arrays(n: &TensorView, b: &TensorView) -> TensorResult {
    compare_tensors_shaped(
        &Side::view(*n),
        &Side::view(*b),
        default_blas_threads(),
        |_| None,
        false,
    )
}

fn compare_tensors_with(
    n: &Side,
    b: &Side,
    blas_threads: usize,
    gpu: impl FnOnce(bool) -> Option<Partial>,
) -> TensorResult {
    compare_tensors_shaped(n, b, blas_threads, gpu, true)
}

fn compare_tensors_shaped(
    n: &Side,
    b: &Side,
    blas_threads: usize,
    gpu: impl FnOnce(bool) -> Option<Partial>,
    squeeze_shapes: bool,
) -> TensorResult {
    let (nd, bd) = (n.dtype(), b.dtype());
    if !is_compared(nd) || !is_compared(bd) {
        let d = if is_compared(nd) { bd } else { nd };
        return TensorResult::filled(
            "unsupported",
            &format!(
                "{UNCOMPARED_DTYPE_PREFIX}{}; {COMPARED_DTYPES}.",
                d.numpy_name()
            ),
            true,
        );
    }
    let shape = |o: &Side| {
        if squeeze_shapes {
            squeeze(o.shape())
        } else {
            o.shape().to_vec()
        }
    };
    let (n_shape, b_shape) = (shape(n), shape(b));
    let numel = n.numel();
    if numel == 0 {
        return TensorResult::filled("unsupported", "This is empty data, can not compare.", true);
    }
    if n_shape != b_shape || b.numel() != numel {
        return TensorResult::filled(
            "shape unmatched",
            "Shape of NPU and bench tensor do not match. Skipped.",
            true,
        );
    }
    if n_shape.is_empty() {
        return with_pair(n, b, 0..1, |x, y, _| scalar_metrics(x, y));
    }

    // result_type(n, b, float32) after ints/bools became fp64: float32 when both are fp16 or
    // fp32 in numpy.
    let f16_or_f32 = |d: DType| matches!(numpy_dtype(d), DType::F16 | DType::F32);
    let in_f32 = f16_or_f32(nd) && f16_or_f32(bd);
    let (p, euc) = match gpu(in_f32) {
        // The GPU gives the partials; EucDist is summed on the CPU in OpenBLAS's order.
        Some(p) => (p, euc::euc_dist(n, b, blas_threads)),
        None => partials_and_euc(n, b, numel, in_f32, blas_threads),
    };

    if p.any_invalid && p.mask_mismatch {
        return TensorResult::filled(
            "N/A",
            "The position of inf or nan in NPU and bench Tensor do not match.",
            true,
        );
    }
    let mut msg = String::new();
    // bf16 became fp32 when read, so bf16 against fp32 is the same numpy dtype.
    if numpy_dtype(nd) != numpy_dtype(bd) {
        msg.push_str("Dtype of NPU and bench tensor do not match.");
    }

    let mut values: [Cell; 6] = std::array::from_fn(|_| Cell::s("unsupported"));
    let mut alg_msgs = String::new();
    // Cosine
    if numel == 1 {
        alg_msgs.push_str("This is a 1-d tensor of length 1.");
    } else {
        let (nn, nb) = (p.nn.sqrt(), p.nb.sqrt());
        values[0] = if nn <= EPS64 && nb <= EPS64 {
            Cell::Float(1.0)
        } else if nn <= EPS64 {
            alg_msgs.push_str(
                "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data.",
            );
            Cell::s("Nan")
        } else if nb <= EPS64 {
            alg_msgs.push_str(
                "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data.",
            );
            Cell::s("Nan")
        } else {
            let cos = p.dot / (nn * nb);
            if cos.is_nan() {
                alg_msgs.push_str("Cannot compare by Cosine Similarity, the dump data has NaN.");
                Cell::s("Nan")
            } else {
                let r = fmt12(cos);
                Cell::Float(if r > 0.9999 { round_places(r, 6) } else { r })
            }
        };
    }
    // Not `p.ss`: msprobe's value is rounded in OpenBLAS's order (see `partials_and_euc`).
    values[1] = Cell::Float(euc);
    values[2] = if p.max_abs.is_nan() {
        alg_msgs.push_str(
            "Cannot compare by MaxAbsError, the data contains nan/inf/-inf in dump data.",
        );
        Cell::s("Nan")
    } else {
        Cell::Float(fmt12(p.max_abs))
    };
    values[3] = if p.max_rel.is_nan() {
        alg_msgs.push_str(
            "Cannot compare by MaxRelativeError, the data contains nan/inf/-inf in dump data.",
        );
        Cell::s("Nan")
    } else {
        Cell::Float(fmt12(p.max_rel))
    };
    values[4] = Cell::Float(fmt12(p.lt1 as f64 / numel as f64));
    values[5] = Cell::Float(fmt12(p.lt5 as f64 / numel as f64));
    msg.push_str(&alg_msgs);
    TensorResult {
        values,
        err_msg: msg,
        error_flag: false,
    }
}

/// 0-d tensors: only MaxAbsErr and MaxRelativeErr run, in the native dtype (numpy 1.x
/// value-based casting computes the relative error in fp32).
fn scalar_metrics(n: &Operand, b: &Operand) -> TensorResult {
    let (nd, bd) = (n.dtype(), b.dtype());
    let mut values: [Cell; 6] = std::array::from_fn(|_| Cell::s("unsupported"));
    let mut msg = String::from(
        "This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', 'One Thousandth Err Ratio' and 'Five Thousandths Err Ratio'. ",
    );
    let (x, y) = (n.get(0), b.get(0));
    let mut alg = String::new();
    alg.push_str(ERR_SCALAR);
    alg.push_str(ERR_SCALAR);
    let max_abs = if nd.is_int() && bd.is_int() {
        (n.get_i64(0).wrapping_sub(b.get_i64(0))).unsigned_abs() as f64
    } else {
        // The difference in numpy's dtype: the wider float of the two, at least float16
        // (ints and bool count below float16), and float64 for two bools.
        let either = |d: DType| numpy_dtype(nd) == d || numpy_dtype(bd) == d;
        let diff = x - y;
        let diff = if either(DType::F64) || (nd == DType::Bool && bd == DType::Bool) {
            diff
        } else if either(DType::F32) {
            diff as f32 as f64
        } else {
            f16::from_f64(diff).to_f64()
        };
        diff.abs()
    };
    values[2] = if max_abs.is_nan() {
        alg.push_str("Cannot compare by MaxAbsError, the data contains nan/inf/-inf in dump data.");
        Cell::s("Nan")
    } else {
        Cell::Float(fmt12(max_abs))
    };
    let rel = rel_err(x, y, true);
    values[3] = if rel.is_nan() {
        alg.push_str(
            "Cannot compare by MaxRelativeError, the data contains nan/inf/-inf in dump data.",
        );
        Cell::s("Nan")
    } else {
        Cell::Float(fmt12(rel))
    };
    alg.push_str(ERR_SCALAR);
    alg.push_str(ERR_SCALAR);
    msg.push_str(&alg);
    TensorResult {
        values,
        err_msg: msg,
        error_flag: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of `bytes`.
    fn view<'a>(dtype: DType, shape: &'a [usize], bytes: &'a [u8]) -> TensorView<'a> {
        TensorView::new(dtype, shape, bytes).unwrap()
    }

    fn bytes_f32(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Straightforward sequential reference of the same rules.
    fn reference(x: &[f32], y: &[f32]) -> [f64; 6] {
        let (mut dot, mut nn, mut nb, mut ss, mut ma, mut mr, mut c1, mut c5) =
            (0.0, 0.0, 0.0, 0.0, 0.0f64, 0.0f64, 0, 0);
        for (&a, &b) in x.iter().zip(y) {
            let (a, b) = if a.is_finite() && b.is_finite() {
                (a as f64, b as f64)
            } else {
                (0.0, 0.0)
            };
            dot += a * b;
            nn += a * a;
            nb += b * b;
            ss += (a - b) * (a - b);
            ma = ma.max((a - b).abs());
            let (mut n32, mut b32) = (a as f32, b as f32);
            if b32 == 0.0 {
                n32 += f32::EPSILON;
                b32 += f32::EPSILON;
            }
            let r = ((n32 - b32) / b32).abs();
            mr = mr.max(r as f64);
            c1 += (r < 0.001f32) as u64;
            c5 += (r < 0.005f32) as u64;
        }
        let n = x.len() as f64;
        [
            dot / (nn.sqrt() * nb.sqrt()),
            ss.sqrt(),
            fmt12(ma),
            fmt12(mr),
            fmt12(c1 as f64 / n),
            fmt12(c5 as f64 / n),
        ]
    }

    #[test]
    fn chunked_equals_sequential_reference() {
        let len = 3 * CHUNK + 17;
        let x: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let mut y: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, v)| v * (1.0 + ((i % 7) as f32) * 4e-4))
            .collect();
        let mut x = x;
        // Matching inf/nan positions in the second chunk are zeroed on both sides.
        for i in [CHUNK + 5, CHUNK + 900] {
            x[i] = f32::NAN;
            y[i] = f32::NAN;
        }
        x[2 * CHUNK + 1] = f32::INFINITY;
        y[2 * CHUNK + 1] = f32::NEG_INFINITY;
        y[10] = 0.0;
        let shape = [len];
        let (xb, yb) = (bytes_f32(&x), bytes_f32(&y));
        let got = compare_tensors(
            &view(DType::F32, &shape, &xb),
            &view(DType::F32, &shape, &yb),
        );
        let want = reference(&x, &y);
        let Cell::Float(cos) = got.values[0] else {
            panic!("{:?}", got.values[0])
        };
        assert!((cos - round_places(fmt12(want[0]), 6)).abs() <= 1e-6);
        let Cell::Float(euc) = got.values[1] else {
            panic!()
        };
        assert!((euc - want[1]).abs() <= 1e-12 * want[1]);
        for (k, (got, want)) in got.values.iter().zip(want).enumerate().skip(2) {
            assert_eq!(*got, Cell::Float(want), "column {k}");
        }
        assert!(!got.error_flag);

        // One mismatched NaN in the last chunk turns every metric into N/A.
        y[3 * CHUNK + 3] = f32::NAN;
        let yb = bytes_f32(&y);
        let got = compare_tensors(
            &view(DType::F32, &shape, &xb),
            &view(DType::F32, &shape, &yb),
        );
        assert_eq!(got.values[0], Cell::s("N/A"));
        assert!(got.error_flag);
    }

    fn partial_bits(p: &Partial) -> [u64; 10] {
        [
            p.dot.to_bits(),
            p.nn.to_bits(),
            p.nb.to_bits(),
            p.ss.to_bits(),
            p.max_abs.to_bits(),
            p.max_rel.to_bits(),
            p.lt1,
            p.lt5,
            p.any_invalid as u64,
            p.mask_mismatch as u64,
        ]
    }

    /// Every fp16 and bf16 bit pattern decodes to its exact f32 (subnormals included; NaN
    /// stays NaN, its payload aside) on every path: half's slice conversion on aligned bytes,
    /// element by element on unaligned ones, the F16C loop of the AVX2 kernel, and the f64
    /// decode of the wide path.
    #[test]
    fn fp16_and_bf16_decode_exactly_on_every_path() {
        let words: Vec<u16> = (0..=u16::MAX).collect();
        let aligned: &[u8] = bytemuck::cast_slice(&words);
        // One byte in: odd addresses, so the bytes cannot be cast to a 2-byte type.
        let mut padded = vec![0u8; aligned.len() + 1];
        padded[1..].copy_from_slice(aligned);
        let unaligned = &padded[1..];
        assert!(bytemuck::try_cast_slice::<u8, f16>(unaligned).is_err());
        for dt in [DType::F16, DType::BF16] {
            let want = |v: u16| match dt {
                DType::F16 => f16::from_bits(v).to_f32(),
                // bf16 is the top half of an f32.
                _ => f32::from_bits(u32::from(v) << 16),
            };
            for bytes in [aligned, unaligned] {
                let mut portable = vec![0.0f32; 1 << 16];
                decode_f32::<false>(dt, bytes, &mut portable);
                let mut paths = vec![portable];
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("f16c")
                {
                    let mut fast = vec![0.0f32; 1 << 16];
                    // SAFETY: the CPU supports AVX2 and F16C (checked just above).
                    unsafe { decode_avx2(dt, bytes, &mut fast) };
                    paths.push(fast);
                }
                for got in &paths {
                    for (&v, g) in words.iter().zip(got) {
                        let w = want(v);
                        assert!(
                            w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan()),
                            "{dt:?} {v:#06x}: {g} vs {w}"
                        );
                    }
                }
                let mut wide = Vec::new();
                let t = Operand::in_memory(view(dt, &[1 << 16], bytes));
                decode(&t, 0..1 << 16, &mut wide);
                for (&v, g) in words.iter().zip(&wide) {
                    let w = f64::from(want(v));
                    assert!(
                        w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan()),
                        "{dt:?} {v:#06x} as f64: {g} vs {w}"
                    );
                }
            }
        }
    }

    /// [`decode_f32`] as the AVX2/F16C kernel runs it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode_avx2(dtype: DType, bytes: &[u8], out: &mut [f32]) {
        decode_f32::<true>(dtype, bytes, out)
    }

    /// The AVX2/F16C kernel gives bit-identical partials to the portable one (fp16, bf16,
    /// mixed with fp32).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_kernel_matches_portable_kernel() {
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c"))
        {
            eprintln!("skipped: CPU lacks AVX2/F16C");
            return;
        }
        let all: Vec<u8> = (0..=u16::MAX).flat_map(|v| v.to_le_bytes()).collect();
        let fast: Vec<f32> = (0..=u16::MAX).map(|v| f16::from_bits(v).to_f32()).collect();

        // Partner tensors: every pattern's neighbour (mismatched inf/nan), and a perturbed copy
        // with inf/nan kept in place (matched; zero denominators and subnormals included).
        let shifted: Vec<u8> = (0..=u16::MAX)
            .flat_map(|v| v.wrapping_add(1).to_le_bytes())
            .collect();
        let matched: Vec<u8> = (0..=u16::MAX)
            .flat_map(|v| {
                let m = if v & 0x7c00 == 0x7c00 || v % 5 == 0 {
                    v
                } else {
                    v ^ 1
                };
                m.to_le_bytes()
            })
            .collect();
        let f32_bytes: Vec<u8> = fast
            .iter()
            .flat_map(|v| (v * 1.0005).to_le_bytes())
            .collect();
        let shape = [1usize << 16];
        let t = |dtype, bytes| Operand::in_memory(view(dtype, &shape, bytes));
        for dt in [DType::F16, DType::BF16] {
            let others = [t(dt, &shifted), t(dt, &matched), t(DType::F32, &f32_bytes)];
            for other in &others {
                for range in [0..1 << 16, 3..(1 << 16) - 5, 100..107] {
                    let a = t(dt, &all);
                    let portable = chunk_partial_impl::<false>(&a, other, range.clone(), true);
                    // SAFETY: the CPU supports AVX2 and F16C (checked above).
                    let simd = unsafe { chunk_partial_avx2(&a, other, range.clone(), true) };
                    assert_eq!(
                        partial_bits(&portable),
                        partial_bits(&simd),
                        "{dt:?} vs {:?} over {range:?}",
                        other.dtype()
                    );
                }
            }
        }
    }

    /// The one-read pass gives the partials and EucDist of the two separate passes, bit for
    /// bit, at every OpenBLAS thread count (parts and chunks whose edges do not meet).
    #[test]
    fn one_read_pass_equals_the_two_passes() {
        let len = 3 * CHUNK + 1001;
        let x: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let mut y: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, v)| v * (1.0 + ((i % 7) as f32) * 4e-4))
            .collect();
        let mut x = x;
        x[CHUNK + 5] = f32::NAN;
        y[CHUNK + 5] = f32::NAN;
        y[7] = 0.0;
        let shape = [len];
        let (xb, yb) = (bytes_f32(&x), bytes_f32(&y));
        let x64: Vec<u8> = x.iter().flat_map(|v| (*v as f64).to_le_bytes()).collect();
        for (nd, nbytes, in_f32) in [(DType::F32, &xb, true), (DType::F64, &x64, false)] {
            let n = Side::view(view(nd, &shape, nbytes));
            let b = Side::view(view(DType::F32, &shape, &yb));
            for threads in [1, 2, 3, 5, 64] {
                let (p, e) = partials_and_euc(&n, &b, len, in_f32, threads);
                let want_p = (0..len.div_ceil(CHUNK))
                    .map(|c| {
                        let r = c * CHUNK..((c + 1) * CHUNK).min(len);
                        with_pair(&n, &b, r, |x, y, r| chunk_partial(x, y, r, in_f32))
                    })
                    .fold(Partial::zero(), Partial::merge);
                let want_e = euc::euc_dist(&n, &b, threads);
                assert_eq!(partial_bits(&p), partial_bits(&want_p), "{nd:?} {threads}");
                assert_eq!(e.to_bits(), want_e.to_bits(), "{nd:?} {threads}");
            }
        }
    }

    #[test]
    fn squeeze_and_dtype_rules() {
        assert_eq!(squeeze(&[1, 4, 1, 2]), vec![4, 2]);
        assert!(squeeze(&[1, 1]).is_empty());
        let a = bytes_f32(&[1.0, 2.0]);
        let b: Vec<u8> = [1.0f64, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let got = compare_tensors(&view(DType::F32, &[2], &a), &view(DType::F64, &[2], &b));
        assert_eq!(got.err_msg, "Dtype of NPU and bench tensor do not match.");
        assert_eq!(got.values[2], Cell::Float(0.0));
    }

    /// msprobe widens float8 tensors to float32 before numpy sees them: a float8 pair (and
    /// float8 against float32) gives exactly the row of the widened float32 tensors, with NaN
    /// and ±Inf at the same places zeroed as msprobe does, at sizes that span several chunks.
    #[test]
    fn float8_rows_are_those_of_their_float32_widening() {
        for (dt, widen) in [
            (DType::F8E4M3FN, float8::e4m3fn_to_f32 as fn(u8) -> f32),
            (DType::F8E5M2, float8::e5m2_to_f32),
        ] {
            for n in [2usize, 1000, CHUNK + 77] {
                // Every byte value in turn (NaN and, for e5m2, ±Inf included) on the NPU side; the
                // bench side the same bytes with some finite ones nudged, so the metrics are not 0.
                let npu: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
                let bench: Vec<u8> = npu
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| {
                        if widen(b).is_finite() && widen(b ^ 1).is_finite() && i % 3 == 0 {
                            b ^ 1
                        } else {
                            b
                        }
                    })
                    .collect();
                let f32_of = |v: &[u8]| bytes_f32(&v.iter().map(|&b| widen(b)).collect::<Vec<_>>());
                let shape = [n];
                let want = compare_tensors(
                    &view(DType::F32, &shape, &f32_of(&npu)),
                    &view(DType::F32, &shape, &f32_of(&bench)),
                );
                let got = compare_tensors(&view(dt, &shape, &npu), &view(dt, &shape, &bench));
                assert_eq!(got.values, want.values, "{dt:?} n={n}");
                assert_eq!(got.err_msg, want.err_msg, "{dt:?} n={n}");
                assert!(!is_not_compared_message(&got.err_msg), "{}", got.err_msg);
                // Against a float32 bench: the same numpy dtype, so no dtype message either.
                let mixed = compare_tensors(
                    &view(dt, &shape, &npu),
                    &view(DType::F32, &shape, &f32_of(&bench)),
                );
                assert_eq!(mixed.values, want.values, "{dt:?} n={n} vs f32");
                assert_eq!(mixed.err_msg, want.err_msg, "{dt:?} n={n} vs f32");
            }
        }
    }

    #[test]
    fn dtypes_the_metrics_do_not_read_give_an_unsupported_row() {
        let a = bytes_f32(&[1.0, 2.0]);
        let got = compare_tensors(&view(DType::F32, &[2], &a), &view(DType::C64, &[1], &a));
        assert_eq!(
            got.err_msg,
            format!("Dtype not compared: complex64; {COMPARED_DTYPES}.")
        );
        assert!(is_not_compared_message(&got.err_msg));
        assert_eq!(got.values[0], Cell::s("unsupported"));
        assert!(got.error_flag);
    }
}
