//! The values msprobe 26.2 records for a tensor (`Max`, `Min`, `Mean`, `Norm`, `md5`), derived
//! from [`Partials`] with msprobe's per-dtype rules (spec §3.1 PyTorch, §3.3 MindSpore, §3.5
//! CRC-32, §3.6 XOR).
//!
//! [`record`] is pure: partials in, record out. [`compute`] reads the tensor once where the
//! [`Backend`] puts it and calls it. Mean/Norm of floating tensors are computed in f64 from the
//! partials and rounded once to the dtype msprobe's framework reports them in (torch/mint
//! compute them in the tensor dtype); they can therefore differ from a device dump in the last
//! bit (spec §10.4). float32 tensors under PyTorch's rules take torch's own CPU summation order
//! instead by default ([`Exactness::TorchCpu`], the [`torch_order`] kernels), which gives
//! msprobe's bits for tensors dumped from a CPU run.

use crate::backend::{Backend, Engine};
use crate::partials::Partials;
use crate::torch_order::{NormOrder, TorchThreads};
use crate::{DType, TensorView, ViewError, checksum, fast, ms_order, torch_order};
use half::slice::HalfFloatSliceExt;
use pyrepr::NonFinite;

/// One statistic as msprobe writes it: a JSON `null`, bool, int or float.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stat {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
}

/// The `md5` key's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Checksum {
    /// `summary_mode: "md5"`: CRC-32 of the raw bytes, written `"%08x"`.
    Crc32(u32),
    /// `summary_mode: "xor"`: XOR checksum (or a 0-dim int/bool's two's complement), `"0x%016x"`.
    Xor(u64),
    /// `summary_mode: "xor"` of a 0-dim float tensor: the value itself, a JSON number.
    XorScalarFloat(f64),
    /// `summary_mode: "xor"` of an empty tensor.
    Null,
}

/// The statistics keys of one tensor record. `None` = key absent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Record {
    pub max: Option<Stat>,
    pub min: Option<Stat>,
    pub mean: Option<Stat>,
    pub norm: Option<Stat>,
    pub md5: Option<Checksum>,
}

/// msprobe's `summary_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SummaryMode {
    #[default]
    Statistics,
    Md5,
    Xor,
}

/// msprobe's `precision` config option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Low,
    High,
}

/// Which framework's processor rules to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Flavour {
    #[default]
    PyTorch,
    MindSpore,
}

/// How float32 Mean and Norm of a PyTorch tensor are summed.
///
/// msprobe records `torch.mean(t)` and `torch.norm(t)`, which PyTorch computes in float32,
/// rounding after every addition in the order of its kernels. [`Exactness::TorchCpu`] replays
/// the order of its CPU kernels and gives those bits; [`Exactness::Rounded`] sums in f64 and
/// rounds once, which is more accurate and may differ from msprobe's value in the last bits.
/// Other dtypes, MindSpore's rules, precision `high` and xor mode are not affected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exactness {
    /// Mean and Norm from f64 sums, rounded once to float32 (on the GPU: its compensated
    /// float32 sums, within 1e-6 relative of those).
    Rounded,
    /// float32 Mean and Norm in the summation order of PyTorch's CPU kernels with `threads`
    /// torch threads (`torch.get_num_threads()` of the run that made the dump; it only matters
    /// for the Mean of tensors of [`torch_order::GRAIN`] elements or more). Applies to the
    /// tensors [`torch_order_applies`] names, when they are reduced on the CPU and their values
    /// are finite; every other tensor gets [`Exactness::Rounded`] values. See [`torch_order`]
    /// for how it was matched against torch: the sum's order exactly, the norm's on 99.3% of
    /// random tensors of 8 to 3000 elements (one float32 ulp off otherwise; tensors under 8
    /// elements take another torch kernel).
    ///
    /// The pass is one chain of additions in torch's order (the norm), so it runs at about one
    /// core's memory bandwidth, where [`Exactness::Rounded`] uses every core. An [`Engine`]
    /// given torch's threads ([`Engine::with_torch_threads`]) reads each thread chunk of a
    /// large tensor on the torch thread that wrote it, one chunk after the other (same bits).
    /// [`Backend::Auto`] keeps these tensors on the CPU; [`Backend::Gpu`] reduces them on the
    /// GPU, with [`Exactness::Rounded`] values.
    TorchCpu {
        /// torch threads; 0 counts as 1.
        threads: usize,
    },
    /// Mean and Norm of float32 and float16 tensors under [`Flavour::MindSpore`] as
    /// MindSpore's CPU kernels compute them (`mint.mean`, `ops.norm`: see [`ms_order`]),
    /// which gives msprobe's bits for tensors dumped from a MindSpore CPU run; this includes
    /// the float32 copies MindSpore's rules reduce (float64, integers, precision high).
    /// Max/Min and other tensors are not affected; the pass runs on the CPU, on one thread.
    MindSporeCpu,
}

impl Default for Exactness {
    /// `TorchCpu { threads: 1 }`: msprobe's bits for PyTorch CPU tensors by default.
    fn default() -> Self {
        Exactness::TorchCpu { threads: 1 }
    }
}

/// Everything that decides a record: msprobe's configuration, the framework, where the pass
/// runs and how float32 Mean/Norm are summed.
///
/// The default is what msprobe's PyTorch adapter writes with its default configuration
/// (`summary_mode: statistics`, `precision: low`), computed where [`Backend::Auto`] puts it,
/// with float32 Mean/Norm in PyTorch's CPU order ([`Exactness::TorchCpu`], one thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Options {
    pub mode: SummaryMode,
    pub precision: Precision,
    pub flavour: Flavour,
    pub backend: Backend,
    pub exact: Exactness,
}

