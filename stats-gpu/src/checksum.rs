//! The dump's `md5` field: CRC-32 of the raw bytes (`summary_mode: "md5"`) or msprobe's XOR
//! checksum (`summary_mode: "xor"`).
//!
//! Both are exact functions of the bytes, so the parallel variants give the same value as a
//! single pass: CRC-32 states of consecutive chunks are joined with [`crc32fast::Hasher::combine`],
//! and XOR is associative (chunks are cut at multiples of 8 bytes, so the words line up).

use rayon::prelude::*;

/// Chunk length of the parallel variants; a multiple of 8 so XOR words never straddle chunks.
pub(crate) const PAR_CHUNK_BYTES: usize = 1 << 20;
/// Below this many bytes one thread is faster than splitting.
pub(crate) const PAR_THRESHOLD_BYTES: usize = 2 << 20;

/// CRC-32 (zlib's `crc32`) of `bytes`, split across threads for large inputs.
pub fn crc32(bytes: &[u8]) -> u32 {
    if bytes.len() < PAR_THRESHOLD_BYTES {
        return crc32fast::hash(bytes);
    }
    bytes
        .par_chunks(PAR_CHUNK_BYTES)
        .map(|c| {
            let mut h = crc32fast::Hasher::new();
            h.update(c);
            h
        })
        .collect::<Vec<_>>()
        .into_iter()
        .reduce(|mut a, b| {
            a.combine(&b);
            a
        })
        .map_or(0, |h| h.finalize())
}

/// msprobe's XOR checksum: bytes zero-padded to a multiple of 8, read as little-endian u64
/// words, all XORed together.
pub fn xor(bytes: &[u8]) -> u64 {
    if bytes.len() < PAR_THRESHOLD_BYTES {
        return xor_serial(bytes);
    }
    bytes
        .par_chunks(PAR_CHUNK_BYTES)
        .map(xor_serial)
        .reduce(|| 0, |a, b| a ^ b)
}

/// XOR of one stretch that starts at a multiple of 8 bytes into the tensor.
pub(crate) fn xor_serial(bytes: &[u8]) -> u64 {
    let whole = bytes.len() / 8 * 8;
    let (body, tail) = bytes.split_at(whole);
    let mut x = match bytemuck::try_cast_slice::<u8, u64>(body) {
        // Words in host order equal little-endian words on little-endian hosts.
        Ok(words) if cfg!(target_endian = "little") => xor_words(words),
        _ => body.chunks_exact(8).fold(0, |a, w| {
            a ^ u64::from_le_bytes(w.try_into().expect("8-byte chunk"))
        }),
    };
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        x ^= u64::from_le_bytes(last);
    }
    x
}

/// XOR of aligned words, eight independent accumulators so it compiles to full-width vector
/// XORs (AVX2/AVX-512 through pulp's dispatch).
fn xor_words(words: &[u64]) -> u64 {
    struct XorWords<'a>(&'a [u64]);
    impl pulp::WithSimd for XorWords<'_> {
        type Output = u64;
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _simd: S) -> u64 {
            let groups = self.0.chunks_exact(8);
            let rest = groups.remainder();
            let mut acc = [0u64; 8];
            for g in groups {
                for (a, w) in acc.iter_mut().zip(g) {
                    *a ^= w;
                }
            }
            acc.iter().chain(rest).fold(0, |a, b| a ^ b)
        }
    }
    pulp::Arch::new().dispatch(XorWords(words))
}

/// `format(crc, "08x")`: 8 lowercase hex digits.
pub fn crc32_hex(crc: u32) -> String {
    format!("{crc:08x}")
}

/// `"0x" + 16 lowercase hex digits`.
pub fn xor_hex(x: u64) -> String {
    format!("0x{x:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;

    fn pseudo_random(n: usize) -> Vec<u8> {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    #[test]
    fn parallel_equals_reference_across_chunk_edges() {
        // Lengths around the thresholds and an odd tail exercise the combine and padding paths.
        for n in [
            0,
            1,
            7,
            8,
            9,
            63,
            65,
            PAR_THRESHOLD_BYTES + 13,
            3 * PAR_CHUNK_BYTES + 5,
        ] {
            let b = pseudo_random(n);
            assert_eq!(crc32(&b), reference::crc32(&b), "crc32 of {n} bytes");
            assert_eq!(xor(&b), reference::xor(&b), "xor of {n} bytes");
        }
    }

    #[test]
    fn hex_formats() {
        assert_eq!(crc32_hex(0), "00000000");
        assert_eq!(crc32_hex(0x7bb3_6c01), "7bb36c01");
        assert_eq!(xor_hex(1), "0x0000000000000001");
        assert_eq!(xor_hex(u64::MAX), "0xffffffffffffffff");
    }
}
