//! The fused pass on the GPU (feature `gpu`): stats-gpu's pair kernel, fed with this crate's
//! thresholds and log2 semantics, joined into the same [`AllMetrics`] the CPU path returns.
//!
//! Handled on the GPU (float32 working dtype): an fp32 device with an fp32 bench, an fp16
//! device (f16 data) with an fp32 bench, a bf16 device (as f32 values, or packed bf16) with an
//! fp32 bench. Not handled: a float64 bench or device (WGSL has no f64; run_ut's fp32 device
//! comes with an fp64 bench) and 0-d tensors: [`all_metrics_on`] routes those to the CPU.
//!
//! Counts, maxima and every cell derived from them are exact. The sums (`sum_sq`, `rel_sum`,
//! `sum_ulp`, the cosine's) are compensated and land within 1e-6 relative of the CPU's for the
//! five tolerance cells (cosine, RMSE, mean relative error, mean ULP error; error balance is
//! exact here). The CPU reproduces numpy's float32 pairwise order bit for bit; the GPU sums are
//! closer to the exact sum, so for float32 sums over tens of millions of elements the two may
//! differ by numpy's own rounding (about 1e-6 at 64 Mi elements).

use std::sync::OnceLock;

use rayon::prelude::*;
/// The device side of a pair (stats-gpu takes the typed slices of numprobe-tensor).
pub use stats_gpu::Elems as PairDevice;
use stats_gpu::gpu::{Gpu, GpuError, PairParams, PairPartials};
/// Where [`all_metrics_on`] computes: stats-gpu's one switch. [`Backend::Auto`] sends pairs of
/// at least [`AUTO_GPU_MIN_ELEMS`] elements to a hardware GPU.
pub use stats_gpu::{Backend, Engine};

use crate::elem::{Elem, Work};
use crate::fused::{DeviceFamily, FusedStats, Params};
use crate::metrics::{
    AbsoluteThresholdMetrics, AccumulativeMetrics, AllMetrics, BenchmarkMetrics, Cosine,
    MetricsError, UlpMetrics, all_metrics_shaped, cosine_from, dual_ratio, ratio_or_zero,
};
use crate::pyfmt::PyVal;
use numprobe_tensor::{DType, Elems};

/// Per biased float32 exponent, the lowest mantissa whose `floor(log2|x|)` (as this crate's
/// CPU path computes it) is one above the exponent; 0x800000 where none is. `None` if that
/// set is not a contiguous top range of the binade (then a table cannot express it).
fn log2_bump() -> Option<&'static [u32; 256]> {
    static TABLE: OnceLock<Option<Box<[u32; 256]>>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let mut t = Box::new([0x80_0000u32; 256]);
            for ef in 1u32..255 {
                let e = f64::from(ef as i32 - 127);
                let bumped = |m: u32| f32::from_bits((ef << 23) | m).floor_log2_abs() > e;
                let mut lowest = 0x80_0000;
                for m in (0..0x80_0000u32).rev() {
                    if !bumped(m) {
                        break;
                    }
                    lowest = m;
                }
                // Below the top range, every mantissa must give the exponent itself; the CPU
                // path only consults log2 in the binade's top 4097 mantissas.
                let start = lowest.saturating_sub(4200);
                if (start..lowest).any(bumped) {
                    return None;
                }
                t[ef as usize] = lowest;
            }
            Some(t)
        })
        .as_deref()
}

/// Why the GPU pass cannot run.
#[derive(Debug, thiserror::Error)]
pub enum GpuFusedError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("the float32 log2 of this platform is not monotonic near binade tops")]
    Log2Table,
    #[error("the GPU pass handles fp32, fp16 and bf16 devices with a float32 bench, not {0}")]
    Unsupported(String),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
}