/// Why no record could be computed.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("backend gpu: this build has no GPU support (feature \"gpu\" is off)")]
    NoGpuSupport,
    #[cfg(feature = "gpu")]
    #[error("GPU statistics failed: {0}")]
    Gpu(#[from] crate::gpu::GpuError),
    /// Memory that does not make a tensor view (a non-contiguous array, a wrong length).
    #[error(transparent)]
    View(#[from] ViewError),
}

/// MindSpore casts float64, integer tensors (and everything under precision high) to float32
/// before its four statistics (spec §3.3). Such views go through [`to_f32_values`] and the
/// partials given to [`record`] must be those of the float32 copy.
pub fn mindspore_casts_to_f32(elem: DType, shape_is_scalar: bool, opts: &Options) -> bool {
    opts.flavour == Flavour::MindSpore
        && opts.mode != SummaryMode::Xor
        && !shape_is_scalar
        && elem != DType::Bool
        && !elem.is_complex()
        && elem != DType::F32
        && (elem.is_int()
            || elem == DType::F64
            || is_float8(elem)
            || opts.precision == Precision::High)
}

/// Little-endian float32 bytes of a real tensor (values rounded to nearest, as `.to(float32)`).
/// Bool and complex give no bytes.
pub fn to_f32_bytes(view: &TensorView) -> Vec<u8> {
    if view.dtype() == DType::F32 {
        return view.bytes().to_vec();
    }
    bytemuck::cast_slice(&to_f32_values(view)).to_vec()
}

/// The elements of a real tensor as float32 ([`to_f32_bytes`]'s values, without the second
/// copy into bytes); each dtype's conversion is one `extend` over whole elements, which the
/// compiler vectorises. Bool and complex give none.
pub fn to_f32_values(view: &TensorView) -> Vec<f32> {
    let b = view.bytes();
    let mut out = Vec::with_capacity(view.numel());
    macro_rules! each {
        ($n:literal, $f:expr) => {
            out.extend(
                b.chunks_exact($n)
                    .map(|c| $f(<[u8; $n]>::try_from(c).expect("element"))),
            )
        };
    }
    match view.dtype() {
        DType::U8 => out.extend(b.iter().map(|&x| x as f32)),
        DType::I8 => out.extend(b.iter().map(|&x| x as i8 as f32)),
        DType::I16 => each!(2, |c| i16::from_le_bytes(c) as f32),
        DType::U16 => each!(2, |c| u16::from_le_bytes(c) as f32),
        DType::I32 => each!(4, |c| i32::from_le_bytes(c) as f32),
        DType::U32 => each!(4, |c| u32::from_le_bytes(c) as f32),
        DType::I64 => each!(8, |c| i64::from_le_bytes(c) as f32),
        DType::U64 => each!(8, |c| u64::from_le_bytes(c) as f32),
        // Aligned halves convert by whole vectors (F16C where the CPU has it).
        DType::F16 => match bytemuck::try_cast_slice::<u8, half::f16>(b) {
            Ok(hs) => {
                out.resize(hs.len(), 0.0);
                hs.convert_to_f32_slice(&mut out);
            }
            Err(_) => each!(2, |c| half::f16::from_le_bytes(c).to_f32()),
        },
        // A bfloat16 is a float32's upper half: aligned words take a plain shift.
        DType::BF16 => match bytemuck::try_cast_slice::<u8, u16>(b) {
            Ok(words) => out.extend(
                words
                    .iter()
                    .map(|&w| f32::from_bits(u32::from(u16::from_le(w)) << 16)),
            ),
            Err(_) => each!(2, |c| half::bf16::from_le_bytes(c).to_f32()),
        },
        DType::F32 => each!(4, f32::from_le_bytes),
        DType::F64 => each!(8, |c| f64::from_le_bytes(c) as f32),
        DType::F8E4M3FN => out.extend(b.iter().map(|&x| numprobe_tensor::float8::e4m3fn_to_f32(x))),
        DType::F8E5M2 => out.extend(b.iter().map(|&x| numprobe_tensor::float8::e5m2_to_f32(x))),
        DType::Bool | DType::C64 | DType::C128 => {}
    }
    out
}

/// The record msprobe writes for `view`, given the view's partials (of the float32 copy when
/// [`mindspore_casts_to_f32`] holds) and, for md5/xor modes, `crc`/`xor` of the raw bytes
/// (ignored otherwise; pass 0).
pub fn record(view: &TensorView, p: &Partials, checksum_value: u64, opts: &Options) -> Record {
    let elem = view.dtype();
    if is_float8(elem) && opts.flavour == Flavour::PyTorch {
        return float8_record(checksum_value, opts);
    }
    let scalar = view.is_scalar();
    let md5 = match opts.mode {
        SummaryMode::Statistics => None,
        SummaryMode::Md5 => Some(Checksum::Crc32(checksum_value as u32)),
        SummaryMode::Xor => Some(xor_field(elem, scalar, p, checksum_value)),
    };
    if opts.mode == SummaryMode::Xor {
        return Record {
            max: None,
            min: None,
            mean: None,
            norm: None,
            md5,
        };
    }
    let [max, min, mean, norm] = stats(elem, scalar, p, opts);
    Record {
        max: Some(max),
        min: Some(min),
        mean: Some(mean),
        norm: Some(norm),
        md5,
    }
}

fn xor_field(elem: DType, scalar: bool, p: &Partials, xor: u64) -> Checksum {
    if p.count == 0 {
        return Checksum::Null;
    }
    if scalar {
        if elem.is_float() {
            return Checksum::XorScalarFloat(scalar_float(p));
        }
        if elem.is_int() || elem == DType::Bool {
            // Two's complement masked to 64 bits, as Python's `x & 0xFFFF_FFFF_FFFF_FFFF`.
            return Checksum::Xor(p.int_max as u64);
        }
    }
    Checksum::Xor(xor)
}

/// The single value of a 0-dim float tensor.
fn scalar_float(p: &Partials) -> f64 {
    if p.nan_count > 0 { f64::NAN } else { p.max }
}

fn stats(elem: DType, scalar: bool, p: &Partials, opts: &Options) -> [Stat; 4] {
    use Stat::{Bool, Float, Int, Null};
    if p.count == 0 {
        return [Null; 4];
    }
    if elem == DType::Bool {
        // torch.any/all and np.max/np.min of bools agree.
        return [Bool(p.int_max == 1), Bool(p.int_min == 1), Null, Null];
    }
    let ms = opts.flavour == Flavour::MindSpore;
    if elem.is_complex() && !(ms && scalar) {
        // numpy on abs(): float32 values for complex64, float64 for complex128.
        let dt = if elem == DType::C64 {
            DType::F32
        } else {
            DType::F64
        };
        let [mx, mn, mean, norm] = float_stats(p, dt);
        return [mx, mn, mean, if ms { norm } else { Null }];
    }
    if scalar {
        let v = if elem.is_int() {
            Int(p.int_max)
        } else {
            Float(scalar_float(p))
        };
        return [v; 4];
    }
    if ms {
        // Float64/ints/precision high arrive as the partials of the float32 copy.
        let dt = if mindspore_casts_to_f32(elem, scalar, opts) {
            DType::F32
        } else {
            elem
        };
        return float_stats(p, dt);
    }
    if elem.is_int() {
        return [Int(p.int_max), Int(p.int_min), Null, Null];
    }
    let [mx, mn, mut mean, mut norm] = float_stats(p, elem);
    if elem == DType::F64 || opts.precision == Precision::High {
        return [mx, mn, Null, Null];
    }
    // torch sums float32, float16 and bfloat16 in float32: where a finite tensor's sum or sum
    // of squares leaves float32's range, its Mean or Norm is infinite, whatever the wide sums
    // here give (a bfloat16 mask filled with its minimum; bfloat16 values above 1.8e19).
    if p.nan_count == 0 && p.pos_inf_count == 0 && p.neg_inf_count == 0 {
        if (p.sum as f32).is_infinite() {
            mean = Float(f64::INFINITY.copysign(p.sum));
        }
        if (p.sum_sq as f32).is_infinite() {
            norm = Float(f64::INFINITY);
        }
    }
    [mx, mn, mean, norm]
}

/// Max/Min/Mean/Norm of a real tensor with NaN/inf propagation as torch/numpy give it; Mean
/// and Norm rounded to `dt`.
fn float_stats(p: &Partials, dt: DType) -> [Stat; 4] {
    if p.nan_count > 0 {
        return [Stat::Float(f64::NAN); 4];
    }
    let mean = match (p.pos_inf_count > 0, p.neg_inf_count > 0) {
        (true, true) => f64::NAN,
        (true, false) => f64::INFINITY,
        (false, true) => f64::NEG_INFINITY,
        (false, false) => round_to(p.sum / p.count as f64, dt),
    };
    let norm = if p.pos_inf_count + p.neg_inf_count > 0 {
        f64::INFINITY
    } else {
        round_to(p.sum_sq.sqrt(), dt)
    };
    [
        Stat::Float(p.max),
        Stat::Float(p.min),
        Stat::Float(mean),
        Stat::Float(norm),
    ]
}

/// `x` rounded to nearest in `dt` (for the float dtypes), given back as f64. float16 and
/// bfloat16 go through float32, as the frameworks' float32 results are cast (and because
/// `half`'s conversions from f64 drop the low 32 bits before rounding: a value just above a
/// tie, such as a float32 result, would round as the tie).
pub fn round_to(x: f64, dt: DType) -> f64 {
    match dt {
        DType::F16 => half::f16::from_f32(x as f32).to_f64(),
        DType::BF16 => half::bf16::from_f32(x as f32).to_f64(),
        DType::F32 | DType::C64 => x as f32 as f64,
        _ => x,
    }
}

/// Whether msprobe takes this tensor's Mean and Norm from torch's float32 reductions: a
/// non-0-dim float32 tensor under [`Flavour::PyTorch`], precision low, statistics or md5
/// mode. These are the tensors [`Exactness::TorchCpu`] sums in torch's order.
pub fn torch_order_applies(view: &TensorView, opts: &Options) -> bool {
    view.dtype() == DType::F32
        && !view.is_scalar()
        && opts.precision == Precision::Low
        && opts.flavour == Flavour::PyTorch
        && opts.mode != SummaryMode::Xor
}

/// The norm order of torch's kernel for a bfloat16 or float16 tensor whose msprobe Mean/Norm
/// are torch's float32 reductions of its values converted to float32 (torch reduces those
/// dtypes that way: the float32 sum in [`torch_order`]'s order and the norm in this order,
/// then each rounded to the dtype): the reduced-precision counterpart of
/// [`torch_order_applies`]. None for other dtypes.
fn reduced_torch_order(view: &TensorView, opts: &Options) -> Option<NormOrder> {
    let order = match view.dtype() {
        DType::BF16 => NormOrder::BFloat16,
        DType::F16 => NormOrder::Float16,
        _ => return None,
    };
    (!view.is_scalar()
        && opts.precision == Precision::Low
        && opts.flavour == Flavour::PyTorch
        && opts.mode != SummaryMode::Xor)
        .then_some(order)
}

/// The largest bfloat16 or float16 tensor whose Mean/Norm take torch's order (its float32
/// copy: 64 MiB).
const REDUCED_TORCH_ORDER_MAX: usize = 1 << 24;

fn is_float8(d: DType) -> bool {
    matches!(d, DType::F8E4M3FN | DType::F8E5M2)
}

/// msprobe's PyTorch record of a float8 tensor (spec §3.7): no statistics (four nulls), the
/// CRC-32 of the raw bytes (`crc`) in md5 mode, a null checksum in xor mode.
fn float8_record(crc: u64, opts: &Options) -> Record {
    match opts.mode {
        SummaryMode::Xor => Record {
            max: None,
            min: None,
            mean: None,
            norm: None,
            md5: Some(Checksum::Null),
        },
        mode => Record {
            max: Some(Stat::Null),
            min: Some(Stat::Null),
            mean: Some(Stat::Null),
            norm: Some(Stat::Null),
            md5: (mode == SummaryMode::Md5).then_some(Checksum::Crc32(crc as u32)),
        },
    }
}

/// Runs the reduction for `view` where `opts.backend` and `engine` put it and derives the
/// record with msprobe's rules. md5/xor modes on the CPU read the bytes once (statistics and
/// checksum fused per chunk), as does the torch-order pass of [`Exactness::TorchCpu`].
///
/// float8 tensors carry no statistics under PyTorch's rules (four nulls, see spec §3.7);
/// MindSpore's rules take their float32 values, as msprobe converts them before numpy sees
/// them.
pub fn compute(view: &TensorView, opts: &Options, engine: &Engine) -> Result<Record, StatsError> {
    if is_float8(view.dtype()) && opts.flavour == Flavour::PyTorch {
        return Ok(float8_record(raw_checksum(view, opts), opts));
    }
    let torch_threads = match opts.exact {
        Exactness::TorchCpu { threads } if torch_order_applies(view, opts) => Some(threads.max(1)),
        _ => None,
    };
    let reduced = match opts.exact {
        Exactness::TorchCpu { threads } => {
            reduced_torch_order(view, opts).map(|order| (order, threads.max(1)))
        }
        _ => None,
    };
    // The torch-order bits come from CPU kernels' order: Auto keeps such tensors on the CPU.
    let ms_cpu = opts.exact == Exactness::MindSporeCpu && opts.flavour == Flavour::MindSpore;
    let backend = match (
        torch_threads.is_some() || reduced.is_some() || ms_cpu,
        opts.backend,
    ) {
        (true, Backend::Auto) => Backend::Cpu,
        (_, b) => b,
    };
    if mindspore_casts_to_f32(view.dtype(), view.is_scalar(), opts) {
        let xs = to_f32_values(view);
        let shape = [xs.len()];
        let cast = TensorView::new(DType::F32, &shape, bytemuck::cast_slice(&xs))
            .expect("float32 copy has numel × 4 bytes");
        let p = match engine.stats_gpu(&cast, backend)? {
            Some(gpu) => gpu.partials(&cast)?,
            None => fast::partials(&cast),
        };
        let mut r = record(view, &p, raw_checksum(view, opts), opts);
        if ms_cpu {
            mindspore_cpu_mean_norm(&mut r, &cast, view.shape());
        }
        return Ok(r);
    }
    let gpu = engine.stats_gpu(view, backend)?;
    let torch_threads = torch_threads.filter(|_| gpu.is_none());
    if let Some(threads) = torch_threads
        && let Some(r) = torch_order_record(view, opts, threads, engine.torch_threads())
    {
        return Ok(r);
    }
    if let Some((order, threads)) = reduced.filter(|_| gpu.is_none())
        && let Some(r) = reduced_torch_order_record(view, opts, order, threads)
    {
        return Ok(r);
    }
    let (p, sum) = match (opts.mode, &gpu) {
        (SummaryMode::Statistics, None) => (fast::partials(view), 0),
        (SummaryMode::Md5, None) if !needs_f32_crc(view, opts) => {
            let (p, crc) = fast::partials_and_crc32(view);
            (p, crc as u64)
        }
        (SummaryMode::Xor, None) => fast::partials_and_xor(view),
        (_, gpu) => {
            let p = match gpu {
                Some(gpu) => gpu.partials(view)?,
                None => fast::partials(view),
            };
            (p, raw_checksum(view, opts))
        }
    };
    let mut r = record(view, &p, sum, opts);
    if ms_cpu && !view.is_scalar() {
        mindspore_cpu_mean_norm(&mut r, view, view.shape());
    }
    Ok(r)
}

/// Replaces the float Mean/Norm of `r` by MindSpore's CPU values for a float32 or float16
/// `view` of the tensor's `shape` (other dtypes and empty tensors keep theirs).
fn mindspore_cpu_mean_norm(r: &mut Record, view: &TensorView, shape: &[usize]) {
    if view.numel() == 0 || !matches!(r.mean, Some(Stat::Float(_))) {
        return;
    }
    let (mean, norm) = match view.dtype() {
        DType::F32 => match torch_order::as_f32(view.bytes()) {
            Some(xs) => {
                let (m, n) = ms_order::mean_norm_f32(xs, shape);
                (m as f64, n as f64)
            }
            None => {
                let xs: Vec<f32> = view
                    .bytes()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect();
                let (m, n) = ms_order::mean_norm_f32(&xs, shape);
                (m as f64, n as f64)
            }
        },
        DType::F16 => {
            let xs: Vec<half::f16> = view
                .bytes()
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes(c.try_into().expect("2 bytes")))
                .collect();
            let (m, n) = ms_order::mean_norm_f16(&xs);
            (m.to_f64(), n.to_f64())
        }
        _ => return,
    };
    r.mean = Some(Stat::Float(mean));
    r.norm = Some(Stat::Float(norm));
}

