//! The values msprobe 26.2 records for a tensor (`Max`, `Min`, `Mean`, `Norm`, `md5`), derived
//! from [`Partials`] with msprobe's per-dtype rules (spec §3.1 PyTorch, §3.3 MindSpore, §3.5
//! CRC-32, §3.6 XOR).
//!
//! [`record`] is pure: partials in, record out. [`compute`] reads the tensor once on the chosen
//! device and calls it. Mean/Norm of floating tensors are computed in f64 from the partials and
//! rounded once to the dtype msprobe's framework reports them in (torch/mint compute them in
//! the tensor dtype); they can therefore differ from a device dump in the last bit (spec §10.4).

use crate::checksum;
use crate::elem::{ElemType, TensorView};
use crate::fast;
use crate::partials::Partials;
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Options {
    pub mode: SummaryMode,
    pub precision: Precision,
    pub flavour: Flavour,
}

/// Where [`compute`] runs the reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Device {
    Cpu,
    Gpu,
    /// The GPU for large tensors of a dtype it supports when a hardware GPU is available, else
    /// the CPU.
    #[default]
    Auto,
}

/// Tensors at least this large go to the GPU under [`Device::Auto`]; below it the transfer
/// costs more than the CPU pass.
pub const AUTO_GPU_MIN_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("--device gpu: this build has no GPU support (feature \"gpu\" is off)")]
    NoGpuSupport,
    #[cfg(feature = "gpu")]
    #[error("GPU statistics failed: {0}")]
    Gpu(#[from] crate::gpu::GpuError),
}

/// MindSpore casts float64, integer tensors (and everything under precision high) to float32
/// before its four statistics (spec §3.3). Such views go through [`to_f32_bytes`] and the
/// partials given to [`record`] must be those of the float32 copy.
pub fn mindspore_casts_to_f32(elem: ElemType, shape_is_scalar: bool, opts: &Options) -> bool {
    opts.flavour == Flavour::MindSpore
        && opts.mode != SummaryMode::Xor
        && !shape_is_scalar
        && elem != ElemType::Bool
        && !elem.is_complex()
        && elem != ElemType::F32
        && (elem.is_int() || elem == ElemType::F64 || opts.precision == Precision::High)
}

/// Little-endian float32 bytes of a real tensor (values rounded to nearest, as `.to(float32)`).
/// Bool and complex give no bytes.
pub fn to_f32_bytes(view: &TensorView) -> Vec<u8> {
    let b = view.bytes();
    let mut out = Vec::with_capacity(view.numel() * 4);
    let mut put = |x: f32| out.extend_from_slice(&x.to_le_bytes());
    macro_rules! each {
        ($n:literal, $f:expr) => {
            b.chunks_exact($n)
                .for_each(|c| put($f(c.try_into().expect("element"))))
        };
    }
    match view.elem() {
        ElemType::U8 => b.iter().for_each(|&x| put(x as f32)),
        ElemType::I8 => b.iter().for_each(|&x| put(x as i8 as f32)),
        ElemType::I16 => each!(2, |c| i16::from_le_bytes(c) as f32),
        ElemType::U16 => each!(2, |c| u16::from_le_bytes(c) as f32),
        ElemType::I32 => each!(4, |c| i32::from_le_bytes(c) as f32),
        ElemType::U32 => each!(4, |c| u32::from_le_bytes(c) as f32),
        ElemType::I64 => each!(8, |c| i64::from_le_bytes(c) as f32),
        ElemType::U64 => each!(8, |c| u64::from_le_bytes(c) as f32),
        ElemType::F16 => each!(2, |c| half::f16::from_le_bytes(c).to_f32()),
        ElemType::BF16 => each!(2, |c| half::bf16::from_le_bytes(c).to_f32()),
        ElemType::F32 => out.extend_from_slice(b),
        ElemType::F64 => each!(8, |c| f64::from_le_bytes(c) as f32),
        ElemType::Bool | ElemType::C64 | ElemType::C128 => {}
    }
    out
}

