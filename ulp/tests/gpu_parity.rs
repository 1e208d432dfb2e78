//! The GPU pair pass against the CPU fused pass (fp32 device, fp32 bench) over random data with
//! NaN, ±Inf, subnormals, binade tops and values at the thresholds. Counts, `max_abs_err`,
//! `max_rel`, `max_ulp` and the cosine's maxima are exact; the error sums within
//! PAIR_SUM_REL_TOL, the cosine sums within 1e-12.

use proptest::prelude::*;
use stats_gpu::gpu::{PAIR_SUM_REL_TOL, PairPartials};
use testsupport::{few_workgroups, gpu};
use ulp::fused::{DeviceFamily, FusedStats, Params, fused_stats};
use ulp::gpu::gpu_fused_f32;

fn cpu(bench: &[f32], device: &[f32]) -> FusedStats<f32, f64> {
    let p = Params::new(
        DeviceFamily::F32,
        numprobe_tensor::DType::F32,
        numprobe_tensor::DType::F32,
    );
    fused_stats::<f32, f32, f32, f64>(bench, device, &p)
}

fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) || (a == 0.0 && b == 0.0)
}

fn close(gpu: f64, cpu: f64, tol: f64) -> bool {
    if gpu.is_nan() || cpu.is_nan() || gpu.is_infinite() || cpu.is_infinite() {
        return gpu == cpu || (gpu.is_nan() && cpu.is_nan());
    }
    (gpu - cpu).abs() <= tol * gpu.abs().max(cpu.abs())
}

fn check(g: &PairPartials, c: &FusedStats<f32, f64>) {
    let bad = ulp::gpu::count_mismatches(g, c);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(g.n as usize, c.n);
    assert!(
        same_f32(g.max_abs_err as f32, c.max_abs_err),
        "max_abs_err {} vs {}",
        g.max_abs_err,
        c.max_abs_err
    );
    assert!(
        same_f32(g.max_rel as f32, c.max_rel),
        "max_rel {} vs {}",
        g.max_rel,
        c.max_rel
    );
    assert!(
        g.max_ulp.to_bits() == c.max_ulp.to_bits() || (g.max_ulp.is_nan() && c.max_ulp.is_nan()),
        "max_ulp {} vs {}",
        g.max_ulp,
        c.max_ulp
    );
    assert!(
        close(g.sum_sq, f64::from(c.sum_sq), PAIR_SUM_REL_TOL),
        "sum_sq {} vs {}",
        g.sum_sq,
        c.sum_sq
    );
    assert!(
        close(g.rel_sum, c.rel_sum_f64, PAIR_SUM_REL_TOL),
        "rel_sum {} vs {}",
        g.rel_sum,
        c.rel_sum_f64
    );
    assert!(
        close(g.sum_ulp, c.sum_ulp, PAIR_SUM_REL_TOL),
        "sum_ulp {} vs {}",
        g.sum_ulp,
        c.sum_ulp
    );
    check_cosine_inputs(g, c.max_abs_device, c.max_abs_bench, c.dot, c.dd, c.bb);
}

/// The cosine inputs: maxima exact; the sums (when the GPU kept every element and both sides
/// reach 2^-30, as ulp::gpu requires before using them) within 1e-12 of the CPU's float64
/// sums, relative to the magnitude sums.
fn check_cosine_inputs(g: &PairPartials, md: f64, mb: f64, dot: f64, dd: f64, bb: f64) {
    let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    assert!(
        same(g.max_abs_device, md),
        "max|D| {} vs {md}",
        g.max_abs_device
    );
    assert!(
        same(g.max_abs_bench, mb),
        "max|B| {} vs {mb}",
        g.max_abs_bench
    );
    let tiny = 2f64.powi(-30);
    if g.cos_out_of_range == 0 && dd.is_finite() && bb.is_finite() && md >= tiny && mb >= tiny {
        let scale = (dd * bb).sqrt();
        assert!(
            (g.dot - dot).abs() <= 1e-12 * scale,
            "dot {} vs {dot}",
            g.dot
        );
        assert!((g.dd - dd).abs() <= 1e-12 * dd, "dd {} vs {dd}", g.dd);
        assert!((g.bb - bb).abs() <= 1e-12 * bb, "bb {} vs {bb}", g.bb);
    }
}

