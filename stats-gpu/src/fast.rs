//! The fast CPU path: one pass over the bytes, vectorised, split across cores with `rayon` for
//! large tensors. The float kernels (f32, f64, f16, bf16 widened in-register) are hand-written
//! AVX2+FMA+F16C, chosen at run time; integers, bool and CPUs without AVX2 use portable loops
//! that `pulp`'s runtime dispatch compiles for the best instruction set present.
//!
//! # Summation order
//!
//! The bytes are cut into chunks of [`PAR_CHUNK_BYTES`] (1 MiB; tensors under
//! [`PAR_THRESHOLD_BYTES`] are one chunk on the calling thread). Each chunk is cut into blocks
//! of [`BLOCK`] elements. In a block, element `i` is added to f64 lane `i % L`, with `L = 16`
//! for the AVX2 kernels of f32/f64/f16/bf16 (x86-64 with AVX2+FMA+F16C; `sum_sq` by fused
//! multiply-add) and `L = 8` for the portable kernels (other CPUs, integers); the elements past
//! the last full group of lanes follow in element order; lanes are added in lane order at the
//! end of the block. Blocks are merged in order into the chunk's [`Partials`], and the chunks'
//! partials are merged in order on the calling thread, so on a given machine the result does
//! not depend on the number of threads or on scheduling.
//!
//! # Accuracy against [`crate::reference`]
//!
//! Every element (f16, bf16, f32 widened exactly) is accumulated in f64, as in the reference;
//! only the order differs. `count`, the NaN/inf counts, `min`, `max`, `int_min` and `int_max`
//! are therefore identical to the reference, and for `n` elements
//!
//! * `|sum − sum_ref| ≤ 2·γ(n)·Σ|x|` and `|sum_sq − sum_ref_sq| ≤ 2·γ(n)·sum_sq_ref`, with
//!   `γ(n) = n·2⁻⁵³ / (1 − n·2⁻⁵³)` (both are within `γ(n)` of the exact sum).
//!
//! For f32 tensors up to ~10⁸ elements that is far below half an f32 ulp of the Mean/Norm, so
//! the values msprobe records match the reference except when the exact result sits on a
//! rounding boundary. (Accumulating in f32 lanes, as a GPU must, would be cheaper in
//! arithmetic but drifts by several f32 ulps over a 16 Ki-element block; a CPU core widening
//! to f64 still outruns its share of memory bandwidth, about 18 GB/s of f32 from L2 on
//! AVX2, so the CPU keeps f64.)
//!
//! A block whose f64 lane sums come out non-finite (it holds a NaN or an infinity, or an f64
//! tensor overflowed) is redone element by element exactly as the reference does, which keeps
//! the NaN/±inf counts exact without a per-element test in the fast loop.

use rayon::prelude::*;

use crate::checksum::{self, PAR_CHUNK_BYTES as CHECKSUM_CHUNK};
use crate::partials::Partials;
use crate::reference;
use crate::{DType, TensorView};

/// f64 accumulator lanes per block.
const LANES: usize = 8;
/// Elements per block (the unit of the NaN/inf fallback).
pub const BLOCK: usize = 16 * 1024;
/// Bytes per parallel task; a multiple of every element size and of 8 (XOR words).
pub const PAR_CHUNK_BYTES: usize = CHECKSUM_CHUNK;
/// Tensors smaller than this stay on the calling thread.
pub const PAR_THRESHOLD_BYTES: usize = checksum::PAR_THRESHOLD_BYTES;

/// Partials of the whole tensor; see the module docs for order and accuracy.
pub fn partials(view: &TensorView) -> Partials {
    fold_chunks(view.dtype(), view.bytes(), |_| (), |_, _| ()).0
}

/// Partials of many tensors, one per view: small tensors are spread across cores, large ones
/// are split as in [`partials`]. Each result equals `partials(view)` bit for bit.
pub fn partials_batch(views: &[TensorView]) -> Vec<Partials> {
    let total: usize = views.iter().map(|v| v.bytes().len()).sum();
    if total < PAR_THRESHOLD_BYTES {
        return views.iter().map(partials).collect();
    }
    views.par_iter().map(partials).collect()
}