/// The record msprobe writes for `view`, given the view's partials (of the float32 copy when
/// [`mindspore_casts_to_f32`] holds) and, for md5/xor modes, `crc`/`xor` of the raw bytes
/// (ignored otherwise; pass 0).
pub fn record(view: &TensorView, p: &Partials, checksum_value: u64, opts: &Options) -> Record {
    let elem = view.elem();
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

fn xor_field(elem: ElemType, scalar: bool, p: &Partials, xor: u64) -> Checksum {
    if p.count == 0 {
        return Checksum::Null;
    }
    if scalar {
        if elem.is_float() {
            return Checksum::XorScalarFloat(scalar_float(p));
        }
        if elem.is_int() || elem == ElemType::Bool {
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

fn stats(elem: ElemType, scalar: bool, p: &Partials, opts: &Options) -> [Stat; 4] {
    use Stat::{Bool, Float, Int, Null};
    if p.count == 0 {
        return [Null; 4];
    }
    if elem == ElemType::Bool {
        // torch.any/all and np.max/np.min of bools agree.
        return [Bool(p.int_max == 1), Bool(p.int_min == 1), Null, Null];
    }
    let ms = opts.flavour == Flavour::MindSpore;
    if elem.is_complex() && !(ms && scalar) {
        // numpy on abs(): float32 values for complex64, float64 for complex128.
        let dt = if elem == ElemType::C64 {
            ElemType::F32
        } else {
            ElemType::F64
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
            ElemType::F32
        } else {
            elem
        };
        return float_stats(p, dt);
    }
    if elem.is_int() {
        return [Int(p.int_max), Int(p.int_min), Null, Null];
    }
    let [mx, mn, mean, norm] = float_stats(p, elem);
    if elem == ElemType::F64 || opts.precision == Precision::High {
        return [mx, mn, Null, Null];
    }
    [mx, mn, mean, norm]
}

/// Max/Min/Mean/Norm of a real tensor with NaN/inf propagation as torch/numpy give it; Mean
/// and Norm rounded to `dt`.
fn float_stats(p: &Partials, dt: ElemType) -> [Stat; 4] {
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

/// `x` rounded to nearest in `dt` (for the float dtypes), given back as f64.
pub fn round_to(x: f64, dt: ElemType) -> f64 {
    match dt {
        ElemType::F16 => half::f16::from_f64(x).to_f64(),
        ElemType::BF16 => half::bf16::from_f64(x).to_f64(),
        ElemType::F32 | ElemType::C64 => x as f32 as f64,
        _ => x,
    }
}

/// Runs the reduction for `view` on `device` and derives the record. md5/xor modes on the CPU
/// read the bytes once (statistics and checksum fused per chunk).
pub fn compute(view: &TensorView, opts: &Options, device: Device) -> Result<Record, StatsError> {
    if mindspore_casts_to_f32(view.elem(), view.is_scalar(), opts) {
        let bytes = to_f32_bytes(view);
        let shape = [bytes.len() / 4];
        // Length is 4 × numel by construction.
        let cast = TensorView::new(ElemType::F32, &shape, &bytes)
            .expect("float32 copy has numel × 4 bytes");
        let p = partials_on(&cast, device)?;
        return Ok(record(view, &p, raw_checksum(view, opts), opts));
    }
    let on_gpu = use_gpu(view, device)?;
    let (p, sum) = match (opts.mode, on_gpu) {
        (SummaryMode::Statistics, false) => (fast::partials(view), 0),
        (SummaryMode::Md5, false) if !needs_f32_crc(view, opts) => {
            let (p, crc) = fast::partials_and_crc32(view);
            (p, crc as u64)
        }
        (SummaryMode::Xor, false) => fast::partials_and_xor(view),
        (_, gpu) => {
            let p = if gpu {
                gpu_partials(view)?
            } else {
                fast::partials(view)
            };
            (p, raw_checksum(view, opts))
        }
    };
    Ok(record(view, &p, sum, opts))
}

/// MindSpore hashes bf16 tensors after converting them to float32 (spec §3.5).
fn needs_f32_crc(view: &TensorView, opts: &Options) -> bool {
    opts.flavour == Flavour::MindSpore && view.elem() == ElemType::BF16
}

/// The checksum of the raw bytes for the record's mode (standalone, not fused).
fn raw_checksum(view: &TensorView, opts: &Options) -> u64 {
    match opts.mode {
        SummaryMode::Statistics => 0,
        SummaryMode::Md5 if needs_f32_crc(view, opts) => {
            checksum::crc32(&to_f32_bytes(view)) as u64
        }
        SummaryMode::Md5 => checksum::crc32(view.bytes()) as u64,
        SummaryMode::Xor => checksum::xor(view.bytes()),
    }
}

fn partials_on(view: &TensorView, device: Device) -> Result<Partials, StatsError> {
    if use_gpu(view, device)? {
        gpu_partials(view)
    } else {
        Ok(fast::partials(view))
    }
}

/// Whether this tensor runs on the GPU. `Device::Gpu` with a dtype the GPU kernel lacks runs
/// on the CPU; `Device::Gpu` without a usable GPU is an error.
#[cfg(feature = "gpu")]
fn use_gpu(view: &TensorView, device: Device) -> Result<bool, StatsError> {
    use crate::gpu::Gpu;
    Ok(match device {
        Device::Cpu => false,
        Device::Gpu => {
            Gpu::global()?;
            Gpu::supports(view.elem())
        }
        // A software adapter (lavapipe) is slower than the CPU path it runs on, so `Auto`
        // only takes real GPUs.
        Device::Auto => {
            view.bytes().len() >= AUTO_GPU_MIN_BYTES
                && Gpu::supports(view.elem())
                && Gpu::global().is_ok_and(|g| {
                    g.adapter_info().device_type != crate::gpu::wgpu::DeviceType::Cpu
                })
        }
    })
}

#[cfg(not(feature = "gpu"))]
fn use_gpu(_view: &TensorView, device: Device) -> Result<bool, StatsError> {
    match device {
        Device::Gpu => Err(StatsError::NoGpuSupport),
        Device::Cpu | Device::Auto => Ok(false),
    }
}

#[cfg(feature = "gpu")]
fn gpu_partials(view: &TensorView) -> Result<Partials, StatsError> {
    Ok(crate::gpu::Gpu::global()?.partials(view)?)
}

#[cfg(not(feature = "gpu"))]
fn gpu_partials(_view: &TensorView) -> Result<Partials, StatsError> {
    Err(StatsError::NoGpuSupport)
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let v = TensorView::new(ElemType::F32, shape, &b).unwrap();
        compute(&v, opts, Device::Cpu).unwrap()
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
        let v = TensorView::new(ElemType::I64, &[2, 2], &int64).unwrap();
        let pt = compute(&v, &Options::default(), Device::Cpu).unwrap();
        assert_eq!(
            [pt.max, pt.min, pt.mean, pt.norm],
            [Stat::Int(40), Stat::Int(-20), Stat::Null, Stat::Null].map(Some)
        );
        let ms = Options {
            flavour: Flavour::MindSpore,
            ..Options::default()
        };
        let r = compute(&v, &ms, Device::Cpu).unwrap();
        let f = r.to_json_fields();
        assert_eq!(f[0].1, "40.0");
        assert_eq!(f[2].1, "15.0");
        assert_eq!(f[3].1, "54.772254943847656");

        let neg7 = (-7i64).to_le_bytes();
        let v = TensorView::new(ElemType::I64, &[], &neg7).unwrap();
        let r = compute(&v, &Options::default(), Device::Cpu).unwrap();
        assert_eq!(r.mean, Some(Stat::Int(-7)));
        let x = Options {
            mode: SummaryMode::Xor,
            ..Options::default()
        };
        let r = compute(&v, &x, Device::Cpu).unwrap();
        assert_eq!(r.to_json_fields()[0].1, "\"0xfffffffffffffff9\"");
        let t = [1u8];
        let v = TensorView::new(ElemType::Bool, &[], &t).unwrap();
        assert_eq!(
            compute(&v, &x, Device::Cpu).unwrap().md5,
            Some(Checksum::Xor(1))
        );
        let r = compute(&v, &Options::default(), Device::Cpu).unwrap();
        assert_eq!(
            [r.max, r.min, r.mean],
            [Stat::Bool(true), Stat::Bool(true), Stat::Null].map(Some)
        );

        let bf: Vec<u8> = [1.5f32, -2.25, 3.0, 0.1, 0.2, -0.3]
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        let v = TensorView::new(ElemType::BF16, &[2, 3], &bf).unwrap();
        let md5 = Options {
            mode: SummaryMode::Md5,
            ..Options::default()
        };
        let r = compute(&v, &md5, Device::Cpu).unwrap();
        assert_eq!(r.norm, Some(Stat::Float(4.0625)));
        assert_eq!(r.mean, Some(Stat::Float(0.375)));
        assert_eq!(r.md5, Some(Checksum::Crc32(0x7627_51ad)));
        let high = Options {
            precision: Precision::High,
            ..Options::default()
        };
        let r = compute(&v, &high, Device::Cpu).unwrap();
        assert_eq!((r.mean, r.norm), (Some(Stat::Null), Some(Stat::Null)));

        let c: Vec<u8> = [1.0f32, 1.0, -3.0, 4.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let v = TensorView::new(ElemType::C64, &[2], &c).unwrap();
        let r = compute(&v, &x, Device::Cpu).unwrap();
        assert_eq!(r.to_json_fields()[0].1, "\"0x7f000000ffc00000\"");
        let r = compute(&v, &Options::default(), Device::Cpu).unwrap();
        assert_eq!(r.max, Some(Stat::Float(5.0)));
        assert_eq!(
            r.mean,
            Some(Stat::Float(((2f32.sqrt() + 5.0) / 2.0) as f64))
        );
        assert_eq!(r.norm, Some(Stat::Null));
    }
}