/// The record of a float32 tensor from one pass in torch's summation order (with the CRC-32
/// in md5 mode, hashed block by block behind the statistics); `None` for an empty tensor,
/// bytes not aligned for f32, or a NaN, infinity or overflowing float32 sum, which take the
/// general path.
fn torch_order_record(
    view: &TensorView,
    opts: &Options,
    threads: usize,
    on: Option<&dyn TorchThreads>,
) -> Option<Record> {
    let xs = torch_order::as_f32(view.bytes()).filter(|xs| !xs.is_empty())?;
    // torch sums in per-thread chunks from GRAIN elements on; the norm stays one chain.
    let mut crc = (opts.mode == SummaryMode::Md5).then(crc32fast::Hasher::new);
    let f = torch_order::fused_threads_on(xs, threads, crc.as_mut(), on);
    fused_record(&f, xs.len(), DType::F32, || {
        crc.map(|c| Checksum::Crc32(c.finalize()))
    })
}

/// The record of a bfloat16 or float16 tensor as torch reduces it: its values converted to
/// float32, summed in [`torch_order`]'s order and their norm taken in `order`, Mean and Norm
/// rounded to the dtype; `None` where [`fused_record`] gives up, and outside
/// `VEC..=REDUCED_TORCH_ORDER_MAX` elements (under one vector torch's sum takes a kernel
/// whose order was not pinned down; above, the float32 copy would cost more memory than it
/// is worth: the general path's wide sums round to the same value but rarely, where float32
/// accumulation loses bits).
fn reduced_torch_order_record(
    view: &TensorView,
    opts: &Options,
    order: NormOrder,
    threads: usize,
) -> Option<Record> {
    let n = view.numel();
    if !(torch_order::VEC..=REDUCED_TORCH_ORDER_MAX).contains(&n) {
        return None;
    }
    let xs = to_f32_values(view);
    let f = torch_order::fused_threads_order(&xs, order, threads, None, None);
    fused_record(&f, n, view.dtype(), || {
        (opts.mode == SummaryMode::Md5).then(|| Checksum::Crc32(raw_checksum(view, opts) as u32))
    })
}