/// Partials and the CRC-32 of the raw bytes, from one read of the bytes (each chunk is hashed
/// right after its statistics, while it is in cache).
pub fn partials_and_crc32(view: &TensorView) -> (Partials, u32) {
    let (p, h) = fold_chunks(
        view.dtype(),
        view.bytes(),
        |c| {
            let mut h = crc32fast::Hasher::new();
            h.update(c);
            h
        },
        |a: &mut crc32fast::Hasher, b| a.combine(&b),
    );
    (p, h.finalize())
}

/// Partials and msprobe's XOR checksum of the raw bytes, from one read of the bytes.
pub fn partials_and_xor(view: &TensorView) -> (Partials, u64) {
    fold_chunks(view.dtype(), view.bytes(), checksum::xor_serial, |a, b| {
        *a ^= b
    })
}

/// Runs the statistics kernel and `extra` on each chunk (in parallel for large inputs) and
/// merges both in chunk order.
fn fold_chunks<E: Send + Default>(
    elem: DType,
    bytes: &[u8],
    extra: impl Fn(&[u8]) -> E + Sync,
    join: impl Fn(&mut E, E),
) -> (Partials, E) {
    if bytes.len() < PAR_THRESHOLD_BYTES {
        return (serial(elem, bytes), extra(bytes));
    }
    let parts: Vec<(Partials, E)> = bytes
        .par_chunks(PAR_CHUNK_BYTES)
        .map(|c| (serial(elem, c), extra(c)))
        .collect();
    let mut it = parts.into_iter();
    let (mut p, mut e) = it.next().unwrap_or_default();
    for (pp, ee) in it {
        p.merge(&pp);
        join(&mut e, ee);
    }
    (p, e)
}

/// Partials of one chunk on the calling thread, compiled for the best SIMD level at hand.
fn serial(elem: DType, bytes: &[u8]) -> Partials {
    pulp::Arch::new().dispatch(Serial { elem, bytes })
}

struct Serial<'a> {
    elem: DType,
    bytes: &'a [u8],
}

impl pulp::WithSimd for Serial<'_> {
    type Output = Partials;

    // Inlined into pulp's `#[target_feature]` wrapper so the plain loops below are
    // auto-vectorised for that instruction set.
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> Partials {
        let b = self.bytes;
        // The kernels read elements in host order; the reference decodes little-endian.
        if cfg!(target_endian = "big") {
            return reference_chunk(self.elem, b);
        }
        match self.elem {
            DType::F32 => float_blocks::<f32>(b, |x| x as f64, x86::f32_kernel()),
            DType::F64 => float_blocks::<f64>(b, |x| x, x86::f64_kernel()),
            DType::F16 => float_blocks::<u16>(b, |h| f16_bits_to_f32(h) as f64, x86::f16_kernel()),
            DType::BF16 => float_blocks::<u16>(
                b,
                |h| f32::from_bits((h as u32) << 16) as f64,
                x86::bf16_kernel(),
            ),
            DType::I8 => int_blocks::<1>(b, |w| w[0] as i8 as i64),
            DType::U8 => int_blocks::<1>(b, |w| w[0] as i64),
            DType::I16 => int_blocks::<2>(b, |w| i16::from_le_bytes(w) as i64),
            DType::U16 => int_blocks::<2>(b, |w| u16::from_le_bytes(w) as i64),
            DType::I32 => int_blocks::<4>(b, |w| i32::from_le_bytes(w) as i64),
            DType::U32 => int_blocks::<4>(b, |w| u32::from_le_bytes(w) as i64),
            DType::I64 => int_blocks::<8>(b, i64::from_le_bytes),
            DType::Bool => bool_partials(b),
            // u64 does not fit the i64 lanes and complex needs a hypot per element: the
            // reference loop (still split across cores by the caller) is fast enough for them.
            // float8 has no statistics in msprobe's records; the reference widens it exactly.
            DType::U64 | DType::C64 | DType::C128 | DType::F8E4M3FN | DType::F8E5M2 => {
                reference_chunk(self.elem, b)
            }
        }
    }
}

/// A block kernel for one stored element type: `None` when the block holds NaN/inf.
type BlockKernel<T> = fn(&[T]) -> Option<Partials>;

