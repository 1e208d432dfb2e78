//! Element types: the stored dtypes (f16/f32/f64) and the working float types numpy computes in,
//! and what ulp needs to know of numpy's float dtypes ([`NumpyFloat`] on [`DType`]).

use crate::pyfmt::PyVal;
use half::f16;
use numprobe_tensor::{DType, Element};
use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Sub};

/// numpy's arithmetic in one of its float dtypes (float16, float32, float64): rounding to the
/// dtype, `np.finfo` and the promotion of two operands.
///
/// # Panics
/// Every method panics for a dtype that is not float16, float32 or float64: numpy holds no
/// other float dtype (msprobe widens bfloat16 and float8 outputs to float32 first).
pub trait NumpyFloat: Copy {
    /// Round an f64 to this dtype (round to nearest even, overflow to ±inf), returned as f64.
    fn round(self, x: f64) -> f64;
    /// `np.finfo(dtype).eps`.
    fn eps(self) -> f64;
    /// `np.finfo(dtype).max`.
    fn finite_max(self) -> f64;
    /// numpy's scalar value of this dtype as a typed cell.
    fn pyval(self, x: f64) -> PyVal;
    /// The dtype numpy computes `self ∘ other` in (the wider of the two).
    fn promote(self, other: DType) -> DType;
}

/// Width rank of numpy's float dtypes, for promotion.
fn float_rank(d: DType) -> u8 {
    match d {
        DType::F16 => 0,
        DType::F32 => 1,
        DType::F64 => 2,
        other => not_numpy_float(other),
    }
}

#[cold]
fn not_numpy_float(d: DType) -> ! {
    panic!("{d:?} is not one of numpy's float dtypes (float16, float32, float64)")
}

impl NumpyFloat for DType {
    #[inline]
    fn round(self, x: f64) -> f64 {
        match self {
            DType::F16 => round_f16(x),
            DType::F32 => x as f32 as f64,
            DType::F64 => x,
            other => not_numpy_float(other),
        }
    }
    fn eps(self) -> f64 {
        match self {
            DType::F16 => 2f64.powi(-10),
            DType::F32 => 2f64.powi(-23),
            DType::F64 => f64::EPSILON,
            other => not_numpy_float(other),
        }
    }
    fn finite_max(self) -> f64 {
        match self {
            DType::F16 => 65504.0,
            DType::F32 => f32::MAX as f64,
            DType::F64 => f64::MAX,
            other => not_numpy_float(other),
        }
    }
    fn pyval(self, x: f64) -> PyVal {
        match self {
            DType::F32 => PyVal::F32(x as f32),
            // float16 scalars never reach a cell in msprobe's flows; f64 text is the fallback.
            DType::F16 | DType::F64 => PyVal::np_f64(x),
            other => not_numpy_float(other),
        }
    }
    fn promote(self, other: DType) -> DType {
        if float_rank(other) > float_rank(self) {
            other
        } else {
            self
        }
    }
}

/// `f16::from_f64(x).to_f64()` without branches: round to nearest even at half precision,
/// overflow to ±inf, gradual underflow (so the element loops vectorise).
#[inline(always)]
pub fn round_f16(x: f64) -> f64 {
    let a = x.abs();
    // Normal range: drop 42 of the 52 mantissa bits, ties to even (carries reach the exponent).
    let bits = a.to_bits();
    let rounded = (bits + ((1u64 << 41) - 1) + ((bits >> 42) & 1)) & !((1u64 << 42) - 1);
    let normal = f64::from_bits(rounded);
    // Subnormal range: multiples of 2^-24.
    let sub = (a * 16777216.0).round_ties_even() * (1.0 / 16777216.0);
    let r = if a >= 65520.0 {
        f64::INFINITY
    } else if a >= 6.103515625e-5 {
        normal
    } else {
        sub
    };
    let r = if x.is_nan() { x } else { r };
    if x.is_sign_negative() { -r } else { r }
}

/// `f16::to_f64` without branches.
#[inline(always)]
pub fn f16_to_f64(h: f16) -> f64 {
    let bits = h.to_bits() as u64;
    let exp = (bits >> 10) & 0x1f;
    let mant = bits & 0x3ff;
    let normal = f64::from_bits(((exp + 1008) << 52) | (mant << 42));
    let sub = mant as f64 * (1.0 / 16777216.0);
    let special = if mant == 0 { f64::INFINITY } else { f64::NAN };
    let v = if exp == 0 {
        sub
    } else if exp == 0x1f {
        special
    } else {
        normal
    };
    if bits & 0x8000 != 0 { -v } else { v }
}