/// Pair parameters for a device of `family` compared with a float32 bench; `chunk_elems` 0 =
/// the Gpu's chunk.
pub fn pair_params(family: DeviceFamily, chunk_elems: usize) -> Result<PairParams, GpuFusedError> {
    let device_dtype = match family {
        DeviceFamily::F16 => DType::F16,
        DeviceFamily::BF16 | DeviceFamily::F32 => DType::F32,
        DeviceFamily::Other => {
            return Err(GpuFusedError::Unsupported(
                "a float64 (or other) device".into(),
            ));
        }
    };
    let p = Params::new(family, DType::F32, device_dtype);
    let (mant, emin) = p.ulp.expect("fp16, bf16 and fp32 have ULP parameters");
    let f = |x: f64| x as f32;
    Ok(PairParams {
        eps: f(p.eps),
        small_value: f(p.small_value),
        atol_benchmark: f(p.atol_benchmark),
        atol_threshold: f(p.atol_threshold),
        rtol: f(p.rtol),
        accumulative_bound: f(p.accumulative_bound),
        rel_thresholds: [0.01, 0.001, 0.0001],
        ulp_mant: mant,
        ulp_emin: emin,
        // The thresholds (32 for fp32, 1 otherwise) are powers of two.
        ulp_threshold_exp: p.ulp_threshold.log2() as i32,
        factor_t_max: 127,
        // ULP errors are float64 for an fp32 device, float32 for fp16 / bf16.
        ulp_max_exp: if family == DeviceFamily::F32 {
            1023
        } else {
            127
        },
        log2_bump: Box::new(*log2_bump().ok_or(GpuFusedError::Log2Table)?),
        clip_max: f(p.clip_max),
        round_bench_f16: family == DeviceFamily::F16,
        chunk_elems,
    })
}

/// Pair parameters for an fp32 device and an fp32 bench; `chunk_elems` 0 = the Gpu's chunk.
pub fn pair_params_f32(chunk_elems: usize) -> Result<PairParams, GpuFusedError> {
    pair_params(DeviceFamily::F32, chunk_elems)
}

/// The GPU partials of an fp32 (bench, device) pair; field meanings as in `FusedStats`
/// (maxima in f64, exactly the f32 values the CPU path gives).
pub fn gpu_fused_f32(
    gpu: &Gpu,
    bench: &[f32],
    device: &[f32],
    chunk_elems: usize,
) -> Result<PairPartials, GpuFusedError> {
    gpu_fused(
        gpu,
        bench,
        PairDevice::F32(device),
        DeviceFamily::F32,
        chunk_elems,
    )
}

/// The device data a family accepts: f16 data for fp16, f32 (values) or bf16 data for bf16,
/// f32 for fp32.
fn check_family(device: &PairDevice<'_>, family: DeviceFamily) -> Result<(), GpuFusedError> {
    let ok = matches!(
        (device, family),
        (PairDevice::F16(_), DeviceFamily::F16)
            | (PairDevice::F32(_) | PairDevice::BF16(_), DeviceFamily::BF16)
            | (PairDevice::F32(_), DeviceFamily::F32)
    );
    if ok {
        Ok(())
    } else {
        Err(GpuFusedError::Unsupported(format!(
            "{device_kind} data for a {family:?} device",
            device_kind = device.dtype().numpy_name()
        )))
    }
}

/// The GPU partials of a float32 bench and a device of `family`.
pub fn gpu_fused(
    gpu: &Gpu,
    bench: &[f32],
    device: PairDevice<'_>,
    family: DeviceFamily,
    chunk_elems: usize,
) -> Result<PairPartials, GpuFusedError> {
    check_family(&device, family)?;
    let params = pair_params(family, chunk_elems)?;
    Ok(gpu.pair_partials(PairDevice::F32(bench), device, &params)?)
}

/// Every metric of one (bench, device) pair from the GPU pass; the cells equal those of
/// [`crate::all_metrics`] on the same data (see the module notes for the sums).
pub fn all_metrics_gpu(
    gpu: &Gpu,
    bench: &[f32],
    device: PairDevice<'_>,
    family: DeviceFamily,
    chunk_elems: usize,
) -> Result<AllMetrics, GpuFusedError> {
    if bench.len() != device.len() {
        return Err(MetricsError::LengthMismatch {
            bench: bench.len(),
            device: device.len(),
        }
        .into());
    }
    let g = gpu_fused(gpu, bench, device, family, chunk_elems)?;
    Ok(join(&g, family, bench, device))
}

/// Below this many elements the upload and dispatch cost more than the CPU pass.
pub const AUTO_GPU_MIN_ELEMS: usize = 4 << 20;