/// The record from a torch-order pass over `n` float32 values of a `dt` tensor: Mean and Norm
/// are the pass's float32 results rounded to `dt`, infinite where torch's float32 sums
/// overflow. `None` for data holding a NaN (its square makes the norm NaN), whose records
/// the general path's propagation rules make; ±inf and overflows follow IEEE in torch's
/// order, as torch's do.
fn fused_record(
    f: &torch_order::Fused,
    n: usize,
    dt: DType,
    md5: impl FnOnce() -> Option<Checksum>,
) -> Option<Record> {
    if f.norm.is_nan() {
        return None;
    }
    Some(Record {
        max: Some(Stat::Float(f.max as f64)),
        min: Some(Stat::Float(f.min as f64)),
        mean: Some(Stat::Float(round_to((f.sum / n as f32) as f64, dt))),
        norm: Some(Stat::Float(round_to(f.norm as f64, dt))),
        md5: md5(),
    })
}

/// MindSpore hashes bf16 tensors (and the float32 copy of float8 ones) after converting them
/// to float32 (spec §3.5).
fn needs_f32_crc(view: &TensorView, opts: &Options) -> bool {
    opts.flavour == Flavour::MindSpore && (view.dtype() == DType::BF16 || is_float8(view.dtype()))
}

/// The checksum of the raw bytes for the record's mode (standalone, not fused).
/// The record of a tensor that arrives in C-order chunks, reduced on the CPU in memory
/// bounded by one chunk: a strided view read through its strides (a broadcast view of
/// terabytes from a file of a kilobyte). Mean and Norm are [`Exactness::Rounded`]'s (torch's
/// summation order is that of contiguous memory).
pub struct Streamed {
    dtype: DType,
    opts: Options,
    partials: Partials,
    crc: crc32fast::Hasher,
    xor: u64,
}

