//! A plain, array-at-a-time implementation of the metrics, written step by step after msprobe's
//! numpy expressions. It materialises every intermediate array (so it is slow) and serves as the
//! oracle the fused pass is tested against.
//!
//! Arrays are given as exact f64 values plus their numpy dtype; every numpy operation is an f64
//! operation rounded to the kind numpy computes it in (for +,-,*,/ on float32/float16 operands
//! this double rounding is exact, since f64 carries more than twice their precision plus two).

use crate::elem::{NumpyFloat, exp2_int, np_mean, np_sum};
use crate::fused::{DeviceFamily, Params};
use crate::metrics::{AbsoluteThresholdMetrics, AccumulativeMetrics, BenchmarkMetrics, UlpMetrics};
use crate::pyfmt::PyVal;
use numprobe_tensor::DType;

/// One (bench, device) pair as numpy holds it: exact values and their numpy dtype (float16,
/// float32 or float64).
#[derive(Clone, Copy, Debug)]
pub struct Pair<'a> {
    pub bench: &'a [f64],
    pub bench_dtype: DType,
    pub device: &'a [f64],
    pub device_dtype: DType,
    pub family: DeviceFamily,
}

impl Pair<'_> {
    fn w(&self) -> DType {
        self.bench_dtype.promote(self.device_dtype)
    }
    fn params(&self) -> Params {
        Params::new(self.family, self.bench_dtype, self.device_dtype)
    }
}

fn np_max(a: &[f64]) -> f64 {
    a.iter().fold(f64::NEG_INFINITY, |m, &x| {
        if m.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            m.max(x)
        }
    })
}

fn mean_in(dtype: DType, a: &[f64]) -> f64 {
    match dtype {
        DType::F64 => np_mean(a),
        _ => {
            let v: Vec<f32> = a.iter().map(|&x| x as f32).collect();
            np_mean(&v) as f64
        }
    }
}

fn sum_in(dtype: DType, a: &[f64]) -> f64 {
    match dtype {
        DType::F64 => np_sum(a),
        _ => {
            let v: Vec<f32> = a.iter().map(|&x| x as f32).collect();
            np_sum(&v) as f64
        }
    }
}

fn ratio(num: usize, den: usize) -> PyVal {
    if den == 0 {
        PyVal::py_int(0)
    } else {
        PyVal::np_f64(num as f64 / den as f64)
    }
}

/// `np.abs(device - bench)` in the promoted dtype.
pub fn abs_err(p: &Pair<'_>) -> Vec<f64> {
    let w = p.w();
    p.bench
        .iter()
        .zip(p.device)
        .map(|(&b, &d)| w.round(d - b).abs())
        .collect()
}

/// `|B| + eps` in the bench dtype.
pub fn abs_bench_with_eps(p: &Pair<'_>) -> Vec<f64> {
    let eps = p.params().eps;
    p.bench
        .iter()
        .map(|&b| p.bench_dtype.round(b.abs() + eps))
        .collect()
}

/// `rel_err_origin = |abs_err / abs_bench_with_eps|`.
pub fn rel_err_origin(p: &Pair<'_>) -> Vec<f64> {
    let w = p.w();
    abs_err(p)
        .iter()
        .zip(abs_bench_with_eps(p))
        .map(|(&a, e)| w.round(a / e).abs())
        .collect()
}

/// (both_finite, inf_nan) masks.
fn finite_masks(p: &Pair<'_>) -> Vec<bool> {
    p.bench
        .iter()
        .zip(p.device)
        .map(|(&b, &d)| d.is_finite() && p.device_dtype.round(b).is_finite())
        .collect()
}

fn small_mask(p: &Pair<'_>, finite: &[bool], small_value: f64) -> Vec<bool> {
    p.bench
        .iter()
        .zip(finite)
        .map(|(&b, &f)| b.abs() <= small_value && f)
        .collect()
}

