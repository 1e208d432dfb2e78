//! Long per-invocation sums: with a single workgroup, each of the 256 invocations adds
//! thousands of block sums, which is where a plain f32 accumulator drifts. The compensated
//! accumulators must stay within a few units of 2^-24 of the f64 reference.

mod gpu_common;

use gpu_common::{Rng, check};
use stats_gpu::gpu::GpuOptions;
use stats_gpu::{DType, TensorView, reference};
use testsupport::gpu;

/// One workgroup: each invocation adds thousands of block sums.
fn one_workgroup() -> GpuOptions {
    GpuOptions {
        workgroups: Some(1),
        ..GpuOptions::default()
    }
}

#[test]
fn long_same_sign_sums_stay_accurate() {
    let Some(g) = gpu(one_workgroup) else { return };
    assert_eq!(g.workgroups(), 1);
    let n = 1 << 21;
    let mut rng = Rng(11);
    for (elem, bytes) in [
        (
            DType::F32,
            (0..n)
                .flat_map(|_| ((0.1 + rng.unit() * 1e-3) as f32).to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
        (
            DType::BF16,
            (0..n)
                .flat_map(|_| half::bf16::from_f64(3.0 + rng.unit()).to_le_bytes())
                .collect(),
        ),
    ] {
        let shape = [n];
        let view = TensorView::new(elem, &shape, &bytes).unwrap();
        let p = g.partials(&view).unwrap();
        check(&p, &view).unwrap();
        let want = reference::partials(&view);
        // 8192 values per invocation. On lavapipe this data gives relative errors of ~1e-10
        // compensated and 1e-8 to 5e-8 with the compensation removed (checked), so 3e-9 tells
        // them apart while leaving a margin for other drivers' rounding.
        assert!(
            (p.sum - want.sum).abs() <= 3e-9 * want.sum.abs(),
            "{elem:?} sum {} vs {}",
            p.sum,
            want.sum
        );
        assert!(
            (p.sum_sq - want.sum_sq).abs() <= 3e-9 * want.sum_sq,
            "{elem:?} sum_sq {} vs {}",
            p.sum_sq,
            want.sum_sq
        );
    }
}
