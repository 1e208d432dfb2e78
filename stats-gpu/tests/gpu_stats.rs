//! GPU partials against the f64 reference, on a Gpu with a tiny chunk (4 KiB) so that every
//! tensor above 1024 f32 elements takes the multi-chunk path (ring of staging buffers, several
//! record flushes).

mod gpu_common;

use gpu_common::{Rng, check, random_bytes};
use proptest::prelude::*;
use stats_gpu::gpu::{Gpu, GpuError, GpuOptions};
use stats_gpu::{DType, Partials, TensorView};
use testsupport::gpu;

const CHUNK: u64 = 4096;

/// Chunks of CHUNK bytes: every tensor above 1024 f32 elements takes the multi-chunk path.
fn small_chunks() -> GpuOptions {
    GpuOptions {
        chunk_bytes: Some(CHUNK),
        ..GpuOptions::default()
    }
}

/// Runs `bytes` (placed at byte offset `offset` of a fresh buffer, so the view may be
/// unaligned) through `partials`, `partials_batch` and the resident path.
fn check_all_paths(g: &Gpu, elem: DType, bytes: &[u8], offset: usize) -> Result<(), String> {
    let mut buf = vec![0xA5u8; offset];
    buf.extend_from_slice(bytes);
    let shape = [bytes.len() / elem.size()];
    let view = TensorView::new(elem, &shape, &buf[offset..]).map_err(|e| e.to_string())?;
    let streamed = g.partials(&view).map_err(|e| e.to_string())?;
    check(&streamed, &view).map_err(|e| format!("partials: {e}"))?;
    let batched = g.partials_batch(&[view]).map_err(|e| e.to_string())?;
    check(&batched[0], &view).map_err(|e| format!("partials_batch: {e}"))?;
    let resident = g.upload(&view).map_err(|e| e.to_string())?;
    let (p, _) = g
        .partials_resident_timed(&resident)
        .map_err(|e| e.to_string())?;
    check(&p, &view).map_err(|e| format!("resident: {e}"))
}

fn f32_bits() -> impl Strategy<Value = u32> {
    prop_oneof![
        8 => (-1e3f32..1e3f32).prop_map(f32::to_bits),
        1 => prop::sample::select(vec![0x7fc0_0000u32, 0xffc0_0000, 0x7f80_0001, 0xff81_2345, 0x7fff_ffff]),
        1 => prop::sample::select(vec![0x7f80_0000u32, 0xff80_0000]),
        1 => prop::sample::select(vec![0u32, 0x8000_0000]),
        1 => (any::<bool>(), 1u32..0x0080_0000).prop_map(|(s, m)| m | (u32::from(s) << 31)),
        1 => (any::<bool>(), 1e30f32..f32::MAX).prop_map(|(s, x)| if s { -x } else { x }.to_bits()),
        1 => (any::<bool>(), 1e-38f32..1e-30).prop_map(|(s, x)| if s { -x } else { x }.to_bits()),
        1 => any::<u32>(),
    ]
}

fn u16_bits(elem: DType) -> impl Strategy<Value = u16> {
    let from_f32 = move |x: f32| match elem {
        DType::F16 => half::f16::from_f32(x).to_bits(),
        _ => half::bf16::from_f32(x).to_bits(),
    };
    prop_oneof![
        8 => (-1e3f32..1e3f32).prop_map(from_f32),
        // NaNs (quiet and signalling), ±inf, ±0, subnormals, the largest finite values.
        1 => prop::sample::select(vec![0x7e00u16, 0xfe00, 0x7c01, 0x7f81, 0xffc1, 0x7fc0]),
        1 => prop::sample::select(vec![0x7c00u16, 0xfc00, 0x7f80, 0xff80, 0, 0x8000]),
        1 => prop::sample::select(vec![1u16, 0x8001, 0x03ff, 0x007f, 0x7bff, 0xfbff, 0x7f7f, 0xff7f]),
        2 => any::<u16>(),
    ]
}

fn len() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0usize..300, 3 => 300usize..5000, 1 => 5000usize..40_000]
}

