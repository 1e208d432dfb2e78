//! Per-standard metrics, typed as msprobe returns them, built from one fused pass.

use crate::elem::{Elem, Work};
use crate::fused::{DeviceFamily, FusedStats, Params, Scope, fused_stats};
use crate::pyfmt::PyVal;
use numprobe_tensor::{DType, Elems};
use rayon::prelude::*;

/// The elements of a float array numpy holds (float16, float32, float64) as exact f64 values;
/// `None` for any other dtype.
pub(crate) fn float_values(a: Elems<'_>) -> Option<Vec<f64>> {
    Some(match a {
        Elems::F16(a) => a.iter().map(|x| x.to_f64()).collect(),
        Elems::F32(a) => a.iter().map(|&x| f64::from(x)).collect(),
        Elems::F64(a) => a.to_vec(),
        _ => return None,
    })
}

/// Inputs the metrics cannot be computed on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    #[error("bench has {bench} elements but device has {device}")]
    LengthMismatch { bench: usize, device: usize },
    /// The metrics run on numpy's float dtypes; msprobe widens bfloat16 and float8 outputs to
    /// float32 before it computes them.
    #[error("the metrics take float16, float32 or float64 arrays, not {}", .0.numpy_name())]
    NotFloat(DType),
}

/// Benchmark standard columns (标杆比对法).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchmarkMetrics {
    pub small_value_err_ratio: PyVal,
    pub max_rel_error: PyVal,
    pub mean_rel_error: PyVal,
    pub rmse: PyVal,
    pub eb: PyVal,
}

/// Absolute threshold standard columns (绝对阈值法).
#[derive(Clone, Debug, PartialEq)]
pub struct AbsoluteThresholdMetrics {
    pub inf_nan_error_ratio: PyVal,
    pub rel_err_ratio: PyVal,
    pub abs_err_ratio: PyVal,
}

/// ULP standard columns (ULP误差比对法).
#[derive(Clone, Debug, PartialEq)]
pub struct UlpMetrics {
    pub max_ulp_error: PyVal,
    pub mean_ulp_error: PyVal,
    pub ulp_error_proportion: PyVal,
}

/// Accumulative-error standard columns (累积误差比对法).
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulativeMetrics {
    pub inf_nan_error_ratio: PyVal,
    pub rel_err_ratio: PyVal,
    pub abs_err_ratio: PyVal,
    pub eb: PyVal,
}

/// run_ut's cosine similarity result (value, passed, message).
#[derive(Clone, Debug, PartialEq)]
pub struct Cosine {
    pub value: PyVal,
    pub pass: bool,
    pub message: &'static str,
}

/// A dual ratio (双百/双千/双万) and whether it passed.
#[derive(Clone, Debug, PartialEq)]
pub struct Ratio {
    pub value: PyVal,
    pub pass: bool,
}

/// Every metric of every standard for one (bench, device) float pair. Fields that msprobe
/// cannot compute (e.g. `max` of an empty array) are `None`, and so are the other standards'
/// of a pass with [`Scope::Benchmark`].
#[derive(Clone, Debug, PartialEq)]
pub struct AllMetrics {
    pub n: usize,
    pub max_abs_err: Option<PyVal>,
    pub max_abs_err_value: f64,
    pub hundredth: Ratio,
    pub thousandth: Ratio,
    pub ten_thousandth: Ratio,
    pub benchmark: Option<BenchmarkMetrics>,
    pub absolute_threshold: Option<AbsoluteThresholdMetrics>,
    pub ulp: Option<UlpMetrics>,
    pub accumulative: Option<AccumulativeMetrics>,
    /// 二进制一致错误率 of the float pair (a Python float).
    pub binary_error_rate: Option<PyVal>,
    pub cosine: Cosine,
}

/// `num / den` as a numpy float64, or Python's `0` when nothing was counted.
pub(crate) fn ratio_or_zero(num: u64, den: u64) -> PyVal {
    if den == 0 {
        PyVal::py_int(0)
    } else {
        PyVal::np_f64(num as f64 / den as f64)
    }
}

/// A dual-hundredths/thousandths/ten-thousandths share and its verdict (1 for an empty pair).
pub(crate) fn dual_ratio(count: u64, n: usize, t: f64) -> Ratio {
    if n == 0 {
        return Ratio {
            value: PyVal::py_int(1),
            pass: 1.0 > 1.0 - t,
        };
    }
    let r = count as f64 / n as f64;
    Ratio {
        value: PyVal::np_f64(r),
        pass: r > 1.0 - t,
    }
}