/// A stored element (what a bench/device array holds): f16, f32 or f64, with its dtype as
/// [`Element::DTYPE`].
pub trait Elem: Element + Copy {
    fn to_f64(self) -> f64;
    /// `floor(log2(|x|))` as numpy evaluates it in this dtype (`|x| > 0`); NaN / +inf pass through.
    fn floor_log2_abs(self) -> f64;
    /// Branch-free `floor(log2(|x|))` (0 for zero) and whether [`Elem::floor_log2_abs`] must be
    /// asked instead (subnormal, non-finite, or just below a power of two).
    #[inline]
    fn floor_log2_fast(self) -> (i64, bool) {
        let a = self.to_f64().abs();
        if a == 0.0 {
            (0, false)
        } else {
            let e = self.floor_log2_abs();
            if e.is_finite() {
                (e as i64, false)
            } else {
                (0, true)
            }
        }
    }
}

impl Elem for f16 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f16_to_f64(self)
    }
    fn floor_log2_abs(self) -> f64 {
        // numpy computes half log2 in float32 and rounds back to half.
        let l = (self.to_f32().abs()).log2();
        f16::from_f32(l).to_f64().floor()
    }
}

impl Elem for f32 {
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn floor_log2_abs(self) -> f64 {
        let a = self.abs();
        let bits = a.to_bits();
        let exp_field = (bits >> 23) & 0xff;
        let mant = bits & 0x7f_ffff;
        // Inside a binade and away from its top, floor(log2) is the exponent for any faithful
        // log2; near the top the rounded log2 may reach the next integer, so ask libm there.
        if exp_field != 0 && exp_field != 0xff && mant < 0x7f_ffff - 4096 {
            (exp_field as i32 - 127) as f64
        } else {
            (a.log2() as f64).floor()
        }
    }
    #[inline(always)]
    fn floor_log2_fast(self) -> (i64, bool) {
        let bits = (self.to_bits() & 0x7fff_ffff) as i64;
        let exp_field = bits >> 23;
        let mant = bits & 0x7f_ffff;
        let zero = bits == 0;
        let slow = !zero & ((exp_field == 0) | (exp_field == 0xff) | (mant >= 0x7f_ffff - 4096));
        let e = if zero { 0 } else { exp_field - 127 };
        (e, slow)
    }
}

impl Elem for f64 {
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn floor_log2_abs(self) -> f64 {
        let a = self.abs();
        let bits = a.to_bits();
        let exp_field = (bits >> 52) & 0x7ff;
        let mant = bits & 0xf_ffff_ffff_ffff;
        if exp_field != 0 && exp_field != 0x7ff && mant < 0xf_ffff_ffff_ffff - (1 << 20) {
            (exp_field as i64 - 1023) as f64
        } else {
            a.log2().floor()
        }
    }
    #[inline(always)]
    fn floor_log2_fast(self) -> (i64, bool) {
        let bits = (self.to_bits() & 0x7fff_ffff_ffff_ffff) as i64;
        let exp_field = bits >> 52;
        let mant = bits & 0xf_ffff_ffff_ffff;
        let zero = bits == 0;
        let slow = !zero
            & ((exp_field == 0) | (exp_field == 0x7ff) | (mant >= 0xf_ffff_ffff_ffff - (1 << 20)));
        let e = if zero { 0 } else { exp_field - 1023 };
        (e, slow)
    }
}

/// A working float type numpy computes in (float32 or float64).
pub trait Work:
    Element
    + Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Send
    + Sync
    + Debug
    + 'static
{
    const ZERO: Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    /// `np.mean`'s last step: float32 sums are divided in float64 and cast back.
    fn mean_from_sum(sum: Self, n: usize) -> Self;
    fn pyval(self) -> PyVal;
}

impl Work for f32 {
    const ZERO: Self = 0.0;
    #[inline]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn abs(self) -> Self {
        f32::abs(self)
    }
    #[inline]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    fn mean_from_sum(sum: Self, n: usize) -> Self {
        (sum as f64 / n as f64) as f32
    }
    fn pyval(self) -> PyVal {
        PyVal::F32(self)
    }
}

impl Work for f64 {
    const ZERO: Self = 0.0;
    #[inline]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn abs(self) -> Self {
        f64::abs(self)
    }
    #[inline]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    fn mean_from_sum(sum: Self, n: usize) -> Self {
        sum / n as f64
    }
    fn pyval(self) -> PyVal {
        PyVal::np_f64(self)
    }
}