/// Hand-written AVX2 + FMA (+ F16C) block kernels. LLVM's auto-vectoriser shuffles the
/// f32 → f64 widening of the portable kernel badly (≈ 1.5 cycles per element); these run four
/// independent f64x4 chains and keep a core ahead of its share of memory bandwidth.
///
/// Order: element `j` of each 16-element group goes to accumulator lane `j` (four `f64x4`
/// vectors); lanes are added in lane order at the end of the block, then the leftover
/// elements (fewer than 16) in element order. `sum_sq` uses fused multiply-add.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use super::BlockKernel;
    use crate::partials::Partials;

    fn has_avx2() -> bool {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    }

    /// Adds 16 widened elements `[a, b, c, d]` to the accumulators.
    macro_rules! accumulate {
        ($s:ident, $q:ident, $mn:ident, $mx:ident, $x:expr) => {{
            let x: [__m256d; 4] = $x;
            for i in 0..4 {
                $s[i] = _mm256_add_pd($s[i], x[i]);
                $q[i] = _mm256_fmadd_pd(x[i], x[i], $q[i]);
            }
            // NaN handling of min/max does not matter: a NaN makes the sums NaN and the
            // block is redone exactly.
            $mn[0] = _mm256_min_pd($mn[0], _mm256_min_pd(x[0], x[1]));
            $mn[1] = _mm256_min_pd($mn[1], _mm256_min_pd(x[2], x[3]));
            $mx[0] = _mm256_max_pd($mx[0], _mm256_max_pd(x[0], x[1]));
            $mx[1] = _mm256_max_pd($mx[1], _mm256_max_pd(x[2], x[3]));
        }};
    }

    /// Defines `$name: BlockKernel<$t>` (runtime-checked) around an AVX2 loop whose `$load`
    /// widens the 16 elements at `p` to four `f64x4`.
    macro_rules! kernel {
        ($getter:ident, $imp:ident, $checked:ident, $t:ty, $widen:expr, |$p:ident| $load:expr) => {
            pub(super) fn $getter() -> Option<BlockKernel<$t>> {
                has_avx2().then_some($checked as BlockKernel<$t>)
            }

            fn $checked(xs: &[$t]) -> Option<Partials> {
                // SAFETY: only handed out by the getter above, after the CPU features the
                // kernel is compiled for were detected.
                unsafe { $imp(xs) }
            }

            #[target_feature(enable = "avx2,fma,f16c")]
            fn $imp(xs: &[$t]) -> Option<Partials> {
                let mut s = [_mm256_setzero_pd(); 4];
                let mut q = [_mm256_setzero_pd(); 4];
                let mut mn = [_mm256_set1_pd(f64::INFINITY); 2];
                let mut mx = [_mm256_set1_pd(f64::NEG_INFINITY); 2];
                let groups = xs.chunks_exact(16);
                let rest = groups.remainder();
                for g in groups {
                    let $p = g.as_ptr();
                    // SAFETY: `g` holds 16 elements, the loads read exactly those (unaligned).
                    accumulate!(s, q, mn, mx, unsafe { $load });
                }
                let lanes = |v: [__m256d; 4]| -> [f64; 16] {
                    // SAFETY: four f64x4 are sixteen f64, same size and no invalid values.
                    unsafe { core::mem::transmute(v) }
                };
                let (s, q) = (lanes(s), lanes(q));
                let (mn, mx) = (
                    lanes([mn[0], mn[1], mn[0], mn[1]]),
                    lanes([mx[0], mx[1], mx[0], mx[1]]),
                );
                let widen = $widen;
                let mut sum = s.iter().fold(0.0, |a, b| a + b);
                let mut sum_sq = q.iter().fold(0.0, |a, b| a + b);
                let mut lo = mn.iter().fold(f64::INFINITY, |a, &b| a.min(b));
                let mut hi = mx.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                for &x in rest {
                    let x: f64 = widen(x);
                    sum += x;
                    sum_sq = x.mul_add(x, sum_sq);
                    lo = lo.min(x);
                    hi = hi.max(x);
                }
                if !(sum.is_finite() && sum_sq.is_finite()) {
                    return None;
                }
                Some(Partials {
                    count: xs.len() as u64,
                    min: lo,
                    max: hi,
                    sum,
                    sum_sq,
                    ..Partials::EMPTY
                })
            }
        };
    }

    kernel!(
        f32_kernel,
        f32_avx2,
        f32_checked,
        f32,
        |x: f32| x as f64,
        |p| [
            _mm256_cvtps_pd(_mm_loadu_ps(p)),
            _mm256_cvtps_pd(_mm_loadu_ps(p.add(4))),
            _mm256_cvtps_pd(_mm_loadu_ps(p.add(8))),
            _mm256_cvtps_pd(_mm_loadu_ps(p.add(12))),
        ]
    );

    kernel!(f64_kernel, f64_avx2, f64_checked, f64, |x: f64| x, |p| [
        _mm256_loadu_pd(p),
        _mm256_loadu_pd(p.add(4)),
        _mm256_loadu_pd(p.add(8)),
        _mm256_loadu_pd(p.add(12)),
    ]);

    kernel!(
        f16_kernel,
        f16_avx2,
        f16_checked,
        u16,
        |h: u16| super::f16_bits_to_f32(h) as f64,
        |p| {
            let a = _mm256_cvtph_ps(_mm_loadu_si128(p.cast()));
            let b = _mm256_cvtph_ps(_mm_loadu_si128(p.add(8).cast()));
            widen_ps(a, b)
        }
    );

    kernel!(
        bf16_kernel,
        bf16_avx2,
        bf16_checked,
        u16,
        |h: u16| f32::from_bits((h as u32) << 16) as f64,
        |p| {
            let a = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())));
            let b =
                _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(8).cast())));
            widen_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b))
        }
    );

    /// Sixteen f32 (two f32x8) as four f64x4, in element order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn widen_ps(a: __m256, b: __m256) -> [__m256d; 4] {
        [
            _mm256_cvtps_pd(_mm256_castps256_ps128(a)),
            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(a)),
            _mm256_cvtps_pd(_mm256_castps256_ps128(b)),
            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(b)),
        ]
    }
}