/// A bench value: ordinary, tiny, subnormal, zero, at the small-value / accumulative edges,
/// at a binade top, huge, or non-finite.
fn bench_value() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => -100f32..100f32,
        1 => -1e-3f32..1e-3f32,
        1 => prop::sample::select(vec![
            0.0f32,
            -0.0,
            f32::from_bits(1),
            f32::from_bits(0x007f_ffff),
            -1e-40,
            f32::MIN_POSITIVE,
            2f32.powi(-20),
            -2f32.powi(-20),
            1.0,
            -1.0,
            1e-35,
            2f32.powi(-105),
            f32::from_bits(0x3fff_ffff),
            f32::from_bits(0x4c7f_f800),
            f32::from_bits(0xc17f_ffff),
            1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]),
    ]
}

/// A device value for bench `b`: equal, a relative perturbation (often exactly at a
/// threshold), a few ULPs off, or an unrelated/special value.
fn device_value(b: f32) -> impl Strategy<Value = f32> {
    prop_oneof![
        2 => Just(b),
        3 => prop::sample::select(vec![0.01f32, 0.001, 0.0001, 1e-5, -0.01, 0.5, 2f32.powi(-20)])
            .prop_map(move |r| b + r * (b.abs() + 2f32.powi(-23))),
        3 => (-40i32..40).prop_map(move |k| {
            let bits = b.to_bits() as i64 + i64::from(k);
            f32::from_bits(bits.clamp(0, u32::MAX as i64) as u32)
        }),
        1 => prop::sample::select(vec![
            0.0f32,
            f32::from_bits(3),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-30,
        ]),
        1 => -1e3f32..1e3f32,
    ]
}

fn pair() -> impl Strategy<Value = (f32, f32)> {
    bench_value().prop_flat_map(|b| (Just(b), device_value(b)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn gpu_matches_cpu(pairs in prop::collection::vec(pair(), 0..1200), chunk in 100usize..700) {
        let Some(gpu) = gpu(few_workgroups) else { return Ok(()) };
        let (bench, device): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
        let g = gpu_fused_f32(gpu, &bench, &device, chunk).unwrap();
        check(&g, &cpu(&bench, &device));
    }
}

#[test]
fn finite_data_over_many_chunks() {
    let Some(gpu) = gpu(few_workgroups) else {
        return;
    };
    let n = 5000;
    let bench: Vec<f32> = (0..n)
        .map(|i| ((i * 37 % 1001) as f32 - 500.0) * 0.013)
        .collect();
    let device: Vec<f32> = bench
        .iter()
        .enumerate()
        .map(|(i, &b)| b * (1.0 + (i % 7) as f32 * 1e-4) + (i % 3) as f32 * 1e-7)
        .collect();
    let g = gpu_fused_f32(gpu, &bench, &device, 256).unwrap();
    let c = cpu(&bench, &device);
    check(&g, &c);
    // The test can fail: the data has errors on both sides of every threshold.
    assert!(g.lt_hundredth > 0 && g.lt_ten_thousandth < n as u64);
    assert!(g.ulp_over > 0 && g.ulp_over < n as u64);
}

#[test]
fn many_elements_per_invocation() {
    let Some(gpu) = gpu(few_workgroups) else {
        return;
    };
    // One chunk over 2 workgroups: ~60 elements per invocation exercise the compensated sums.
    let n = 30_000;
    let bench: Vec<f32> = (0..n).map(|i| 1.0 + (i % 977) as f32 * 0.37).collect();
    let device: Vec<f32> = bench
        .iter()
        .enumerate()
        .map(|(i, &b)| b + (i % 11) as f32 * 1e-3)
        .collect();
    let g = gpu_fused_f32(gpu, &bench, &device, 0).unwrap();
    check(&g, &cpu(&bench, &device));
}