impl Streamed {
    pub fn new(dtype: DType, opts: &Options) -> Streamed {
        Streamed {
            dtype,
            opts: *opts,
            partials: Partials::EMPTY,
            crc: crc32fast::Hasher::new(),
            xor: 0,
        }
    }

    /// Adds the next chunk of elements (C order). Every chunk but the last must be a whole
    /// number of 8-byte words long (the XOR checksum works on words of the whole tensor).
    pub fn push(&mut self, chunk: &TensorView) {
        self.partials.merge(&self.chunk_partials(chunk));
        match self.opts.mode {
            SummaryMode::Statistics => {}
            SummaryMode::Md5 if needs_f32_crc(chunk, &self.opts) => {
                self.crc.update(bytemuck::cast_slice(&to_f32_values(chunk)));
            }
            SummaryMode::Md5 => self.crc.update(chunk.bytes()),
            SummaryMode::Xor => self.xor ^= checksum::xor(chunk.bytes()),
        }
    }

    /// Adds `times` repetitions of `chunk` to the statistics, for the broadcast dimensions of a
    /// view. Statistics mode only: a checksum needs every byte ([`Streamed::push`]).
    pub fn push_repeated(&mut self, chunk: &TensorView, times: u64) {
        assert_eq!(
            self.opts.mode,
            SummaryMode::Statistics,
            "checksums need every byte"
        );
        let mut p = self.chunk_partials(chunk);
        if p.count > 0 {
            p.count *= times;
            p.nan_count *= times;
            p.pos_inf_count *= times;
            p.neg_inf_count *= times;
            p.sum *= times as f64;
            p.sum_sq *= times as f64;
        }
        self.partials.merge(&p);
    }

    fn chunk_partials(&self, chunk: &TensorView) -> Partials {
        if is_float8(self.dtype) && self.opts.flavour == Flavour::PyTorch {
            return Partials::EMPTY;
        }
        if mindspore_casts_to_f32(self.dtype, false, &self.opts) {
            let xs = to_f32_values(chunk);
            let shape = [xs.len()];
            let cast = TensorView::new(DType::F32, &shape, bytemuck::cast_slice(&xs))
                .expect("float32 copy has numel × 4 bytes");
            return fast::partials(&cast);
        }
        fast::partials(chunk)
    }

    /// The record msprobe writes for the whole (non-0-dim) tensor.
    pub fn finish(self) -> Record {
        let checksum = match self.opts.mode {
            SummaryMode::Statistics => 0,
            SummaryMode::Md5 => self.crc.finalize() as u64,
            SummaryMode::Xor => self.xor,
        };
        // `record` reads only the dtype and the 0-dim test of its view.
        let view = TensorView::new(self.dtype, &[0], &[]).expect("an empty view");
        record(&view, &self.partials, checksum, &self.opts)
    }
}

fn raw_checksum(view: &TensorView, opts: &Options) -> u64 {
    match opts.mode {
        SummaryMode::Statistics => 0,
        SummaryMode::Md5 if needs_f32_crc(view, opts) => {
            checksum::crc32(bytemuck::cast_slice(&to_f32_values(view))) as u64
        }
        SummaryMode::Md5 => checksum::crc32(view.bytes()) as u64,
        SummaryMode::Xor => checksum::xor(view.bytes()),
    }
}

impl Stat {
    /// JSON text as msprobe's `json.dumps` writes it.
    pub fn to_json(&self) -> String {
        match self {
            Stat::Null => "null".into(),
            Stat::Bool(b) => b.to_string(),
            Stat::Int(i) => i.to_string(),
            Stat::Float(x) => pyrepr::repr_f64_as(*x, NonFinite::Json),
        }
    }
}

impl Checksum {
    /// JSON text of the `md5` value.
    pub fn to_json(&self) -> String {
        match self {
            Checksum::Crc32(c) => format!("\"{}\"", checksum::crc32_hex(*c)),
            Checksum::Xor(x) => format!("\"{}\"", checksum::xor_hex(*x)),
            Checksum::XorScalarFloat(x) => pyrepr::repr_f64_as(*x, NonFinite::Json),
            Checksum::Null => "null".into(),
        }
    }
}

