//! Tensor mode: msprobe's validation chain and its six metrics (spec 5.2), computed in one
//! pass over the two tensors' bytes, chunked and merged so any size streams on all cores.

/// Where the metrics run (CPU, or the GPU with feature `gpu`).
pub mod gpu;

use half::{bf16, f16};
use rayon::prelude::*;

use crate::cell::Cell;
use crate::pyfmt::{fmt12, round_places};

/// Element types of the tensor files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemDtype {
    F16,
    BF16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    Bool,
}

impl ElemDtype {
    pub fn size(self) -> usize {
        match self {
            ElemDtype::I8 | ElemDtype::U8 | ElemDtype::Bool => 1,
            ElemDtype::F16 | ElemDtype::BF16 | ElemDtype::I16 => 2,
            ElemDtype::F32 | ElemDtype::I32 => 4,
            ElemDtype::F64 | ElemDtype::I64 => 8,
        }
    }

    /// The numpy dtype msprobe computes on: bf16 is converted to fp32 when the file is read.
    fn kind(self) -> Kind {
        match self {
            ElemDtype::F16 => Kind::F16,
            ElemDtype::BF16 | ElemDtype::F32 => Kind::F32,
            ElemDtype::F64 => Kind::F64,
            ElemDtype::Bool => Kind::Bool,
            _ => Kind::Int,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Bool,
    Int,
    F16,
    F32,
    F64,
}

impl Kind {
    fn is_float(self) -> bool {
        matches!(self, Kind::F16 | Kind::F32 | Kind::F64)
    }
}

/// A tensor as stored: dtype, shape (before squeeze) and C-order little-endian bytes.
#[derive(Clone, Copy, Debug)]
pub struct RawTensor<'a> {
    pub dtype: ElemDtype,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
    /// The bytes are a read-only file mapping: pages already compared may be handed back to
    /// the kernel (resident memory stays bounded on tensors far larger than RAM).
    pub mapped: bool,
}

impl RawTensor<'_> {
    pub fn numel(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }

    /// Element `i` as f64 (exact for every float type; ints as numpy's `astype(float)`).
    #[inline]
    fn get(&self, i: usize) -> f64 {
        let s = self.dtype.size();
        let b = &self.bytes[i * s..i * s + s];
        match self.dtype {
            ElemDtype::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
            ElemDtype::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            ElemDtype::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
            ElemDtype::F64 => f64::from_le_bytes(b.try_into().unwrap()),
            ElemDtype::I8 => b[0] as i8 as f64,
            ElemDtype::U8 => b[0] as f64,
            ElemDtype::Bool => (b[0] != 0) as u8 as f64,
            ElemDtype::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
            ElemDtype::I32 => i32::from_le_bytes(b.try_into().unwrap()) as f64,
            ElemDtype::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
        }
    }

    fn get_i64(&self, i: usize) -> i64 {
        let s = self.dtype.size();
        let b = &self.bytes[i * s..i * s + s];
        match self.dtype {
            ElemDtype::I8 => b[0] as i8 as i64,
            ElemDtype::U8 => b[0] as i64,
            ElemDtype::Bool => (b[0] != 0) as i64,
            ElemDtype::I16 => i16::from_le_bytes([b[0], b[1]]) as i64,
            ElemDtype::I32 => i32::from_le_bytes(b.try_into().unwrap()) as i64,
            ElemDtype::I64 => i64::from_le_bytes(b.try_into().unwrap()),
            _ => self.get(i) as i64,
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
            NoMetrics::ReadFailed => format!("Dump file: {detail} not found or read failed."),
        };
        TensorResult::filled("unsupported", &msg, true)
    }
}

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
fn decode(t: &RawTensor, range: std::ops::Range<usize>, out: &mut Vec<f64>) {
    out.clear();
    let sz = t.dtype.size();
    let bytes = &t.bytes[range.start * sz..range.end * sz];
    match t.dtype {
        ElemDtype::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64),
        ),
        ElemDtype::F64 => out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap())),
        ),
        ElemDtype::F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()),
        ),
        // bf16 is the top half of an f32.
        ElemDtype::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16) as f64),
        ),
        _ => out.extend(range.map(|i| t.get(i))),
    }
}