/// A whole tensor of one magnitude: `unit * scale` with scale from subnormal to near f32::MAX,
/// so that errors are judged against large or tiny totals.
fn uniform_tensor(elem: DType) -> impl Strategy<Value = Vec<u8>> {
    let scales: Vec<f64> = match elem {
        DType::F16 => vec![1e-7, 1e-5, 1.0, 6e4],
        _ => vec![1e-44, 1e-40, 1e-30, 1.0, 1e19, 1e30, 3e38],
    };
    (prop::sample::select(scales), len(), any::<u64>())
        .prop_map(move |(scale, n, seed)| random_bytes(elem, n, scale, &mut Rng(seed | 1)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn f32_mixed_values(bits in prop::collection::vec(f32_bits(), 0..3000), big in len(), offset in 0usize..4) {
        let Some(g) = gpu(small_chunks) else { return Ok(()) };
        let mut bits = bits;
        // Stretch some cases over many chunks with a repeating pattern.
        if big > bits.len() && !bits.is_empty() {
            bits = bits.iter().copied().cycle().take(big).collect();
        }
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        check_all_paths(g, DType::F32, &bytes, offset).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn f16_mixed_values(bits in prop::collection::vec(u16_bits(DType::F16), 0..3000), offset in 0usize..4) {
        let Some(g) = gpu(small_chunks) else { return Ok(()) };
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        check_all_paths(g, DType::F16, &bytes, offset).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn bf16_mixed_values(bits in prop::collection::vec(u16_bits(DType::BF16), 0..3000), offset in 0usize..4) {
        let Some(g) = gpu(small_chunks) else { return Ok(()) };
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        check_all_paths(g, DType::BF16, &bytes, offset).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn one_magnitude_tensors(
        (elem, bytes) in prop::sample::select(vec![DType::F32, DType::F16, DType::BF16])
            .prop_flat_map(|e| (Just(e), uniform_tensor(e))),
        offset in 0usize..4,
    ) {
        let Some(g) = gpu(small_chunks) else { return Ok(()) };
        check_all_paths(g, elem, &bytes, offset).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn batches_of_mixed_sizes_and_types(
        tensors in prop::collection::vec(
            (prop::sample::select(vec![DType::F32, DType::F16, DType::BF16]),
             prop_oneof![3 => 0usize..40, 3 => 40usize..1500, 1 => 1500usize..20_000],
             prop::sample::select(vec![1e-40, 1.0, 1e30]),
             any::<u64>(),
             any::<bool>()),
            0..24),
    ) {
        let Some(g) = gpu(small_chunks) else { return Ok(()) };
        let data: Vec<(DType, Vec<u8>, [usize; 1])> = tensors
            .iter()
            .map(|&(elem, n, scale, seed, special)| {
                let mut bytes = random_bytes(elem, n, scale, &mut Rng(seed | 1));
                if special && n > 2 {
                    // A NaN and an infinity somewhere inside.
                    let (nan, inf): (&[u8], &[u8]) = match elem {
                        DType::F32 => (&[0, 0, 0xc0, 0x7f], &[0, 0, 0x80, 0xff]),
                        DType::F16 => (&[0, 0x7e], &[0, 0x7c]),
                        _ => (&[0xc0, 0x7f], &[0x80, 0xff]),
                    };
                    let s = elem.size();
                    let i = (seed as usize % n) * s;
                    bytes[i..i + s].copy_from_slice(nan);
                    let j = ((seed >> 20) as usize % n) * s;
                    bytes[j..j + s].copy_from_slice(inf);
                }
                (elem, bytes, [n])
            })
            .collect();
        let views: Vec<TensorView> = data
            .iter()
            .map(|(elem, bytes, shape)| TensorView::new(*elem, shape, bytes).unwrap())
            .collect();
        let got = g.partials_batch(&views).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(got.len(), views.len());
        for (p, v) in got.iter().zip(&views) {
            check(p, v).map_err(TestCaseError::fail)?;
        }
    }
}

#[test]
fn empty_scalar_and_one_element() {
    let Some(g) = gpu(small_chunks) else { return };
    for elem in [DType::F32, DType::F16, DType::BF16] {
        let empty = TensorView::new(elem, &[0, 3], &[]).unwrap();
        let p = g.partials(&empty).unwrap();
        assert_eq!(
            p,
            Partials {
                count: 0,
                ..Partials::EMPTY
            }
        );
        assert_eq!(g.partials_batch(&[empty, empty]).unwrap(), vec![p, p]);
        let one = vec![0x40u8; elem.size()];
        let scalar = TensorView::new(elem, &[], &one).unwrap();
        check(&g.partials(&scalar).unwrap(), &scalar).unwrap();
        check(&g.partials_batch(&[scalar]).unwrap()[0], &scalar).unwrap();
        let shape = [1usize];
        let single = TensorView::new(elem, &shape, &one).unwrap();
        check_all_paths(g, elem, single.bytes(), 1).unwrap();
    }
}

#[test]
fn every_16_bit_pattern() {
    let Some(g) = gpu(small_chunks) else { return };
    let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
    for elem in [DType::F16, DType::BF16] {
        check_all_paths(g, elem, &bytes, 0).unwrap();
        let p = g
            .partials(&TensorView::new(elem, &[65536], &bytes).unwrap())
            .unwrap();
        let (nans, infs) = if elem == DType::F16 {
            (2046, 1)
        } else {
            (254, 1)
        };
        assert_eq!(
            (p.nan_count, p.pos_inf_count, p.neg_inf_count),
            (nans, infs, infs)
        );
    }
}

#[test]
fn all_nan_and_all_infinite() {
    let Some(g) = gpu(small_chunks) else { return };
    let nan: Vec<u8> = std::iter::repeat_n(f32::NAN.to_le_bytes(), 5000)
        .flatten()
        .collect();
    let p = g
        .partials(&TensorView::new(DType::F32, &[5000], &nan).unwrap())
        .unwrap();
    assert_eq!(
        (p.nan_count, p.min, p.max, p.sum),
        (5000, f64::INFINITY, f64::NEG_INFINITY, 0.0)
    );
    let inf: Vec<u8> = std::iter::repeat_n(f32::NEG_INFINITY.to_le_bytes(), 3001)
        .flatten()
        .collect();
    let p = g
        .partials(&TensorView::new(DType::F32, &[3001], &inf).unwrap())
        .unwrap();
    assert_eq!(
        (p.neg_inf_count, p.min, p.max, p.sum_sq),
        (3001, f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0)
    );
}

#[test]
fn sums_that_overflow_f32_stay_finite() {
    let Some(g) = gpu(small_chunks) else { return };
    // 3e38 squared overflows f32 (and so does the sum of two of them); the f64 reference doesn't.
    for x in [3e38f32, 1e30, 2e19, -3.3e38] {
        let bytes: Vec<u8> = std::iter::repeat_n(x.to_le_bytes(), 10_007)
            .flatten()
            .collect();
        let view = TensorView::new(DType::F32, &[10_007], &bytes).unwrap();
        let p = g.partials(&view).unwrap();
        assert!(p.sum.is_finite() && p.sum_sq.is_finite(), "{x}: {p:?}");
        check(&p, &view).unwrap();
    }
    // Subnormals only: their squares underflow f32 unless scaled.
    let bytes: Vec<u8> = (1u32..20_000)
        .flat_map(|m| f32::from_bits(m * 37).to_le_bytes())
        .collect();
    let view = TensorView::new(DType::F32, &[19_999], &bytes).unwrap();
    let p = g.partials(&view).unwrap();
    assert!(p.sum_sq > 0.0);
    check(&p, &view).unwrap();
}

#[test]
fn long_sums_keep_their_precision() {
    let Some(g) = gpu(small_chunks) else { return };
    // 2 Mi values of 0.1 + tiny noise: a plain f32 running sum drifts by ~1e-3 relative.
    let n = 1 << 21;
    let mut rng = Rng(7);
    let bytes: Vec<u8> = (0..n)
        .flat_map(|_| ((0.1 + rng.unit() * 1e-3) as f32).to_le_bytes())
        .collect();
    let shape = [n];
    let view = TensorView::new(DType::F32, &shape, &bytes).unwrap();
    let p = g.partials(&view).unwrap();
    check(&p, &view).unwrap();
    let want = stats_gpu::reference::partials(&view);
    assert!(
        (p.sum - want.sum).abs() <= 1e-7 * want.sum.abs(),
        "{} vs {}",
        p.sum,
        want.sum
    );
}

#[test]
fn other_types_are_refused() {
    let Some(g) = gpu(small_chunks) else { return };
    for elem in [DType::I32, DType::F64, DType::Bool, DType::C64] {
        assert!(!Gpu::supports(elem));
        let bytes = vec![0u8; elem.size() * 3];
        let view = TensorView::new(elem, &[3], &bytes).unwrap();
        assert!(matches!(g.partials(&view), Err(GpuError::Unsupported(e)) if e == elem));
        assert!(matches!(g.partials_batch(&[view]), Err(GpuError::Unsupported(e)) if e == elem));
        assert!(matches!(g.upload(&view), Err(GpuError::Unsupported(e)) if e == elem));
    }
    // The failures left the reusable buffers usable.
    let bytes = 1.5f32.to_le_bytes();
    let view = TensorView::new(DType::F32, &[1], &bytes).unwrap();
    assert_eq!(g.partials(&view).unwrap().max, 1.5);
}