/// `get_error_balance`.
pub fn error_balance(p: &Pair<'_>) -> PyVal {
    let dk = p.device_dtype;
    let diffs: Vec<f64> = p
        .bench
        .iter()
        .zip(p.device)
        .map(|(&b, &d)| dk.round(d - dk.round(b)))
        .collect();
    let up = diffs.iter().filter(|&&x| x > 0.0).count() as i64;
    let down = diffs.iter().filter(|&&x| x < 0.0).count() as i64;
    let n = p.bench.len();
    if n == 0 {
        PyVal::py_int(0)
    } else {
        PyVal::np_f64((up - down).abs() as f64 / n as f64)
    }
}

/// The benchmark standard (`BenchmarkCompare`), for a non-empty, non-0-d pair.
pub fn benchmark(p: &Pair<'_>) -> BenchmarkMetrics {
    let w = p.w();
    let prm = p.params();
    let ae = abs_err(p);
    let abe = abs_bench_with_eps(p);
    let finite = finite_masks(p);
    let small = small_mask(p, &finite, prm.small_value);
    let atol = w.round(prm.atol_benchmark);
    let n_small = small.iter().filter(|&&s| s).count();
    let n_small_err = small
        .iter()
        .zip(&ae)
        .filter(|(s, a)| **s && **a > atol)
        .count();
    let mask: Vec<bool> = finite.iter().zip(&small).map(|(&f, &s)| !f || s).collect();
    let rel_err: Vec<f64> = ae
        .iter()
        .zip(&abe)
        .zip(&mask)
        .map(|((&a, &e), &m)| if m { -1.0 } else { w.round(a / e) })
        .collect();
    let max_rel = np_max(&rel_err);
    let valid: Vec<f64> = rel_err.iter().copied().filter(|&r| r >= 0.0).collect();
    let masked_sq: Vec<f64> = ae
        .iter()
        .zip(&mask)
        .map(|(&a, &m)| if m { 0.0 } else { w.round(a * a) })
        .collect();
    let mse = mean_in(w, &masked_sq);
    let n = ae.len();
    let k = mask.iter().filter(|&&m| m).count();
    let factor = n as f64 / ((n - k) as f64 + 0.0001) + 0.0001;
    BenchmarkMetrics {
        small_value_err_ratio: ratio(n_small_err, n_small),
        max_rel_error: if max_rel >= 0.0 {
            w.pyval(max_rel)
        } else {
            PyVal::py_int(0)
        },
        mean_rel_error: if valid.is_empty() {
            PyVal::py_int(0)
        } else {
            w.pyval(mean_in(w, &valid))
        },
        rmse: PyVal::np_f64((mse * factor).sqrt()),
        eb: error_balance(p),
    }
}

/// `check_inf_nan_value` with tolerance `tol`.
fn inf_nan_ratio(p: &Pair<'_>, finite: &[bool], tol: f64) -> PyVal {
    let dk = p.device_dtype;
    let prm = p.params();
    let abe = abs_bench_with_eps(p);
    let clip = |x: f64| {
        if x.is_nan() {
            x
        } else {
            x.clamp(-prm.clip_max, prm.clip_max)
        }
    };
    let mut fails = 0;
    let mut total = 0;
    for i in 0..p.bench.len() {
        if finite[i] {
            continue;
        }
        total += 1;
        let gc = clip(dk.round(p.bench[i]));
        let nc = clip(p.device[i]);
        let re = dk
            .promote(p.bench_dtype)
            .round(dk.round(nc - gc).abs() / abe[i]);
        let pass = re <= tol || (p.device[i].is_nan() && gc.is_nan());
        fails += (!pass) as usize;
    }
    ratio(fails, total)
}

fn threshold_rates(p: &Pair<'_>, small_value: f64, rtol: f64, atol: f64) -> (PyVal, PyVal, PyVal) {
    let w = p.w();
    let ae = abs_err(p);
    let abe = abs_bench_with_eps(p);
    let finite = finite_masks(p);
    let small = small_mask(p, &finite, small_value);
    let normal: Vec<bool> = finite.iter().zip(&small).map(|(&f, &s)| f && !s).collect();
    let rel: Vec<f64> = ae.iter().zip(&abe).map(|(&a, &e)| w.round(a / e)).collect();
    let n_normal = normal.iter().filter(|&&m| m).count();
    let rel_fail = rel
        .iter()
        .zip(&normal)
        .filter(|(r, m)| **m && **r > w.round(rtol))
        .count();
    let n_small = small.iter().filter(|&&m| m).count();
    let abs_fail = ae
        .iter()
        .zip(&small)
        .filter(|(a, m)| **m && **a > w.round(atol))
        .count();
    (
        inf_nan_ratio(p, &finite, rtol),
        ratio(rel_fail, n_normal),
        ratio(abs_fail, n_small),
    )
}