/// Hands the pages of elements `range` of a mapped tensor back to the kernel; they are never
/// read again (each file is read once). Only whole pages inside the range are released.
#[inline(always)]
fn release(t: &RawTensor, range: std::ops::Range<usize>) {
    #[cfg(unix)]
    {
        const MIN_RELEASE: usize = 1 << 20;
        let sz = t.dtype.size();
        if !t.mapped || (range.end - range.start) * sz < MIN_RELEASE {
            return;
        }
        let page = 4096usize;
        let start = t.bytes.as_ptr() as usize + range.start * sz;
        let end = t.bytes.as_ptr() as usize + range.end * sz;
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

fn chunk_partial(
    n: &RawTensor,
    b: &RawTensor,
    range: std::ops::Range<usize>,
    in_f32: bool,
) -> Partial {
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
    n: &RawTensor,
    b: &RawTensor,
    range: std::ops::Range<usize>,
    in_f32: bool,
) -> Partial {
    chunk_partial_impl::<true>(n, b, range, in_f32)
}

#[inline(always)]
fn chunk_partial_impl<const F16C: bool>(
    n: &RawTensor,
    b: &RawTensor,
    range: std::ops::Range<usize>,
    in_f32: bool,
) -> Partial {
    if in_f32 {
        return chunk_partial_f32::<F16C>(n, b, range);
    }
    thread_local! {
        static BUF: std::cell::RefCell<(Vec<f64>, Vec<f64>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    BUF.with(|buf| {
        let (x, y) = &mut *buf.borrow_mut();
        decode(n, range.clone(), x);
        decode(b, range.clone(), y);
        release(n, range.clone());
        release(b, range);
        let (any_invalid, mask_mismatch) = zero_invalid(x, y);
        let mut p = finite_partial::<false>(x, y);
        p.any_invalid = any_invalid;
        p.mask_mismatch = mask_mismatch;
        p
    })
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

/// Decodes the elements in `bytes` of an fp16/bf16/fp32 tensor into `out` as f32 (exact).
#[inline(always)]
fn decode_f32<const F16C: bool>(dtype: ElemDtype, bytes: &[u8], out: &mut [f32]) {
    match dtype {
        ElemDtype::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        ElemDtype::F16 => {
            #[cfg(target_arch = "x86_64")]
            if F16C {
                // SAFETY: F16C is only requested by the caller compiled for (and dispatched
                // on) a CPU with AVX2 and F16C.
                unsafe { decode_f16_f16c(bytes, out) };
                return;
            }
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        // bf16 is the top half of an f32.
        ElemDtype::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
        _ => unreachable!("only fp16/bf16/fp32 take the f32 path"),
    }
}

/// fp16 → f32 with the F16C instruction, 8 values at a time (exact, like any conversion).
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
    n: &RawTensor,
    b: &RawTensor,
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
    let (nsz, bsz) = (n.dtype.size(), b.dtype.size());
    let mut xbuf = [0.0f32; SUB];
    let mut ybuf = [0.0f32; SUB];
    let mut start = range.start;
    while start < range.end {
        let end = (start + SUB).min(range.end);
        let len = end - start;
        let (x, y) = (&mut xbuf[..len], &mut ybuf[..len]);
        decode_f32::<F16C>(n.dtype, &n.bytes[start * nsz..end * nsz], x);
        decode_f32::<F16C>(b.dtype, &b.bytes[start * bsz..end * bsz], y);
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

/// Runs msprobe's validation chain and metrics on one tensor pair, on the backend set by
/// [`gpu::set_tensor_backend`].
pub fn compare_tensors(n: &RawTensor, b: &RawTensor) -> TensorResult {
    compare_tensors_on(n, b, gpu::tensor_backend())
}

/// As [`compare_tensors`] on a given backend: the GPU (when built with feature `gpu` and the
/// pair suits it) gathers the partial results; the cells are decided the same way.
pub fn compare_tensors_on(
    n: &RawTensor,
    b: &RawTensor,
    backend: gpu::TensorBackend,
) -> TensorResult {
    let partial = |in_f32: bool| {
        if in_f32 && backend != gpu::TensorBackend::Cpu {
            gpu::gpu_partial(n, b, backend)
        } else {
            None
        }
    };
    compare_tensors_with(n, b, partial)
}

/// As [`compare_tensors`] on the given Gpu with `chunk_elems` per chunk (tests: many chunks on
/// little data); pairs the GPU does not take run on the CPU.
#[cfg(feature = "gpu")]
pub fn compare_tensors_gpu(
    n: &RawTensor,
    b: &RawTensor,
    gpu: &stats_gpu::gpu::Gpu,
    chunk_elems: usize,
) -> TensorResult {
    compare_tensors_with(n, b, |in_f32: bool| {
        in_f32
            .then(|| gpu::gpu_partial_with(n, b, gpu, chunk_elems))
            .flatten()
    })
}

fn compare_tensors_with(
    n: &RawTensor,
    b: &RawTensor,
    gpu: impl FnOnce(bool) -> Option<Partial>,
) -> TensorResult {
    let n_shape = squeeze(n.shape);
    let b_shape = squeeze(b.shape);
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
    let (nk, bk) = (n.dtype.kind(), b.dtype.kind());
    if n_shape.is_empty() {
        return scalar_metrics(n, b, nk, bk);
    }

    // result_type(n, b, float32) after ints/bools became fp64.
    let in_f32 = nk.is_float() && bk.is_float() && nk.max(bk) <= Kind::F32;
    let p = gpu(in_f32).unwrap_or_else(|| {
        (0..numel.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| chunk_partial(n, b, c * CHUNK..((c + 1) * CHUNK).min(numel), in_f32))
            .collect::<Vec<_>>()
            .into_iter()
            .fold(Partial::zero(), Partial::merge)
    });

    if p.any_invalid && p.mask_mismatch {
        return TensorResult::filled(
            "N/A",
            "The position of inf or nan in NPU and bench Tensor do not match.",
            true,
        );
    }
    let mut msg = String::new();
    // bf16 became fp32 when read, so bf16 against fp32 is the same numpy dtype.
    let np_dtype = |d: ElemDtype| {
        if d == ElemDtype::BF16 {
            ElemDtype::F32
        } else {
            d
        }
    };
    if np_dtype(n.dtype) != np_dtype(b.dtype) {
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
    values[1] = Cell::Float(p.ss.sqrt());
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

/// Round an f64 to the precision of a numpy kind (the 0-d path computes in the native dtype).
fn to_kind(x: f64, k: Kind) -> f64 {
    match k {
        Kind::F16 => f16::from_f64(x).to_f64(),
        Kind::F32 => x as f32 as f64,
        _ => x,
    }
}

/// 0-d tensors: only MaxAbsErr and MaxRelativeErr run, in the native dtype (numpy 1.x
/// value-based casting computes the relative error in fp32).
fn scalar_metrics(n: &RawTensor, b: &RawTensor, nk: Kind, bk: Kind) -> TensorResult {
    let mut values: [Cell; 6] = std::array::from_fn(|_| Cell::s("unsupported"));
    let mut msg = String::from(
        "This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', 'One Thousandth Err Ratio' and 'Five Thousandths Err Ratio'. ",
    );
    let (x, y) = (n.get(0), b.get(0));
    let mut alg = String::new();
    alg.push_str(ERR_SCALAR);
    alg.push_str(ERR_SCALAR);
    let max_abs = if nk == Kind::Int && bk == Kind::Int {
        (n.get_i64(0).wrapping_sub(b.get_i64(0))).unsigned_abs() as f64
    } else {
        let k = nk.max(bk).max(Kind::F16);
        let k = if nk == Kind::Bool && bk == Kind::Bool {
            Kind::F64
        } else {
            k
        };
        to_kind(x - y, k).abs()
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

    /// An in-memory (not mapped) tensor over `bytes`.
    fn raw<'a>(dtype: ElemDtype, shape: &'a [usize], bytes: &'a [u8]) -> RawTensor<'a> {
        RawTensor {
            dtype,
            shape,
            bytes,
            mapped: false,
        }
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
            &raw(ElemDtype::F32, &shape, &xb),
            &raw(ElemDtype::F32, &shape, &yb),
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
            &raw(ElemDtype::F32, &shape, &xb),
            &raw(ElemDtype::F32, &shape, &yb),
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

    /// The F16C decode gives half's values for every fp16 bit pattern, and the AVX2/F16C
    /// kernel gives bit-identical partials to the portable one (fp16, bf16, mixed with fp32).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn f16c_kernel_matches_portable_kernel() {
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c"))
        {
            eprintln!("skipped: CPU lacks AVX2/F16C");
            return;
        }
        let all: Vec<u8> = (0..=u16::MAX).flat_map(|v| v.to_le_bytes()).collect();
        let mut fast = vec![0.0f32; 1 << 16];
        // SAFETY: the CPU supports AVX2 and F16C (checked above).
        unsafe { decode_f16_f16c(&all, &mut fast) };
        for (v, got) in (0..=u16::MAX).zip(&fast) {
            let want = f16::from_bits(v).to_f32();
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "fp16 {v:#06x}: {got} vs {want}"
            );
        }

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
        let t = |dtype, bytes| RawTensor {
            dtype,
            shape: &shape,
            bytes,
            mapped: false,
        };
        for dt in [ElemDtype::F16, ElemDtype::BF16] {
            let others = [
                t(dt, &shifted),
                t(dt, &matched),
                t(ElemDtype::F32, &f32_bytes),
            ];
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
                        other.dtype
                    );
                }
            }
        }
    }

    #[test]
    fn squeeze_and_dtype_rules() {
        assert_eq!(squeeze(&[1, 4, 1, 2]), vec![4, 2]);
        assert!(squeeze(&[1, 1]).is_empty());
        let a = bytes_f32(&[1.0, 2.0]);
        let b: Vec<u8> = [1.0f64, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let got = compare_tensors(
            &RawTensor {
                dtype: ElemDtype::F32,
                shape: &[2],
                bytes: &a,
                mapped: false,
            },
            &RawTensor {
                dtype: ElemDtype::F64,
                shape: &[2],
                bytes: &b,
                mapped: false,
            },
        );
        assert_eq!(got.err_msg, "Dtype of NPU and bench tensor do not match.");
        assert_eq!(got.values[2], Cell::Float(0.0));
    }
}