/// NaN-propagating maximum, as `np.max`.
#[inline]
pub fn nan_max<W: Work>(m: W, x: W) -> W {
    if m.is_nan() || x.is_nan() {
        if m.is_nan() { m } else { x }
    } else if x > m {
        x
    } else {
        m
    }
}

/// `2^t` in f64 for an integral (or ±inf / NaN) `t`, exactly as `np.exp2` gives it.
#[inline]
pub fn exp2_int(t: f64) -> f64 {
    if t.is_nan() {
        f64::NAN
    } else if t > 1023.0 {
        f64::INFINITY
    } else if t < -1074.0 {
        0.0
    } else {
        let k = t as i64;
        if k >= -1022 {
            f64::from_bits(((k + 1023) as u64) << 52)
        } else {
            f64::from_bits(1u64 << (k + 1074))
        }
    }
}

/// `2^t` for an integer `t` in [-1022, 1023] (the ULP factor's range), built from bits.
#[inline(always)]
pub fn exp2_normal(t: i64) -> f64 {
    f64::from_bits(((t + 1023) as u64) << 52)
}

/// numpy's pairwise summation of one contiguous block (`pairwise_sum` in numpy's loops).
pub fn pairwise_sum<W: Work>(a: &[W]) -> W {
    let n = a.len();
    if n < 8 {
        let mut res = W::ZERO;
        for &x in a {
            res = res + x;
        }
        res
    } else if n <= 128 {
        let mut r = [a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]];
        let full = n - n % 8;
        let mut i = 8;
        while i < full {
            for j in 0..8 {
                r[j] = r[j] + a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res = res + a[i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

/// numpy's reduction buffer: `np.sum` adds the pairwise sums of 8192-element blocks in order.
pub const NP_BUFSIZE: usize = 8192;

/// `np.sum` of a contiguous float array.
pub fn np_sum<W: Work>(a: &[W]) -> W {
    let mut acc = W::ZERO;
    for chunk in a.chunks(NP_BUFSIZE) {
        acc = acc + pairwise_sum(chunk);
    }
    acc
}

/// `np.mean` of a non-empty contiguous float array.
pub fn np_mean<W: Work>(a: &[W]) -> W {
    W::mean_from_sum(np_sum(a), a.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_log2_matches_libm_near_powers_of_two() {
        let x = 8.0f32 * (1.0 - 2f32.powi(-24));
        assert_eq!(x.floor_log2_abs(), 3.0);
        assert_eq!(0.75f32.floor_log2_abs(), -1.0);
        assert_eq!(1.0f64.floor_log2_abs(), 0.0);
        assert_eq!(1e-45f32.floor_log2_abs(), -149.0);
        assert!(f32::NAN.floor_log2_abs().is_nan());
        for i in 1..20000u32 {
            let v = f32::from_bits(0x3f00_0000 + i * 397);
            assert_eq!(v.floor_log2_abs(), (v.log2() as f64).floor(), "{v}");
        }
    }

    #[test]
    fn half_conversions_match_the_half_crate() {
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            let (a, b) = (f16_to_f64(h), h.to_f64());
            assert!(
                a == b && a.is_sign_negative() == b.is_sign_negative()
                    || (a.is_nan() && b.is_nan()),
                "{bits:#x}"
            );
            if h.is_finite() {
                // Values at, between and around every half: midpoints decide ties.
                let next = f16::from_bits(bits.wrapping_add(1)).to_f64();
                for x in [
                    b,
                    (b + next) / 2.0,
                    b + (next - b) / 3.0,
                    f64::from_bits(b.to_bits() + 1),
                ] {
                    if x.is_finite() {
                        let want = f16::from_f64(x).to_f64();
                        let got = round_f16(x);
                        assert!(
                            got == want || (got.is_nan() && want.is_nan()),
                            "{x:e}: {got:e} vs {want:e}"
                        );
                    }
                }
            }
        }
        for x in [
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
            65519.99,
            65520.0,
            -65520.0,
            1e-300,
            -0.0,
            2.9802322387695312e-8,
        ] {
            let want = f16::from_f64(x).to_f64();
            let got = round_f16(x);
            assert!(
                got == want && got.is_sign_negative() == want.is_sign_negative()
                    || (got.is_nan() && want.is_nan()),
                "{x:e}"
            );
        }
    }

    #[test]
    fn exp2_int_is_exact() {
        assert_eq!(exp2_int(3.0), 8.0);
        assert_eq!(exp2_int(-1074.0), f64::from_bits(1));
        assert_eq!(exp2_int(2000.0), f64::INFINITY);
        assert_eq!(exp2_int(f64::NEG_INFINITY), 0.0);
    }
}