/// Other architectures use the portable kernel.
#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::BlockKernel;
    pub(super) fn f32_kernel() -> Option<BlockKernel<f32>> {
        None
    }
    pub(super) fn f64_kernel() -> Option<BlockKernel<f64>> {
        None
    }
    pub(super) fn f16_kernel() -> Option<BlockKernel<u16>> {
        None
    }
    pub(super) fn bf16_kernel() -> Option<BlockKernel<u16>> {
        None
    }
}

/// The reference loop over one chunk (a whole number of elements).
fn reference_chunk(elem: DType, b: &[u8]) -> Partials {
    let shape = [b.len() / elem.size()];
    match TensorView::new(elem, &shape, b) {
        Ok(v) => reference::partials(&v),
        // Chunks are cut at multiples of the element size, so this cannot happen.
        Err(_) => Partials::EMPTY,
    }
}

/// IEEE binary16 bits to f32, branch-free so it vectorises: the exponent/mantissa field is
/// moved into f32 position and rebased by multiplying with 2¹¹² (which also normalises f16
/// subnormals exactly); inf/NaN get the all-ones exponent back afterwards.
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    let rebased = (f32::from_bits(em << 13) * f32::from_bits(0x7780_0000)).to_bits();
    let bits = if em >= 0x7c00 {
        rebased | 0x7f80_0000
    } else {
        rebased
    };
    f32::from_bits(bits | sign)
}

#[inline(always)]
fn word<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut w = [0u8; N];
    w.copy_from_slice(&b[..N]);
    w
}

/// Float kernel: blocks in f64 lanes, with the exact element-wise fallback for blocks that
/// hold NaN/inf. `T` is the stored element (f32, f64, or u16 bits of f16/bf16).
#[inline(always)]
fn float_blocks<T: bytemuck::Pod>(
    bytes: &[u8],
    decode: impl Fn(T) -> f64 + Copy,
    simd_block: Option<BlockKernel<T>>,
) -> Partials {
    let mut p = Partials::EMPTY;
    let mut scratch: Vec<T> = Vec::new();
    for block in bytes.chunks(BLOCK * size_of::<T>()) {
        let xs = as_elements(block, &mut scratch);
        let fast = match simd_block {
            Some(kernel) => kernel(xs),
            None => float_block(xs, decode),
        };
        match fast {
            Some(bp) => p.merge(&bp),
            None => xs.iter().for_each(|&x| p.push_f64(decode(x))),
        }
    }
    p
}

/// The block as a slice of `T`: borrowed when aligned (memory maps and `.pt`/`.npy` payloads
/// usually are), else copied into `scratch` (a cheap memcpy next to the arithmetic).
#[inline(always)]
fn as_elements<'a, T: bytemuck::Pod>(block: &'a [u8], scratch: &'a mut Vec<T>) -> &'a [T] {
    match bytemuck::try_cast_slice(block) {
        Ok(xs) => xs,
        Err(_) => {
            scratch.clear();
            scratch.extend(
                block
                    .chunks_exact(size_of::<T>())
                    .map(bytemuck::pod_read_unaligned::<T>),
            );
            scratch
        }
    }
}

