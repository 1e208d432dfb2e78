//! The oracle: a plain loop over the elements, in element order, accumulating in f64.
//!
//! Every other path (fast CPU, GPU) is tested against these functions. They favour obviousness
//! over speed: one element at a time through [`Partials::push_f64`] / [`Partials::push_int`].

use crate::partials::Partials;
use crate::{DType, TensorView};

/// Partials of the whole tensor, one element at a time in element order.
///
/// Floats are widened exactly to f64. Integers and bool (any non-zero byte is `true` = 1) go
/// through [`Partials::push_int`], so the exact extremes are kept. Complex elements contribute
/// `abs(z)`: for `C64` computed as an f32 `hypot` (numpy's `abs` of complex64 gives float32),
/// for `C128` as an f64 `hypot`. float8 elements are widened exactly too (msprobe records no
/// statistics of them; [`crate::summary`] applies that rule).
pub fn partials(view: &TensorView) -> Partials {
    let mut p = Partials::EMPTY;
    let b = view.bytes();
    match view.dtype() {
        DType::Bool => b.iter().for_each(|&x| p.push_int((x != 0) as i128)),
        DType::U8 => b.iter().for_each(|&x| p.push_int(x as i128)),
        DType::I8 => b.iter().for_each(|&x| p.push_int(x as i8 as i128)),
        DType::I16 => words::<2>(b).for_each(|w| p.push_int(i16::from_le_bytes(w) as i128)),
        DType::U16 => words::<2>(b).for_each(|w| p.push_int(u16::from_le_bytes(w) as i128)),
        DType::I32 => words::<4>(b).for_each(|w| p.push_int(i32::from_le_bytes(w) as i128)),
        DType::U32 => words::<4>(b).for_each(|w| p.push_int(u32::from_le_bytes(w) as i128)),
        DType::I64 => words::<8>(b).for_each(|w| p.push_int(i64::from_le_bytes(w) as i128)),
        DType::U64 => words::<8>(b).for_each(|w| p.push_int(u64::from_le_bytes(w) as i128)),
        DType::F16 => words::<2>(b).for_each(|w| p.push_f64(half::f16::from_le_bytes(w).to_f64())),
        DType::BF16 => {
            words::<2>(b).for_each(|w| p.push_f64(half::bf16::from_le_bytes(w).to_f64()))
        }
        DType::F32 => words::<4>(b).for_each(|w| p.push_f64(f32::from_le_bytes(w) as f64)),
        DType::F64 => words::<8>(b).for_each(|w| p.push_f64(f64::from_le_bytes(w))),
        DType::C64 => words::<8>(b).for_each(|w| p.push_f64(abs_c64(w) as f64)),
        DType::C128 => words::<16>(b).for_each(|w| p.push_f64(abs_c128(w))),
        DType::F8E4M3FN => b
            .iter()
            .for_each(|&x| p.push_f64(numprobe_tensor::float8::e4m3fn_to_f32(x) as f64)),
        DType::F8E5M2 => b
            .iter()
            .for_each(|&x| p.push_f64(numprobe_tensor::float8::e5m2_to_f32(x) as f64)),
    }
    p
}

/// `|re + i·im|` of one little-endian complex64, in f32 like numpy's `abs`.
#[inline]
pub fn abs_c64(w: [u8; 8]) -> f32 {
    let re = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
    let im = f32::from_le_bytes([w[4], w[5], w[6], w[7]]);
    re.hypot(im)
}

/// `|re + i·im|` of one little-endian complex128.
#[inline]
pub fn abs_c128(w: [u8; 16]) -> f64 {
    let mut re = [0u8; 8];
    let mut im = [0u8; 8];
    re.copy_from_slice(&w[..8]);
    im.copy_from_slice(&w[8..]);
    f64::from_le_bytes(re).hypot(f64::from_le_bytes(im))
}

/// CRC-32 (zlib's polynomial, as `zlib.crc32`) of the raw bytes, bit by bit.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= byte as u32;
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

/// msprobe's XOR checksum: the bytes zero-padded to a multiple of 8, read as little-endian
/// u64 words, XORed together (0 for no bytes).
pub fn xor(bytes: &[u8]) -> u64 {
    bytes.chunks(8).fold(0u64, |acc, c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        acc ^ u64::from_le_bytes(w)
    })
}

/// Fixed-size little-endian words of `b` (whose length the view has checked).
fn words<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    b.chunks_exact(N).map(|c| {
        let mut w = [0u8; N];
        w.copy_from_slice(c);
        w
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(elem: DType, shape: &'a [usize], bytes: &'a [u8]) -> TensorView<'a> {
        TensorView::new(elem, shape, bytes).unwrap()
    }

    #[test]
    fn f32_values() {
        let xs: Vec<u8> = [1.5f32, -2.25, f32::NAN, f32::NEG_INFINITY, 3.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let p = partials(&view(DType::F32, &[5], &xs));
        assert_eq!(p.count, 5);
        assert_eq!(p.nan_count, 1);
        assert_eq!(p.neg_inf_count, 1);
        assert_eq!(p.min, f64::NEG_INFINITY);
        assert_eq!(p.max, 3.0);
        assert_eq!(p.sum, 1.5 - 2.25 + 3.0);
        assert_eq!(p.sum_sq, 2.25 + 5.0625 + 9.0);
        assert_eq!((p.int_min, p.int_max), (i128::MAX, i128::MIN));
    }

    #[test]
    fn ints_keep_exact_extremes() {
        let xs: Vec<u8> = [i64::MIN, 5, i64::MAX]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let p = partials(&view(DType::I64, &[3], &xs));
        assert_eq!((p.int_min, p.int_max), (i64::MIN as i128, i64::MAX as i128));
        let u: Vec<u8> = u64::MAX.to_le_bytes().to_vec();
        let p = partials(&view(DType::U64, &[], &u));
        assert_eq!(p.int_max, u64::MAX as i128);
        let b = [0u8, 2, 0];
        let p = partials(&view(DType::Bool, &[3], &b));
        assert_eq!((p.int_min, p.int_max, p.sum), (0, 1, 1.0));
    }

    #[test]
    fn complex_uses_abs() {
        let xs: Vec<u8> = [1.0f32, 1.0, -3.0, 4.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let p = partials(&view(DType::C64, &[2], &xs));
        assert_eq!(p.max, 5.0);
        assert_eq!(p.min, 2f32.sqrt() as f64);
    }

    #[test]
    fn checksums_match_known_values() {
        // zlib.crc32(b"123456789") is the standard CRC-32 check value.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(xor(&[]), 0);
        assert_eq!(xor(&[1, 0, 0, 0, 0, 0, 0, 0, 3]), 1 ^ 3);
    }
}
