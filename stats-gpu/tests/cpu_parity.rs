//! The fast CPU path against the f64 reference: exact counts and extremes, sums within the
//! bound documented in `stats_gpu::fast` (2·γ(n) of Σ|x|, resp. of Σx²).

use proptest::prelude::*;
use stats_gpu::{DType, Partials, TensorView, fast, reference};

const ALL: [DType; 17] = DType::ALL;

/// Values that stress the kernels, besides ordinary random ones.
const SPECIAL: [f64; 16] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1e-40,   // f32 subnormal
    -3e-8,   // f16 subnormal
    1e-300,  // f64 tiny
    5e-324,  // f64 smallest subnormal
    3.0e38,  // near f32 max: x² overflows f32, not f64
    -1.0e20, // x² above f32 range
    65504.0, // f16 max
    1e300,   // f64 huge: x² overflows f64
    -1.7e308,
    1.0,
    -1.5,
];

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => -1e6f64..1e6,
        1 => -1.0f64..1.0,
        1 => prop::sample::select(SPECIAL.to_vec()),
        1 => any::<u64>().prop_map(f64::from_bits),
    ]
}

/// Little-endian bytes of `xs` in `elem`; integers take the raw bits of the f64's mantissa so
/// every bit pattern shows up, bool bytes are arbitrary (non-zero = true).
fn encode(elem: DType, xs: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(xs.len() * elem.size());
    for &x in xs {
        let bits = x.to_bits().wrapping_mul(0x9E37_79B9_7F4A_7C15);
        match elem {
            DType::Bool => out.push(if x > 0.0 { (bits >> 56) as u8 | 1 } else { 0 }),
            DType::F16 => out.extend(half::f16::from_f64(x).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f64(x).to_le_bytes()),
            DType::F32 => out.extend((x as f32).to_le_bytes()),
            DType::F64 => out.extend(x.to_le_bytes()),
            DType::C64 => {
                out.extend((x as f32).to_le_bytes());
                out.extend(((x * 0.5) as f32).to_le_bytes());
            }
            DType::C128 => {
                out.extend(x.to_le_bytes());
                out.extend((-x * 0.25).to_le_bytes());
            }
            _ => out.extend(&bits.to_le_bytes()[..elem.size()]),
        }
    }
    out
}

fn gamma(n: u64) -> f64 {
    let u = n as f64 * f64::EPSILON / 2.0;
    u / (1.0 - u)
}

fn assert_close(elem: DType, fast: &Partials, want: &Partials) {
    let what = format!("{elem:?}: fast {fast:?} vs reference {want:?}");
    assert_eq!(fast.count, want.count, "{what}");
    assert_eq!(fast.nan_count, want.nan_count, "{what}");
    assert_eq!(fast.pos_inf_count, want.pos_inf_count, "{what}");
    assert_eq!(fast.neg_inf_count, want.neg_inf_count, "{what}");
    assert_eq!(fast.min, want.min, "{what}");
    assert_eq!(fast.max, want.max, "{what}");
    assert_eq!(fast.int_min, want.int_min, "{what}");
    assert_eq!(fast.int_max, want.int_max, "{what}");
    if want.count == want.nan_count {
        // No finite values (or none at all): both sums are exactly zero.
        assert_eq!((fast.sum, fast.sum_sq), (0.0, 0.0), "{what}");
        return;
    }
    let g = 2.0 * gamma(fast.count);
    let max_abs = want.min.abs().max(want.max.abs());
    if max_abs.is_finite() && max_abs > 1e150 {
        // f64 sums this close to overflow depend on the order (one order overflows, another
        // does not); Mean/Norm of f64 tensors are not recorded by PyTorch msprobe anyway.
        return;
    }
    // Σ|x| ≤ n·max|x| over the finite values.
    let sum_bound = g * fast.count as f64 * max_abs;
    for (got, exp, bound) in [
        (fast.sum, want.sum, sum_bound),
        (fast.sum_sq, want.sum_sq, g * want.sum_sq),
    ] {
        if exp.is_finite() {
            assert!(
                (got - exp).abs() <= bound,
                "{what}: |{got} - {exp}| > {bound}"
            );
        } else {
            // An f64 tensor whose sums overflow: the fallback reproduces the reference.
            assert!(got == exp || (got.is_nan() && exp.is_nan()), "{what}");
        }
    }
}

fn check(elem: DType, xs: &[f64]) {
    let bytes = encode(elem, xs);
    let shape = [xs.len()];
    let view = TensorView::new(elem, &shape, &bytes).unwrap();
    let want = reference::partials(&view);
    assert_close(elem, &fast::partials(&view), &want);
    let (p, crc) = fast::partials_and_crc32(&view);
    assert_close(elem, &p, &want);
    assert_eq!(crc, reference::crc32(&bytes));
    let (p, x) = fast::partials_and_xor(&view);
    assert_close(elem, &p, &want);
    assert_eq!(x, reference::xor(&bytes));
}

fn sized_values() -> impl Strategy<Value = Vec<f64>> {
    prop_oneof![
        4 => prop::collection::vec(value(), 0..40),
        3 => prop::collection::vec(value(), 40..3000),
        1 => prop::collection::vec(value(), 3000..100_000),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fast_matches_reference(
        elem in prop::sample::select(ALL.to_vec()),
        xs in sized_values(),
    ) {
        check(elem, &xs);
    }

    /// Finite values only, so the fast blocks (not the NaN/inf fallback) are what is compared.
    #[test]
    fn fast_blocks_match_reference(
        elem in prop::sample::select(vec![DType::F16, DType::BF16, DType::F32, DType::F64]),
        xs in prop::collection::vec(prop_oneof![(-1e4f64..1e4), (-1e-30f64..1e-30)], 0..70_000),
    ) {
        check(elem, &xs);
    }
}

#[test]
fn empty_and_single_element() {
    for elem in ALL {
        check(elem, &[]);
        for x in SPECIAL {
            check(elem, &[x]);
        }
        let bytes = encode(elem, &[2.0]);
        let view = TensorView::new(elem, &[], &bytes).unwrap();
        assert_close(elem, &fast::partials(&view), &reference::partials(&view));
    }
}

/// Above the parallel threshold, with NaN/inf in some blocks only: multi-chunk merge order and
/// per-block fallback together.
#[test]
fn multi_chunk_with_special_blocks() {
    let n = fast::PAR_THRESHOLD_BYTES / 2 + 777;
    let xs: Vec<f64> = (0..n)
        .map(|i| match i % 100_003 {
            17 => f64::NAN,
            99 => f64::NEG_INFINITY,
            _ => ((i * 7919) % 2001) as f64 / 16.0 - 62.5,
        })
        .collect();
    for elem in [DType::F16, DType::BF16, DType::F32, DType::I16, DType::U8] {
        check(elem, &xs);
    }
}

/// The batch entry point gives each tensor exactly its own `partials`, above and below the
/// parallel threshold (170 × 16 KiB).
#[test]
fn batch_equals_one_by_one() {
    let xs: Vec<f64> = (0..700_000)
        .map(|i| ((i * 31) % 977) as f64 * 0.37 - 150.0)
        .collect();
    let bytes = encode(DType::F32, &xs);
    for (count, len) in [(7usize, 1000usize), (170, 4096)] {
        let shape = [len];
        let views: Vec<TensorView> = bytes
            .chunks_exact(len * 4)
            .take(count)
            .map(|c| TensorView::new(DType::F32, &shape, c).unwrap())
            .collect();
        let one_by_one: Vec<Partials> = views.iter().map(fast::partials).collect();
        assert_eq!(fast::partials_batch(&views), one_by_one);
    }
}