/// One block in f64 lanes; `None` if it holds a NaN or an infinity (or a sum overflowed).
#[inline(always)]
fn float_block<T: Copy>(xs: &[T], decode: impl Fn(T) -> f64) -> Option<Partials> {
    let mut sum = [0f64; LANES];
    let mut sq = [0f64; LANES];
    let mut mn = [f64::INFINITY; LANES];
    let mut mx = [f64::NEG_INFINITY; LANES];
    let groups = xs.chunks_exact(LANES);
    let rest = groups.remainder();
    for g in groups {
        let g: &[T; LANES] = g.try_into().expect("chunks_exact(LANES)");
        let v = g.map(&decode);
        for l in 0..LANES {
            sum[l] += v[l];
            sq[l] += v[l] * v[l];
            // `x < m` is false for NaN, so NaN never becomes an extreme; this form maps to
            // one min/max instruction.
            mn[l] = if v[l] < mn[l] { v[l] } else { mn[l] };
            mx[l] = if v[l] > mx[l] { v[l] } else { mx[l] };
        }
    }
    for (l, &x) in rest.iter().enumerate() {
        let x = decode(x);
        sum[l] += x;
        sq[l] += x * x;
        mn[l] = if x < mn[l] { x } else { mn[l] };
        mx[l] = if x > mx[l] { x } else { mx[l] };
    }
    let s = sum.iter().fold(0.0, |a, b| a + b);
    let q = sq.iter().fold(0.0, |a, b| a + b);
    // NaN or ±inf in any element makes `s` or `q` NaN/inf; finite ones mean there was none.
    if !(s.is_finite() && q.is_finite()) {
        return None;
    }
    Some(Partials {
        count: xs.len() as u64,
        min: mn.iter().fold(f64::INFINITY, |a, &b| a.min(b)),
        max: mx.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b)),
        sum: s,
        sum_sq: q,
        ..Partials::EMPTY
    })
}

/// Integer kernel: exact extremes in i64 lanes, sums in f64 lanes (no NaN/inf possible).
#[inline(always)]
fn int_blocks<const N: usize>(bytes: &[u8], decode: impl Fn([u8; N]) -> i64 + Copy) -> Partials {
    let mut p = Partials::EMPTY;
    for block in bytes.chunks(BLOCK * N) {
        let mut sum = [0f64; LANES];
        let mut sq = [0f64; LANES];
        let mut mn = [i64::MAX; LANES];
        let mut mx = [i64::MIN; LANES];
        let groups = block.chunks_exact(N * LANES);
        let rest = groups.remainder();
        for g in groups {
            for l in 0..LANES {
                let x = decode(word::<N>(&g[l * N..]));
                let d = x as f64;
                sum[l] += d;
                sq[l] += d * d;
                mn[l] = mn[l].min(x);
                mx[l] = mx[l].max(x);
            }
        }
        for (l, w) in rest.chunks_exact(N).enumerate() {
            let x = decode(word::<N>(w));
            let d = x as f64;
            sum[l] += d;
            sq[l] += d * d;
            mn[l] = mn[l].min(x);
            mx[l] = mx[l].max(x);
        }
        let (lo, hi) = (
            *mn.iter().min().unwrap_or(&i64::MAX),
            *mx.iter().max().unwrap_or(&i64::MIN),
        );
        let count = (block.len() / N) as u64;
        if count == 0 {
            continue;
        }
        p.merge(&Partials {
            count,
            min: lo as f64,
            max: hi as f64,
            sum: sum.iter().fold(0.0, |a, b| a + b),
            sum_sq: sq.iter().fold(0.0, |a, b| a + b),
            int_min: lo as i128,
            int_max: hi as i128,
            ..Partials::EMPTY
        });
    }
    p
}