/// The absolute-threshold standard (`AbsolutethdCompare`).
pub fn absolute_threshold(p: &Pair<'_>) -> AbsoluteThresholdMetrics {
    let prm = p.params();
    let (i, r, a) = threshold_rates(p, prm.small_value, prm.rtol, prm.atol_threshold);
    AbsoluteThresholdMetrics {
        inf_nan_error_ratio: i,
        rel_err_ratio: r,
        abs_err_ratio: a,
    }
}

/// The accumulative-error standard (`AccumulativeErrorCompare`).
pub fn accumulative(p: &Pair<'_>) -> AccumulativeMetrics {
    let b = p.params().accumulative_bound;
    let (i, r, a) = threshold_rates(p, 1.0, b, b);
    AccumulativeMetrics {
        inf_nan_error_ratio: i,
        rel_err_ratio: r,
        abs_err_ratio: a,
        eb: error_balance(p),
    }
}

/// Element-wise ULP error (`get_ulp_err`) for fp16/bf16/fp32 devices; `None` for other dtypes.
pub fn ulp_errors(p: &Pair<'_>) -> Option<Vec<f64>> {
    let (mant, emin) = p.params().ulp?;
    let bk = p.bench_dtype;
    let u = if p.family == DeviceFamily::F32 {
        DType::F64
    } else {
        DType::F32
    };
    let log2_in = |a: f64| match bk {
        DType::F64 => a.log2(),
        DType::F32 => (a as f32).log2() as f64,
        DType::F16 => DType::F16.round((a as f32).log2() as f64),
        other => panic!("{other:?} is not one of numpy's float dtypes"),
    };
    Some(
        p.bench
            .iter()
            .zip(p.device)
            .map(|(&b, &d)| {
                let a = b.abs();
                let eb = if a == 0.0 { 0.0 } else { log2_in(a).floor() };
                let eb = if eb.is_nan() { eb } else { eb.max(emin as f64) };
                let factor = u.round(bk.round(exp2_int(mant as f64 - eb)));
                let diff = u.round(u.round(d) - b);
                u.round(diff * factor).abs()
            })
            .collect(),
    )
}

/// The ULP standard (`UlpCompare`) for a non-empty pair.
pub fn ulp(p: &Pair<'_>) -> Option<UlpMetrics> {
    let errs = ulp_errors(p)?;
    let u = if p.family == DeviceFamily::F32 {
        DType::F64
    } else {
        DType::F32
    };
    let thr = if p.family == DeviceFamily::F32 {
        32.0
    } else {
        1.0
    };
    let over = errs.iter().filter(|&&e| e > thr).count();
    let n = errs.len();
    let sum = sum_in(u, &errs);
    let mean = match u {
        DType::F64 => sum / n as f64,
        _ => ((sum as f32) as f64 / n as f64) as f32 as f64,
    };
    Some(UlpMetrics {
        max_ulp_error: u.pyval(np_max(&errs)),
        mean_ulp_error: u.pyval(mean),
        ulp_error_proportion: PyVal::np_f64(over as f64 / n as f64),
    })
}

/// `get_rel_err_ratio(rel_err_origin, t)`: (ratio, passed).
pub fn rel_err_ratio(p: &Pair<'_>, t: f64) -> (PyVal, bool) {
    let rel = rel_err_origin(p);
    if rel.is_empty() {
        return (PyVal::py_int(1), 1.0 > 1.0 - t);
    }
    let tw = p.w().round(t);
    let r = rel.iter().filter(|&&x| x < tw).count() as f64 / rel.len() as f64;
    (PyVal::np_f64(r), r > 1.0 - t)
}

/// `max(abs_err)` typed in the promoted dtype.
pub fn max_abs_err(p: &Pair<'_>) -> PyVal {
    p.w().pyval(np_max(&abs_err(p)))
}