/// All metrics of a pair, as [`all_metrics_shaped`], on the GPU of `engine` when `backend`
/// and the data allow (see [`Backend`]); the engine opens its GPU on first need.
pub fn all_metrics_on(
    bench: Elems<'_>,
    device: Elems<'_>,
    family: DeviceFamily,
    zero_d: bool,
    engine: &Engine<'_>,
    backend: Backend,
) -> Result<AllMetrics, GpuFusedError> {
    if bench.len() != device.len() {
        return Err(MetricsError::LengthMismatch {
            bench: bench.len(),
            device: device.len(),
        }
        .into());
    }
    let gpu_input = match (bench, device, family, zero_d) {
        (_, _, _, true) => None,
        (Elems::F32(b), Elems::F16(d), DeviceFamily::F16, _) => Some((b, PairDevice::F16(d))),
        (Elems::F32(b), Elems::F32(d), DeviceFamily::F32 | DeviceFamily::BF16, _) => {
            Some((b, PairDevice::F32(d)))
        }
        _ => None,
    };
    let large = gpu_input
        .as_ref()
        .is_some_and(|(b, _)| b.len() >= AUTO_GPU_MIN_ELEMS);
    let use_gpu = engine.select(backend, gpu_input.is_some(), large)?;
    match (use_gpu, gpu_input) {
        (Some(gpu), Some((b, d))) => all_metrics_gpu(gpu, b, d, family, 0),
        _ => Ok(all_metrics_shaped(bench, device, family, zero_d)?),
    }
}

/// `np.mean` of a float32 array from its sum: the sum is a float32, divided in float64.
fn mean_f32(sum: f64, n: u64) -> f32 {
    (f64::from(sum as f32) / n as f64) as f32
}

/// The GPU partials as the CPU's `metrics::finish` turns its fused statistics into cells (for
/// a non-0-d pair with a float32 working dtype). Keep in step with `metrics.rs`.
fn join(
    g: &PairPartials,
    family: DeviceFamily,
    bench: &[f32],
    device: PairDevice<'_>,
) -> AllMetrics {
    let n = g.n as usize;
    let nn = g.n;
    let eb = if n == 0 {
        PyVal::py_int(0)
    } else {
        PyVal::np_f64(g.up.abs_diff(g.down) as f64 / n as f64)
    };
    let benchmark = (n > 0).then(|| {
        let k = g.inf_nan + g.small;
        let (max_rel, mean_rel) = if g.max_rel >= 0.0 {
            (
                PyVal::F32(g.max_rel as f32),
                PyVal::F32(mean_f32(g.rel_sum, g.rel_valid)),
            )
        } else {
            (PyVal::py_int(0), PyVal::py_int(0))
        };
        let mse = f64::from(mean_f32(g.sum_sq, nn));
        let factor = n as f64 / ((nn - k) as f64 + 0.0001) + 0.0001;
        BenchmarkMetrics {
            small_value_err_ratio: ratio_or_zero(g.small_err_benchmark, g.small),
            max_rel_error: max_rel,
            mean_rel_error: mean_rel,
            rmse: PyVal::np_f64((mse * factor).sqrt()),
            eb: eb.clone(),
        }
    });
    let normal = nn - g.inf_nan - g.small;
    let absolute_threshold = AbsoluteThresholdMetrics {
        inf_nan_error_ratio: ratio_or_zero(g.inf_nan_fail_rtol, g.inf_nan),
        rel_err_ratio: ratio_or_zero(g.normal_rel_err, normal),
        abs_err_ratio: ratio_or_zero(g.small_err_threshold, g.small),
    };
    let accumulative = AccumulativeMetrics {
        inf_nan_error_ratio: ratio_or_zero(g.inf_nan_fail_bound, g.inf_nan),
        rel_err_ratio: ratio_or_zero(g.acc_normal_rel_err, g.acc_normal),
        abs_err_ratio: ratio_or_zero(g.acc_small_err, g.acc_small),
        eb,
    };
    let ulp = (n > 0).then(|| {
        let (max_ulp, mean_ulp) = if family == DeviceFamily::F32 {
            (
                PyVal::np_f64(g.max_ulp),
                PyVal::np_f64(g.sum_ulp / n as f64),
            )
        } else {
            (
                PyVal::F32(g.max_ulp as f32),
                PyVal::F32(mean_f32(g.sum_ulp, nn)),
            )
        };
        UlpMetrics {
            max_ulp_error: max_ulp,
            mean_ulp_error: mean_ulp,
            ulp_error_proportion: PyVal::np_f64(g.ulp_over as f64 / n as f64),
        }
    });
    AllMetrics {
        n,
        max_abs_err: (n > 0).then_some(PyVal::F32(g.max_abs_err as f32)),
        max_abs_err_value: g.max_abs_err,
        hundredth: dual_ratio(g.lt_hundredth, n, 0.01),
        thousandth: dual_ratio(g.lt_thousandth, n, 0.001),
        ten_thousandth: dual_ratio(g.lt_ten_thousandth, n, 0.0001),
        benchmark,
        absolute_threshold: Some(absolute_threshold),
        ulp,
        accumulative: Some(accumulative),
        binary_error_rate: (n > 0).then(|| PyVal::py_float(g.not_equal as f64 / n as f64)),
        cosine: cosine(g, bench, device),
    }
}