/// Bool (one byte per element, non-zero = true): everything follows from the count of trues.
#[inline(always)]
fn bool_partials(bytes: &[u8]) -> Partials {
    let n = bytes.len() as u64;
    if n == 0 {
        return Partials::EMPTY;
    }
    let trues = bytes.iter().map(|&b| (b != 0) as u64).sum::<u64>();
    let lo = (trues == n) as i128;
    let hi = (trues > 0) as i128;
    Partials {
        count: n,
        min: lo as f64,
        max: hi as f64,
        sum: trues as f64,
        sum_sq: trues as f64,
        int_min: lo,
        int_max: hi,
        ..Partials::EMPTY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_decode_matches_half_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_bits_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }

    fn pick<T>(simd: bool, k: Option<BlockKernel<T>>) -> Option<BlockKernel<T>> {
        if simd { k } else { None }
    }

    /// Both block kernels (portable and, where the CPU has it, AVX2) against the reference on
    /// data with specials in some blocks and a ragged tail.
    #[test]
    fn portable_and_simd_kernels_agree_with_reference() {
        let n = 3 * BLOCK + 37;
        let xs: Vec<f32> = (0..n)
            .map(|i| match i {
                5 => f32::NAN,
                40_000 => f32::INFINITY,
                _ => ((i * 7919) % 4001) as f32 / 64.0 - 31.25,
            })
            .collect();
        let f32_bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let f64_bytes: Vec<u8> = xs.iter().flat_map(|&x| (x as f64).to_le_bytes()).collect();
        let f16_bytes: Vec<u8> = xs
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        let bf16_bytes: Vec<u8> = xs
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        let check = |elem: DType, bytes: &[u8], got: Partials| {
            let shape = [n];
            let want = reference::partials(&TensorView::new(elem, &shape, bytes).unwrap());
            assert_eq!(
                (
                    got.count,
                    got.nan_count,
                    got.pos_inf_count,
                    got.min,
                    got.max
                ),
                (
                    want.count,
                    want.nan_count,
                    want.pos_inf_count,
                    want.min,
                    want.max
                ),
                "{elem:?}"
            );
            // Values are multiples of 1/64 below 2^6: every sum here is exact in f64.
            assert_eq!((got.sum, got.sum_sq), (want.sum, want.sum_sq), "{elem:?}");
        };
        let f16 = |h: u16| f16_bits_to_f32(h) as f64;
        let bf16 = |h: u16| f32::from_bits((h as u32) << 16) as f64;
        for simd in [false, true] {
            check(
                DType::F32,
                &f32_bytes,
                float_blocks::<f32>(&f32_bytes, |x| x as f64, pick(simd, x86::f32_kernel())),
            );
            check(
                DType::F64,
                &f64_bytes,
                float_blocks::<f64>(&f64_bytes, |x| x, pick(simd, x86::f64_kernel())),
            );
            check(
                DType::F16,
                &f16_bytes,
                float_blocks::<u16>(&f16_bytes, f16, pick(simd, x86::f16_kernel())),
            );
            check(
                DType::BF16,
                &bf16_bytes,
                float_blocks::<u16>(&bf16_bytes, bf16, pick(simd, x86::bf16_kernel())),
            );
            // Unaligned start: the scratch-copy path.
            let shifted = [&[0u8][..], &f32_bytes].concat();
            check(
                DType::F32,
                &f32_bytes,
                float_blocks::<f32>(&shifted[1..], |x| x as f64, pick(simd, x86::f32_kernel())),
            );
        }
    }

    #[test]
    fn nan_block_falls_back_to_exact_counts() {
        let mut xs = vec![1.0f32; BLOCK + 3];
        xs[5] = f32::NAN;
        xs[BLOCK + 1] = f32::NEG_INFINITY;
        let b: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let shape = [xs.len()];
        let v = TensorView::new(DType::F32, &shape, &b).unwrap();
        let p = partials(&v);
        assert_eq!(p, reference::partials(&v));
        assert_eq!((p.nan_count, p.neg_inf_count), (1, 1));
    }

    #[test]
    fn parallel_chunks_merge_in_order() {
        // Over the threshold, so several rayon chunks; integers keep the sums exact.
        let n = PAR_THRESHOLD_BYTES / 4 + 12345;
        let b: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 1000) as f32 - 500.0).to_le_bytes())
            .collect();
        let shape = [n];
        let v = TensorView::new(DType::F32, &shape, &b).unwrap();
        assert_eq!(partials(&v), reference::partials(&v));
        let (p, crc) = partials_and_crc32(&v);
        assert_eq!((p, crc), (reference::partials(&v), reference::crc32(&b)));
        let (p, x) = partials_and_xor(&v);
        assert_eq!((p, x), (reference::partials(&v), reference::xor(&b)));
    }
}
