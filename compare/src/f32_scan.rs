//! Single passes over float32 tensors for the kernel-dump table: each side's extremes and sum of
//! squares, and a pair's relative difference with its inf/NaN agreement.
//!
//! The loops keep `LANES` independent accumulators so that the compiler vectorises them (a
//! single running sum is bound by the latency of one addition per element); maxima and minima
//! do not depend on the order, and the float64 sum of float32 squares is exact per term, so
//! regrouping it moves the float32 result only when the exact sum lies within 2⁻²⁹ ulp of a
//! rounding tie.

const LANES: usize = 8;

/// One tensor's NaN flag, maximum and minimum (NaN ignored) and float64 sum of squares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SideScan {
    pub nan: bool,
    pub max: f32,
    pub min: f32,
    pub squares: f64,
}

/// A pair's `max |a − b| / max |b|` over the elements finite on both sides, whether a non-finite
/// value differs from its counterpart, and whether the inf/NaN positions agree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PairScan {
    pub diff: f64,
    pub scale: f64,
    pub nonfinite_mismatch: bool,
    pub same_positions: bool,
}

pub(crate) fn side_scan(v: &[f32]) -> SideScan {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { side_scan_avx2(v) };
        }
    }
    side_scan_impl(v)
}

pub(crate) fn pair_scan(x: &[f32], y: &[f32]) -> PairScan {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { pair_scan_avx2(x, y) };
        }
    }
    pair_scan_impl(x, y)
}

/// [`side_scan_impl`] with AVX2 intrinsics: LLVM vectorises the portable loop but shuffles
/// the lane arrays around every compare, at a third of this speed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn side_scan_avx2(v: &[f32]) -> SideScan {
    use std::arch::x86_64::*;
    let chunks = v.chunks_exact(LANES);
    let tail = chunks.remainder();
    let mut max = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut min = _mm256_set1_ps(f32::INFINITY);
    let (mut lo_sq, mut hi_sq) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    for c in chunks {
        // SAFETY: `c` holds LANES = 8 floats; unaligned loads.
        let x = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        // maxps/minps return the second operand when the first is NaN: the lane keeps its value.
        max = _mm256_max_ps(x, max);
        min = _mm256_min_ps(x, min);
        let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
        let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x));
        lo_sq = _mm256_add_pd(lo_sq, _mm256_mul_pd(lo, lo));
        hi_sq = _mm256_add_pd(hi_sq, _mm256_mul_pd(hi, hi));
    }
    let (mut mx, mut mn, mut sq) = ([0f32; LANES], [0f32; LANES], [0f64; LANES]);
    // SAFETY: the arrays hold 8 floats / 2 x 4 doubles; unaligned stores.
    unsafe {
        _mm256_storeu_ps(mx.as_mut_ptr(), max);
        _mm256_storeu_ps(mn.as_mut_ptr(), min);
        _mm256_storeu_pd(sq.as_mut_ptr(), lo_sq);
        _mm256_storeu_pd(sq.as_mut_ptr().add(4), hi_sq);
    }
    finish_side(&mx, &mn, &sq, tail)
}

/// [`pair_scan_impl`] with AVX2 intrinsics.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pair_scan_avx2(x: &[f32], y: &[f32]) -> PairScan {
    use std::arch::x86_64::*;
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xt, yt) = (xc.remainder(), yc.remainder());
    let abs = _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX));
    let zero = _mm256_setzero_pd();
    let (mut diff, mut scale, mut probe) = ([zero; 2], [zero; 2], [zero; 2]);
    for (ca, cb) in xc.zip(yc) {
        // SAFETY: both chunks hold LANES = 8 floats; unaligned loads.
        let (a, b) = unsafe { (_mm256_loadu_ps(ca.as_ptr()), _mm256_loadu_ps(cb.as_ptr())) };
        let halves = [
            (
                _mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                _mm256_cvtps_pd(_mm256_castps256_ps128(b)),
            ),
            (
                _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(a)),
                _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(b)),
            ),
        ];
        for (h, (a, b)) in halves.into_iter().enumerate() {
            let d = _mm256_and_pd(_mm256_sub_pd(a, b), abs);
            probe[h] = _mm256_add_pd(probe[h], _mm256_mul_pd(d, zero));
            diff[h] = _mm256_max_pd(d, diff[h]);
            scale[h] = _mm256_max_pd(_mm256_and_pd(b, abs), scale[h]);
        }
    }
    let (mut d, mut s, mut p) = ([0f64; LANES], [0f64; LANES], [0f64; LANES]);
    // SAFETY: each array holds 2 x 4 doubles; unaligned stores.
    unsafe {
        for h in 0..2 {
            _mm256_storeu_pd(d.as_mut_ptr().add(4 * h), diff[h]);
            _mm256_storeu_pd(s.as_mut_ptr().add(4 * h), scale[h]);
            _mm256_storeu_pd(p.as_mut_ptr().add(4 * h), probe[h]);
        }
    }
    finish_pair(&d, &s, &p, x, y, xt, yt)
}

#[inline(always)]
fn side_scan_impl(v: &[f32]) -> SideScan {
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut min = [f32::INFINITY; LANES];
    let mut sq = [0f64; LANES];
    let chunks = v.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            let x = c[i];
            // A NaN leaves the lane as it was; it shows in the sum of squares instead.
            max[i] = if x > max[i] { x } else { max[i] };
            min[i] = if x < min[i] { x } else { min[i] };
            let d = f64::from(x);
            sq[i] += d * d;
        }
    }
    finish_side(&max, &min, &sq, tail)
}