impl Record {
    /// `(key, JSON text)` pairs of the present keys in msprobe's order: `Max`, `Min`, `Mean`,
    /// `Norm`, then `md5`. (In a dump record the xor `md5` sits after `shape` and the CRC `md5`
    /// after `data_name`; the writer places it.)
    pub fn to_json_fields(&self) -> Vec<(&'static str, String)> {
        let stats = [
            ("Max", self.max),
            ("Min", self.min),
            ("Mean", self.mean),
            ("Norm", self.norm),
        ];
        let mut out: Vec<(&'static str, String)> = stats
            .into_iter()
            .filter_map(|(k, v)| v.map(|s| (k, s.to_json())))
            .collect();
        if let Some(c) = self.md5 {
            out.push(("md5", c.to_json()));
        }
        out
    }
}

impl std::fmt::Display for Record {
    /// The present keys as one JSON object, as msprobe's `json.dumps` writes them:
    /// `{"Max": 3.0, "Min": -2.25, "Mean": 0.375, "Norm": 4.0625}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.to_json_fields().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "\"{k}\": {v}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks of a multiple of 8 elements through [`Streamed`] give the record of the whole
    /// tensor on the CPU with Rounded sums, in every mode and for both frameworks' rules;
    /// repeated chunks give the record of the repeated tensor.
    #[test]
    fn streamed_chunks_give_the_whole_tensors_record() {
        let xs: Vec<f32> = (0..1003)
            .map(|i| ((i * 37) % 101) as f32 * 0.25 - 7.0)
            .collect();
        let whole: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let engine = Engine::new();
        for (mode, flavour) in [
            (SummaryMode::Statistics, Flavour::PyTorch),
            (SummaryMode::Md5, Flavour::PyTorch),
            (SummaryMode::Xor, Flavour::PyTorch),
            (SummaryMode::Statistics, Flavour::MindSpore),
        ] {
            let opts = Options {
                mode,
                flavour,
                backend: Backend::Cpu,
                exact: Exactness::Rounded,
                ..Options::default()
            };
            let view = TensorView::new(DType::F32, &[1003], &whole).unwrap();
            let want = compute(&view, &opts, &engine).unwrap();
            let mut s = Streamed::new(DType::F32, &opts);
            for c in whole.chunks(8 * 4 * 9) {
                let shape = [c.len() / 4];
                s.push(&TensorView::new(DType::F32, &shape, c).unwrap());
            }
            assert_eq!(s.finish(), want, "{mode:?} {flavour:?}");
        }
        let opts = Options {
            backend: Backend::Cpu,
            exact: Exactness::Rounded,
            ..Options::default()
        };
        let tripled: Vec<u8> = [&whole[..], &whole[..], &whole[..]].concat();
        let want = compute(
            &TensorView::new(DType::F32, &[3009], &tripled).unwrap(),
            &opts,
            &engine,
        )
        .unwrap();
        let mut s = Streamed::new(DType::F32, &opts);
        s.push_repeated(&TensorView::new(DType::F32, &[1003], &whole).unwrap(), 3);
        assert_eq!(s.finish(), want);
    }