const COS_SCALAR: &str =
    "All the data in device dump data is scalar. Please refer to other compare algorithms.";

fn cosine<B: Elem, D: Elem, W: Work, U: Work>(
    s: &FusedStats<W, U>,
    bench: &[B],
    device: &[D],
) -> Cosine {
    let (md, mb) = (s.max_abs_device, s.max_abs_bench);
    let safe = |m: f64| (2f64.powi(-300)..2f64.powi(300)).contains(&m);
    let raw = (safe(md) && safe(mb) && s.n < (1 << 40)).then_some((s.dot, s.dd, s.bb));
    cosine_from(s.n, md, mb, raw, || {
        // Fixed chunks summed in order: the same bits on any thread pool (a rayon `reduce`
        // splits by the pool's size and by work stealing).
        bench
            .par_chunks(RESCALED_CHUNK)
            .zip(device.par_chunks(RESCALED_CHUNK))
            .map(|(bc, dc)| {
                bc.iter().zip(dc).fold((0.0, 0.0, 0.0), |a, (b, d)| {
                    let (x, y) = (d.to_f64() / md, b.to_f64() / mb);
                    (a.0 + x * y, a.1 + x * x, a.2 + y * y)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .fold((0.0, 0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1, a.2 + p.2))
    })
}

/// Elements per chunk of the rescaled cosine sums.
const RESCALED_CHUNK: usize = 1 << 16;

/// run_ut's cosine (`cosine_sim`) from the largest magnitudes of each side (`md` device, `mb`
/// bench) and the sums Σd·b, Σd², Σb². `raw` holds the unscaled sums when the caller trusts
/// them; otherwise (extreme magnitudes) `rescaled` recomputes the sums of the values divided by
/// their side's max, as msprobe does to avoid overflow.
pub(crate) fn cosine_from(
    n: usize,
    md: f64,
    mb: f64,
    raw: Option<(f64, f64, f64)>,
    rescaled: impl FnOnce() -> (f64, f64, f64),
) -> Cosine {
    let space = PyVal::space();
    if n == 1 {
        return Cosine {
            value: space,
            pass: true,
            message: COS_SCALAR,
        };
    }
    let e = f64::EPSILON;
    if md <= e && mb <= e {
        return Cosine {
            value: space,
            pass: true,
            message: "All the data in device and bench outputs are zero.",
        };
    } else if md <= e {
        return Cosine {
            value: space,
            pass: false,
            message: "All the data is zero in device dump data.",
        };
    } else if mb <= e {
        return Cosine {
            value: space,
            pass: false,
            message: "All the data is zero in bench dump data.",
        };
    }
    let nan = Cosine {
        value: PyVal::py_float(f64::NAN),
        pass: true,
        message: "Dump data has NaN when comparing with Cosine Similarity.",
    };
    if !md.is_finite() || !mb.is_finite() {
        return nan;
    }
    let (dot, dd, bb) = match raw {
        Some((dot, dd, bb)) => (dot / (md * mb), dd / (md * md), bb / (mb * mb)),
        None => rescaled(),
    };
    let cos = dot / (dd.sqrt() * bb.sqrt());
    if cos.is_nan() {
        return nan;
    }
    let cos = cos.clamp(-1.0, 1.0);
    Cosine {
        value: PyVal::np_f64(cos),
        pass: cos > 0.99,
        message: "",
    }
}

fn finish<B: Elem, D: Elem, W: Work, U: Work>(
    s: FusedStats<W, U>,
    p: &Params,
    bench: &[B],
    device: &[D],
    zero_d: bool,
) -> AllMetrics {
    let n = s.n;
    let nn = n as u64;
    // A 0-d bf16 pair: `|B| + eps` adds a Python float to a numpy scalar, which numpy 1.x
    // widens to float64, so the relative error is float64 too.
    let rel64 = (zero_d && n == 1 && p.eps_is_python_float).then(|| {
        let abs_b = bench[0].to_f64().abs();
        s.max_abs_err.to_f64() / (abs_b + p.eps)
    });
    let eb = if n == 0 {
        PyVal::py_int(0)
    } else {
        PyVal::np_f64(s.up.abs_diff(s.down) as f64 / n as f64)
    };
    let benchmark = (n > 0).then(|| {
        let k = s.inf_nan + s.small;
        // numpy 1.x computes a 0-d input's masked intermediates (np.where with a Python
        // scalar) in float64.
        let typed = |x: W| {
            if zero_d {
                PyVal::np_f64(x.to_f64())
            } else {
                x.pyval()
            }
        };
        let (mut max_rel, mut mean_rel) = if s.max_rel >= W::ZERO {
            (typed(s.max_rel), typed(s.mean_rel()))
        } else {
            (PyVal::py_int(0), PyVal::py_int(0))
        };
        if let (Some(r), true) = (rel64, s.rel_valid == 1) {
            max_rel = PyVal::np_f64(r);
            mean_rel = PyVal::np_f64(r);
        }
        let mse = if zero_d {
            if k > 0 {
                0.0
            } else {
                s.max_abs_err.to_f64().powi(2)
            }
        } else {
            W::mean_from_sum(s.sum_sq, n).to_f64()
        };
        let factor = n as f64 / ((nn - k) as f64 + 0.0001) + 0.0001;
        BenchmarkMetrics {
            small_value_err_ratio: ratio_or_zero(s.small_err_benchmark, s.small),
            max_rel_error: max_rel,
            mean_rel_error: mean_rel,
            rmse: PyVal::np_f64((mse * factor).sqrt()),
            eb: eb.clone(),
        }
    });
    let all = p.scope == Scope::AllStandards;
    let normal = nn - s.inf_nan - s.small;
    let absolute_threshold = all.then(|| AbsoluteThresholdMetrics {
        inf_nan_error_ratio: ratio_or_zero(s.inf_nan_fail_rtol, s.inf_nan),
        rel_err_ratio: ratio_or_zero(s.normal_rel_err, normal),
        abs_err_ratio: ratio_or_zero(s.small_err_threshold, s.small),
    });
    let accumulative = all.then(|| AccumulativeMetrics {
        inf_nan_error_ratio: ratio_or_zero(s.inf_nan_fail_bound, s.inf_nan),
        rel_err_ratio: ratio_or_zero(s.acc_normal_rel_err, s.acc_normal),
        abs_err_ratio: ratio_or_zero(s.acc_small_err, s.acc_small),
        eb,
    });
    let ulp = (all && p.ulp.is_some() && n > 0).then(|| UlpMetrics {
        max_ulp_error: s.max_ulp.pyval(),
        mean_ulp_error: U::mean_from_sum(s.sum_ulp, n).pyval(),
        ulp_error_proportion: PyVal::np_f64(s.ulp_over as f64 / n as f64),
    });
    AllMetrics {
        n,
        max_abs_err: (n > 0).then(|| s.max_abs_err.pyval()),
        max_abs_err_value: s.max_abs_err.to_f64(),
        hundredth: dual_ratio(rel64.map_or(s.lt_hundredth, |r| (r < 0.01) as u64), n, 0.01),
        thousandth: dual_ratio(
            rel64.map_or(s.lt_thousandth, |r| (r < 0.001) as u64),
            n,
            0.001,
        ),
        ten_thousandth: dual_ratio(
            rel64.map_or(s.lt_ten_thousandth, |r| (r < 0.0001) as u64),
            n,
            0.0001,
        ),
        benchmark,
        absolute_threshold,
        ulp,
        accumulative,
        binary_error_rate: (all && n > 0).then(|| PyVal::py_float(s.not_equal as f64 / n as f64)),
        cosine: cosine(&s, bench, device),
    }
}

fn run<B: Elem, D: Elem, W: Work, U: Work>(
    bench: &[B],
    device: &[D],
    p: &Params,
    zero_d: bool,
) -> AllMetrics {
    let s = fused_stats::<B, D, W, U>(bench, device, p);
    finish(s, p, bench, device, zero_d)
}

/// Computes every metric of one output pair in one fused pass.
///
/// `bench`/`device` are the host arrays as msprobe hands them to numpy: float16, float32 or
/// float64 elements (a bf16 device output arrives as float32 values with `family == BF16`).
/// Lengths must match.
pub fn all_metrics(
    bench: Elems<'_>,
    device: Elems<'_>,
    family: DeviceFamily,
) -> Result<AllMetrics, MetricsError> {
    all_metrics_shaped(bench, device, family, false)
}

/// As [`all_metrics`]; `zero_d` marks a 0-d tensor, whose intermediates numpy 1.x widens.
pub fn all_metrics_shaped(
    bench: Elems<'_>,
    device: Elems<'_>,
    family: DeviceFamily,
    zero_d: bool,
) -> Result<AllMetrics, MetricsError> {
    metrics_in_scope(bench, device, family, zero_d, Scope::AllStandards)
}

/// As [`all_metrics_shaped`], gathering only the standards of `scope` (the others are `None`).
pub fn metrics_in_scope(
    bench: Elems<'_>,
    device: Elems<'_>,
    family: DeviceFamily,
    zero_d: bool,
    scope: Scope,
) -> Result<AllMetrics, MetricsError> {
    if bench.len() != device.len() {
        return Err(MetricsError::LengthMismatch {
            bench: bench.len(),
            device: device.len(),
        });
    }
    for side in [bench, device] {
        if !matches!(side.dtype(), DType::F16 | DType::F32 | DType::F64) {
            return Err(MetricsError::NotFloat(side.dtype()));
        }
    }
    let p = Params::new(family, bench.dtype(), device.dtype()).with_scope(scope);
    // ULP arithmetic is float32 for fp16/bf16 devices and float64 otherwise.
    let ulp32 = matches!(family, DeviceFamily::F16 | DeviceFamily::BF16);
    macro_rules! go {
        ($b:expr, $d:expr, $w:ty) => {
            if ulp32 {
                run::<_, _, $w, f32>($b, $d, &p, zero_d)
            } else {
                run::<_, _, $w, f64>($b, $d, &p, zero_d)
            }
        };
    }
    Ok(match (bench, device) {
        (Elems::F16(b), Elems::F16(d)) => go!(b, d, f32),
        (Elems::F16(b), Elems::F32(d)) => go!(b, d, f32),
        (Elems::F32(b), Elems::F16(d)) => go!(b, d, f32),
        (Elems::F32(b), Elems::F32(d)) => go!(b, d, f32),
        (Elems::F16(b), Elems::F64(d)) => go!(b, d, f64),
        (Elems::F32(b), Elems::F64(d)) => go!(b, d, f64),
        (Elems::F64(b), Elems::F16(d)) => go!(b, d, f64),
        (Elems::F64(b), Elems::F32(d)) => go!(b, d, f64),
        (Elems::F64(b), Elems::F64(d)) => go!(b, d, f64),
        _ => unreachable!("both dtypes were checked above"),
    })
}

/// Signed element-wise ULP error of an fp8 output (spec §2, fp8 variant), in float64.
pub fn fp8_ulp_errors(bench: &[f64], device: &[f64]) -> Vec<f64> {
    let tiny = 2f64.powi(-1000);
    bench
        .iter()
        .zip(device)
        .map(|(&x, &h)| {
            let mut ex = (x.abs() + tiny).log2();
            if ex < -22.0 {
                ex = -22.0;
            }
            let e = ex.floor();
            let ea = e.abs();
            let wm = if ea <= 3.0 {
                3.0
            } else if ea <= 7.0 {
                2.0
            } else if ea <= 15.0 {
                1.0
            } else {
                0.0
            };
            if wm == 0.0 {
                let sx = ex * if x >= 0.0 { 1.0 } else { -1.0 };
                let eh = (h.abs() + tiny).log2();
                let sh = eh * if h >= 0.0 { 1.0 } else { -1.0 };
                sh - sx
            } else {
                (h - x) * (-e + wm).exp2()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Magnitudes past 2^300 take the rescaled cosine sums, which must not depend on how many
    /// threads the pool has (run_ut's metrics thread is a pool of one).
    #[test]
    fn rescaled_cosine_does_not_depend_on_the_thread_pool() {
        let n = 200_003;
        let bench: Vec<f64> = (0..n).map(|i| ((i % 977) as f64 - 488.3) * 1e303).collect();
        let device: Vec<f64> = bench
            .iter()
            .enumerate()
            .map(|(i, b)| b * (1.0 + (i % 13) as f64 * 1e-9))
            .collect();
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    all_metrics(Elems::F64(&bench), Elems::F64(&device), DeviceFamily::Other)
                        .unwrap()
                        .cosine
                })
        };
        let one = run(1);
        assert!(one.value.as_f64().unwrap() > 0.999_999, "{one:?}");
        for threads in [2, 3, 8] {
            assert_eq!(run(threads), one, "{threads} threads");
        }
    }
}
