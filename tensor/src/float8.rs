//! float8 bytes (`torch.float8_e4m3fn`, `torch.float8_e5m2`) as f32, bit for bit as torch
//! widens them, NaN payloads included (statistics and comparisons of float8 tensors work on
//! these values; `half` has no float8 types).

/// A float8 e4m3fn byte (no infinities; S.1111.111 is NaN) as f32, with torch's bit
/// manipulation (`c10::detail::fp8e4m3fn_to_fp32_value`), so NaN bits match too.
pub fn e4m3fn_to_f32(b: u8) -> f32 {
    let w = (b as u32) << 24;
    let sign = w & 0x8000_0000;
    let nonsign = w & 0x7fff_ffff;
    let renorm = nonsign.leading_zeros().saturating_sub(4);
    let inf_nan_mask = ((nonsign.wrapping_add(0x0100_0000) as i32) >> 8) as u32 & 0x7f80_0000;
    let zero_mask = ((nonsign.wrapping_sub(1) as i32) >> 31) as u32;
    let bits = ((((nonsign << renorm) >> 4) + ((0x78 - renorm) << 23)) | inf_nan_mask) & !zero_mask;
    f32::from_bits(sign | bits)
}

/// A float8 e5m2 byte (the top byte of an IEEE binary16) as f32, as torch widens it: through
/// binary16 with a float multiply, which quiets a signalling NaN (sets the top mantissa bit)
/// and keeps the rest of the payload.
pub fn e5m2_to_f32(b: u8) -> f32 {
    let h = (b as u16) << 8;
    if h & 0x7c00 == 0x7c00 && h & 0x03ff != 0 {
        let sign = (h as u32 & 0x8000) << 16;
        return f32::from_bits(sign | 0x7fc0_0000 | ((h as u32 & 0x03ff) << 13));
    }
    half::f16::from_bits(h).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of a float8 byte from its fields, the textbook way (OCP FP8 formats).
    fn by_fields(b: u8, mant_bits: u32, bias: i32) -> f64 {
        let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
        let exp = ((b & 0x7f) >> mant_bits) as i32;
        let mant = (b as u32 & ((1 << mant_bits) - 1)) as f64 / f64::from(1u32 << mant_bits);
        if exp == 0 {
            sign * mant * 2f64.powi(1 - bias)
        } else {
            sign * (1.0 + mant) * 2f64.powi(exp - bias)
        }
    }

    #[test]
    fn e4m3fn_every_byte() {
        for b in 0..=255u8 {
            let got = e4m3fn_to_f32(b);
            if b & 0x7f == 0x7f {
                assert!(got.is_nan(), "{b:#04x}");
                assert_eq!(got.is_sign_negative(), b & 0x80 != 0, "{b:#04x}");
            } else {
                assert_eq!(f64::from(got), by_fields(b, 3, 7), "{b:#04x}");
                assert_eq!(got.is_sign_negative(), b & 0x80 != 0, "{b:#04x}");
            }
        }
        assert_eq!(e4m3fn_to_f32(0x7e), 448.0);
        assert_eq!(e4m3fn_to_f32(0x01), 2f32.powi(-9));
    }

    #[test]
    fn e5m2_every_byte() {
        for b in 0..=255u8 {
            let got = e5m2_to_f32(b);
            let (exp, mant) = ((b >> 2) & 0x1f, b & 0x3);
            match (exp, mant) {
                (0x1f, 0) => assert_eq!(got, f32::INFINITY.copysign(got), "{b:#04x}"),
                (0x1f, _) => {
                    assert!(got.is_nan(), "{b:#04x}");
                    // Quieted (the top mantissa bit set), the low payload bit kept.
                    assert_eq!(got.to_bits() & 0x7fc0_0000, 0x7fc0_0000, "{b:#04x}");
                    assert_eq!((got.to_bits() >> 21) & 0x3, u32::from(mant) | 2, "{b:#04x}");
                }
                _ => assert_eq!(f64::from(got), by_fields(b, 2, 15), "{b:#04x}"),
            }
            assert_eq!(got.is_sign_negative(), b & 0x80 != 0, "{b:#04x}");
        }
        assert_eq!(e5m2_to_f32(0x7b), 57344.0);
    }
}