    #[test]
    fn float_stats_print_as_json_dumps() {
        for (x, want) in [
            (1e-5, "1e-05"),
            (3.0, "3.0"),
            (0.3749999701976776, "0.3749999701976776"),
            (-0.0, "-0.0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::INFINITY, "Infinity"),
        ] {
            assert_eq!(Stat::Float(x).to_json(), want, "{x:e}");
            assert_eq!(Checksum::XorScalarFloat(x).to_json(), want, "{x:e}");
        }
    }

    fn f32_view_record(xs: &[f32], shape: &[usize], opts: &Options) -> Record {
        let b: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let v = TensorView::new(DType::F32, shape, &b).unwrap();
        compute(&v, opts, &Engine::new()).unwrap()
    }

    #[test]
    fn spec_examples() {
        let xs = [1.5f32, -2.25, 3.0, 0.1, 0.2, -0.3];
        let r = f32_view_record(
            &xs,
            &[2, 3],
            &Options {
                mode: SummaryMode::Md5,
                ..Options::default()
            },
        );
        let f = r.to_json_fields();
        assert_eq!(f[0], ("Max", "3.0".to_string()));
        assert_eq!(f[1], ("Min", "-2.25".to_string()));
        assert_eq!(f[4], ("md5", "\"7bb36c01\"".to_string()));
        let abs: Vec<f32> = xs.iter().map(|x| x.abs()).collect();
        let r = f32_view_record(
            &abs,
            &[2, 3],
            &Options {
                mode: SummaryMode::Xor,
                ..Options::default()
            },
        );
        assert_eq!(
            r.to_json_fields(),
            vec![("md5", "\"0x4345555741cccccd\"".to_string())]
        );
        let r = f32_view_record(
            &[2.5],
            &[],
            &Options {
                mode: SummaryMode::Xor,
                ..Options::default()
            },
        );
        assert_eq!(r.md5, Some(Checksum::XorScalarFloat(2.5)));
        let r = f32_view_record(
            &[],
            &[0, 3],
            &Options {
                mode: SummaryMode::Xor,
                ..Options::default()
            },
        );
        assert_eq!(r.md5, Some(Checksum::Null));
        let r = f32_view_record(
            &[],
            &[0, 3],
            &Options {
                mode: SummaryMode::Md5,
                ..Options::default()
            },
        );
        assert_eq!(r.max, Some(Stat::Null));
        assert_eq!(r.md5, Some(Checksum::Crc32(0)));
    }

    /// The README's example prints this (a test, so the comment there stays true).
    #[test]
    fn readme_example_record() {
        let x = ndarray::array![[1.5f32, -2.25, 3.0], [0.1, 0.2, -0.3]];
        let opts = Options {
            mode: SummaryMode::Md5,
            ..Options::default()
        };
        let r = crate::statistics(&x, &opts).unwrap();
        assert_eq!(
            r.to_string(),
            r#"{"Max": 3.0, "Min": -2.25, "Mean": 0.375, "Norm": 4.056168079376221, "md5": "7bb36c01"}"#
        );
        let readme = include_str!("../README.md");
        assert!(readme.contains(&format!("    // {r}\n")));
    }

    #[test]
    fn float8_records_carry_no_statistics_under_pytorch() {
        let b = [0x38u8, 0xb8, 0x7f];
        let v = TensorView::new(DType::F8E4M3FN, &[3], &b).unwrap();
        let e = Engine::new();
        let md5 = Options {
            mode: SummaryMode::Md5,
            ..Options::default()
        };
        assert_eq!(
            compute(&v, &md5, &e).unwrap().to_string(),
            format!(
                r#"{{"Max": null, "Min": null, "Mean": null, "Norm": null, "md5": "{}"}}"#,
                checksum::crc32_hex(checksum::crc32(&b))
            )
        );
        let xor = Options {
            mode: SummaryMode::Xor,
            ..Options::default()
        };
        assert_eq!(
            compute(&v, &xor, &e).unwrap().to_string(),
            r#"{"md5": null}"#
        );
        // MindSpore takes the float32 values (1.0, -1.0 and NaN here).
        let ms = Options {
            flavour: Flavour::MindSpore,
            ..Options::default()
        };
        let r = compute(&v, &ms, &e).unwrap();
        assert!(matches!(r.mean, Some(Stat::Float(m)) if m.is_nan()), "{r}");
        let ms_e5m2 = TensorView::new(DType::F8E5M2, &[2], &[0x3c, 0xc0]).unwrap();
        assert_eq!(
            compute(&ms_e5m2, &ms, &e).unwrap().to_string(),
            r#"{"Max": 1.0, "Min": -2.0, "Mean": -0.5, "Norm": 2.2360680103302}"#
        );
    }

    /// Exactness::TorchCpu gives torch's float32 order where it applies, Rounded elsewhere
    /// and for what stays off it (NaN, 0-dim, MindSpore).
    #[test]
    fn torch_order_is_the_default_for_pytorch_float32() {
        // 0.1 repeated: the f64 sum rounded once differs from float32 additions in order.
        let xs = vec![0.1f32; 1000];
        let v = TensorView::from_slice(&[1000], &xs).unwrap();
        let e = Engine::new();
        let torch = compute(&v, &Options::default(), &e).unwrap();
        let rounded = compute(
            &v,
            &Options {
                exact: Exactness::Rounded,
                ..Options::default()
            },
            &e,
        )
        .unwrap();
        let f = torch_order::fused(&xs);
        assert_eq!(torch.mean, Some(Stat::Float((f.sum / 1000.0) as f64)));
        assert_eq!(torch.norm, Some(Stat::Float(f.norm as f64)));
        assert_ne!((torch.mean, torch.norm), (rounded.mean, rounded.norm));
        assert_eq!((torch.max, torch.min), (rounded.max, rounded.min));
        // Four threads: torch's two-pass sum from GRAIN elements on.
        let big: Vec<f32> = (0..100_003).map(|i| (i % 1000) as f32 * 0.001).collect();
        let v = TensorView::from_slice(&[100_003], &big).unwrap();
        let four = Options {
            exact: Exactness::TorchCpu { threads: 4 },
            ..Options::default()
        };
        let r = compute(&v, &four, &e).unwrap();
        assert_eq!(
            r.mean,
            Some(Stat::Float(torch_order::torch_mean(&big, 4) as f64))
        );
        // Not applicable: MindSpore's rules are its own.
        let ms = Options {
            flavour: Flavour::MindSpore,
            ..Options::default()
        };
        let ms_rounded = Options {
            exact: Exactness::Rounded,
            ..ms
        };
        assert_eq!(
            compute(&v, &ms, &e).unwrap(),
            compute(&v, &ms_rounded, &e).unwrap()
        );
    }

    /// Finite float32 data whose sums overflow in float32: torch's Mean and Norm are ±inf (as
    /// torch 2.15 printed them for these tensors on the CPU), not the wide sums' finite
    /// values.
    #[test]
    fn float32_sums_that_overflow_are_torchs() {
        let o = Options::default();
        let mut xs = vec![-3.0e38f32; 56];
        xs.extend([0.25f32; 200]);
        let r = f32_view_record(&xs, &[256], &o);
        assert_eq!(
            [r.max, r.min, r.mean, r.norm],
            [0.25, -3.0e38f32 as f64, f64::NEG_INFINITY, f64::INFINITY]
                .map(|x| Some(Stat::Float(x)))
        );
        let r = f32_view_record(&[1e20, 1e20], &[2], &o);
        assert_eq!(r.mean, Some(Stat::Float(1.0000000200408773e20)));
        assert_eq!(r.norm, Some(Stat::Float(f64::INFINITY)));
        let xs: Vec<f32> = [3.0e38f32; 4].into_iter().chain([-3.0e38; 4]).collect();
        let r = f32_view_record(&xs, &[8], &o);
        assert_eq!(r.mean, Some(Stat::Float(f64::INFINITY)));
        assert_eq!(r.norm, Some(Stat::Float(f64::INFINITY)));
    }

    /// A float32 result just above a tie of two bfloat16 values rounds up (torch 2.15 printed
    /// this Norm for a 64-element tensor whose float32 norm it is); every float32 rounds to
    /// bfloat16 as round-to-nearest-even on its own bits does.
    #[test]
    fn float32_results_round_to_half_precision_exactly() {
        assert_eq!(
            round_to(5.602488251099658e-9, DType::BF16),
            5.617039278149605e-9
        );
        let bf16_rne = |b: u32| -> u32 { (b + 0x7FFF + ((b >> 16) & 1)) >> 16 };
        let mut next = testsupport::lcg(0x9E37_79B9_7F4A_7C15);
        for i in 0..200_000u32 {
            let state = next();
            // Random bits, and values just above and below bfloat16 ties.
            let bits = match i % 3 {
                0 => (state >> 32) as u32,
                1 => ((state >> 32) as u32 & !0xFFFF) | 0x8000 | (i & 7),
                _ => ((state >> 32) as u32 & !0xFFFF) | 0x7FF8 | (i & 7),
            };
            let x = f32::from_bits(bits);
            if !x.is_finite() || (bits & 0x7F80_0000) == 0x7F00_0000 {
                continue; // NaN/inf, and the last binade (it may round to inf either way)
            }
            let want = f32::from_bits(bf16_rne(bits) << 16) as f64;
            assert_eq!(
                round_to(x as f64, DType::BF16).to_bits(),
                want.to_bits(),
                "{bits:#x}"
            );
        }
    }

    /// The same for bfloat16, which torch sums in float32 too (torch 2.15's CPU values).
    #[test]
    fn bfloat16_sums_that_overflow_float32_are_torchs() {
        let o = Options::default();
        let bf = |xs: &[f32]| -> Vec<u8> {
            xs.iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect()
        };
        let mut xs = vec![half::bf16::MIN.to_f32(); 56];
        xs.extend([0.25f32; 200]);
        let bytes = bf(&xs);
        let v = TensorView::new(DType::BF16, &[256], &bytes).unwrap();
        let r = compute(&v, &o, &Engine::new()).unwrap();
        assert_eq!(r.mean, Some(Stat::Float(f64::NEG_INFINITY)));
        assert_eq!(r.norm, Some(Stat::Float(f64::INFINITY)));
        let bytes = bf(&[1e20, 1e20]);
        let v = TensorView::new(DType::BF16, &[2], &bytes).unwrap();
        let r = compute(&v, &o, &Engine::new()).unwrap();
        assert_eq!(r.mean, Some(Stat::Float(9.972771014849226e19)));
        assert_eq!(r.norm, Some(Stat::Float(f64::INFINITY)));
    }

    #[test]
    fn nan_and_inf_rules() {
        let o = Options::default();
        let r = f32_view_record(
            &[1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -2.0],
            &[5],
            &o,
        );
        assert!(matches!(r.max, Some(Stat::Float(x)) if x.is_nan()));
        assert!(matches!(r.norm, Some(Stat::Float(x)) if x.is_nan()));
        let r = f32_view_record(&[f32::INFINITY, 1.0, 2.0], &[3], &o);
        assert_eq!(
            [r.max, r.min, r.mean, r.norm],
            [f64::INFINITY, 1.0, f64::INFINITY, f64::INFINITY].map(|x| Some(Stat::Float(x)))
        );
        let r = f32_view_record(&[f32::INFINITY, f32::NEG_INFINITY], &[2], &o);
        assert!(matches!(r.mean, Some(Stat::Float(x)) if x.is_nan()));
        assert_eq!(r.norm, Some(Stat::Float(f64::INFINITY)));
    }

    #[test]
    fn dtype_rules() {
        let int64: Vec<u8> = [10i64, -20, 40, 30]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let v = TensorView::new(DType::I64, &[2, 2], &int64).unwrap();
        let pt = compute(&v, &Options::default(), &Engine::new()).unwrap();
        assert_eq!(
            [pt.max, pt.min, pt.mean, pt.norm],
            [Stat::Int(40), Stat::Int(-20), Stat::Null, Stat::Null].map(Some)
        );
        let ms = Options {
            flavour: Flavour::MindSpore,
            ..Options::default()
        };
        let r = compute(&v, &ms, &Engine::new()).unwrap();
        let f = r.to_json_fields();
        assert_eq!(f[0].1, "40.0");
        assert_eq!(f[2].1, "15.0");
        assert_eq!(f[3].1, "54.772254943847656");

        let neg7 = (-7i64).to_le_bytes();
        let v = TensorView::new(DType::I64, &[], &neg7).unwrap();
        let r = compute(&v, &Options::default(), &Engine::new()).unwrap();
        assert_eq!(r.mean, Some(Stat::Int(-7)));
        let x = Options {
            mode: SummaryMode::Xor,
            ..Options::default()
        };
        let r = compute(&v, &x, &Engine::new()).unwrap();
        assert_eq!(r.to_json_fields()[0].1, "\"0xfffffffffffffff9\"");
        let t = [1u8];
        let v = TensorView::new(DType::Bool, &[], &t).unwrap();
        assert_eq!(
            compute(&v, &x, &Engine::new()).unwrap().md5,
            Some(Checksum::Xor(1))
        );
        let r = compute(&v, &Options::default(), &Engine::new()).unwrap();
        assert_eq!(
            [r.max, r.min, r.mean],
            [Stat::Bool(true), Stat::Bool(true), Stat::Null].map(Some)
        );

        let bf: Vec<u8> = [1.5f32, -2.25, 3.0, 0.1, 0.2, -0.3]
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        let v = TensorView::new(DType::BF16, &[2, 3], &bf).unwrap();
        let md5 = Options {
            mode: SummaryMode::Md5,
            ..Options::default()
        };
        let r = compute(&v, &md5, &Engine::new()).unwrap();
        assert_eq!(r.norm, Some(Stat::Float(4.0625)));
        assert_eq!(r.mean, Some(Stat::Float(0.375)));
        assert_eq!(r.md5, Some(Checksum::Crc32(0x7627_51ad)));
        let high = Options {
            precision: Precision::High,
            ..Options::default()
        };
        let r = compute(&v, &high, &Engine::new()).unwrap();
        assert_eq!((r.mean, r.norm), (Some(Stat::Null), Some(Stat::Null)));

        let c: Vec<u8> = [1.0f32, 1.0, -3.0, 4.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let v = TensorView::new(DType::C64, &[2], &c).unwrap();
        let r = compute(&v, &x, &Engine::new()).unwrap();
        assert_eq!(r.to_json_fields()[0].1, "\"0x7f000000ffc00000\"");
        let r = compute(&v, &Options::default(), &Engine::new()).unwrap();
        assert_eq!(r.max, Some(Stat::Float(5.0)));
        assert_eq!(
            r.mean,
            Some(Stat::Float(((2f32.sqrt() + 5.0) / 2.0) as f64))
        );
        assert_eq!(r.norm, Some(Stat::Null));
    }
}