/// Folds the lanes of a side scan and adds the elements past the last whole chunk.
fn finish_side(max: &[f32], min: &[f32], sq: &[f64], tail: &[f32]) -> SideScan {
    let mut out = SideScan {
        nan: false,
        max: max.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
        min: min.iter().fold(f32::INFINITY, |a, &b| a.min(b)),
        squares: sq.iter().sum(),
    };
    for &x in tail {
        out.max = out.max.max(x);
        out.min = out.min.min(x);
        out.squares += f64::from(x) * f64::from(x);
    }
    // Squares are never negative, so only a NaN element makes their sum NaN.
    out.nan = out.squares.is_nan();
    out
}

#[inline(always)]
fn pair_scan_impl(x: &[f32], y: &[f32]) -> PairScan {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let mut diff = [0f64; LANES];
    let mut scale = [0f64; LANES];
    // Stays zero while every element is finite: a ±inf or NaN on either side makes the
    // difference ±inf or NaN, and that times zero NaN.
    let mut probe = [0f64; LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xt, yt) = (xc.remainder(), yc.remainder());
    for (ca, cb) in xc.zip(yc) {
        for i in 0..LANES {
            let (a, b) = (f64::from(ca[i]), f64::from(cb[i]));
            let d = (a - b).abs();
            probe[i] += d * 0.0;
            diff[i] = if d > diff[i] { d } else { diff[i] };
            let s = b.abs();
            scale[i] = if s > scale[i] { s } else { scale[i] };
        }
    }
    finish_pair(&diff, &scale, &probe, x, y, xt, yt)
}

/// Folds the lanes of a pair scan and adds the elements past the last whole chunk; when a
/// lane met a non-finite value (rare), the whole pair is judged element by element instead.
fn finish_pair(
    diff: &[f64],
    scale: &[f64],
    probe: &[f64],
    x: &[f32],
    y: &[f32],
    x_tail: &[f32],
    y_tail: &[f32],
) -> PairScan {
    if probe.iter().any(|p| p.is_nan()) {
        return pair_scan_elementwise(x, y);
    }
    let mut out = pair_scan_elementwise(x_tail, y_tail);
    out.diff = diff.iter().fold(out.diff, |a, &b| a.max(b));
    out.scale = scale.iter().fold(out.scale, |a, &b| a.max(b));
    out
}

fn pair_scan_elementwise(x: &[f32], y: &[f32]) -> PairScan {
    let mut out = PairScan {
        diff: 0.0,
        scale: 0.0,
        nonfinite_mismatch: false,
        same_positions: true,
    };
    for (&a, &b) in x.iter().zip(y) {
        if !a.is_finite() || !b.is_finite() {
            out.same_positions &= a.is_nan() == b.is_nan() && a.is_infinite() == b.is_infinite();
            out.nonfinite_mismatch |= !(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            continue;
        }
        let (a, b) = (f64::from(a), f64::from(b));
        out.diff = out.diff.max((a - b).abs());
        out.scale = out.scale.max(b.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The element-by-element loop of the side scan (the pair's is `pair_scan_elementwise`).
    fn side_reference(v: &[f32]) -> SideScan {
        let mut out = SideScan {
            nan: false,
            max: f32::NEG_INFINITY,
            min: f32::INFINITY,
            squares: 0.0,
        };
        for &x in v {
            out.nan |= x.is_nan();
            out.max = out.max.max(x);
            out.min = out.min.min(x);
            out.squares += f64::from(x) * f64::from(x);
        }
        out
    }

    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            4 => -1e3f32..1e3,
            1 => Just(f32::NAN),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NEG_INFINITY),
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
            1 => Just(f32::from_bits(1)),
            1 => Just(-f32::from_bits(0x007f_ffff)),
            1 => Just(f32::MAX),
            1 => Just(-f32::MAX),
            1 => any::<u32>().prop_map(f32::from_bits),
        ]
    }

    fn same_side(a: SideScan, b: SideScan) -> bool {
        // ±0 extremes may come from either zero, as with `f32::max`.
        a.nan == b.nan
            && a.max == b.max
            && a.min == b.min
            && (a.squares == b.squares
                || (a.squares - b.squares).abs() <= 1e-12 * b.squares.abs()
                || (a.squares.is_nan() && b.squares.is_nan()))
    }

    proptest! {
        #[test]
        fn side_scan_equals_the_sequential_loop(v in prop::collection::vec(value(), 0..200)) {
            let (got, want) = (side_scan(&v), side_reference(&v));
            prop_assert!(same_side(got, want), "{got:?} vs {want:?}");
            prop_assert!(same_side(side_scan_impl(&v), want));
        }

        #[test]
        fn pair_scan_equals_the_sequential_loop(
            v in prop::collection::vec((value(), value()), 0..200),
            equal_prefix in 0usize..200,
        ) {
            let x: Vec<f32> = v.iter().map(|p| p.0).collect();
            let mut y: Vec<f32> = v.iter().map(|p| p.1).collect();
            // Equal values (NaN and inf included) at the front: agreeing positions are common.
            let k = equal_prefix.min(y.len());
            y[..k].copy_from_slice(&x[..k]);
            let (got, want) = (pair_scan(&x, &y), pair_scan_elementwise(&x, &y));
            prop_assert_eq!(got, want);
            prop_assert_eq!(pair_scan_impl(&x, &y), want);
        }
    }

    #[test]
    fn squares_of_float32_sum_to_the_same_float32_norm() {
        // 2²⁰ values: the regrouped float64 sum rounds to the same float32 as the running one.
        let v: Vec<f32> = (0..1 << 20)
            .map(|i| ((i % 4093) as f32 * 0.37).sin() * 3.0)
            .collect();
        let (a, b) = (side_scan(&v), side_reference(&v));
        assert_eq!((a.squares as f32).sqrt(), (b.squares as f32).sqrt());
        assert_eq!((a.max, a.min, a.nan), (b.max, b.min, b.nan));
    }
}