fn device_at(device: &PairDevice<'_>, i: usize) -> f64 {
    match device {
        PairDevice::F32(a) => f64::from(a[i]),
        PairDevice::F16(a) => a[i].to_f64(),
        PairDevice::BF16(a) => a[i].to_f64(),
        _ => unreachable!("check_family admits f32, f16 and bf16 devices only"),
    }
}

/// run_ut's cosine from the GPU's max-abs values and sums (`metrics::cosine_from`); the sums
/// are redone on the CPU when the GPU left elements out of them or the magnitudes are extreme.
fn cosine(g: &PairPartials, bench: &[f32], device: PairDevice<'_>) -> Cosine {
    let (md, mb) = (g.max_abs_device, g.max_abs_bench);
    // The GPU sums lose low parts of products below about 2^-100: trust them only when each
    // side reaches 2^-30 somewhere, so those losses are far below the sums.
    let gpu_sums_ok = |m: f64| m >= 2f64.powi(-30);
    let raw = (g.cos_out_of_range == 0 && gpu_sums_ok(md) && gpu_sums_ok(mb))
        .then_some((g.dot, g.dd, g.bb));
    cosine_from(g.n as usize, md, mb, raw, || {
        (0..bench.len())
            .into_par_iter()
            .map(|i| {
                let (x, y) = (device_at(&device, i) / md, f64::from(bench[i]) / mb);
                (x * y, x * x, y * y)
            })
            .reduce(|| (0.0, 0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    })
}

/// The counts of the GPU partials that differ from the CPU fused pass's, as `name gpu vs cpu`
/// (counts are exact on both paths: any entry is a bug). For parity tests and device checks.
pub fn count_mismatches<W: Work, U: Work>(g: &PairPartials, c: &FusedStats<W, U>) -> Vec<String> {
    let counts = [
        ("n", g.n, c.n as u64),
        ("lt_hundredth", g.lt_hundredth, c.lt_hundredth),
        ("lt_thousandth", g.lt_thousandth, c.lt_thousandth),
        (
            "lt_ten_thousandth",
            g.lt_ten_thousandth,
            c.lt_ten_thousandth,
        ),
        ("inf_nan", g.inf_nan, c.inf_nan),
        ("small", g.small, c.small),
        (
            "small_err_benchmark",
            g.small_err_benchmark,
            c.small_err_benchmark,
        ),
        (
            "small_err_threshold",
            g.small_err_threshold,
            c.small_err_threshold,
        ),
        ("normal_rel_err", g.normal_rel_err, c.normal_rel_err),
        ("acc_small", g.acc_small, c.acc_small),
        ("acc_small_err", g.acc_small_err, c.acc_small_err),
        ("acc_normal", g.acc_normal, c.acc_normal),
        (
            "acc_normal_rel_err",
            g.acc_normal_rel_err,
            c.acc_normal_rel_err,
        ),
        ("up", g.up, c.up),
        ("down", g.down, c.down),
        ("not_equal", g.not_equal, c.not_equal),
        ("rel_valid", g.rel_valid, c.rel_valid),
        ("ulp_over", g.ulp_over, c.ulp_over),
        (
            "inf_nan_fail_rtol",
            g.inf_nan_fail_rtol,
            c.inf_nan_fail_rtol,
        ),
        (
            "inf_nan_fail_bound",
            g.inf_nan_fail_bound,
            c.inf_nan_fail_bound,
        ),
    ];
    counts
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .map(|(name, a, b)| format!("{name} {a} vs {b}"))
        .collect()
}
