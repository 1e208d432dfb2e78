//! `ulp::gpu::all_metrics_gpu` against the CPU's `all_metrics` on the same pair, cell by cell:
//! fp32, fp16 and bf16 devices (bf16 both as float32 values and as packed bf16) with a float32
//! bench, random data with NaN, ±Inf, subnormals and threshold values, small chunks so that
//! every pair spans several. Every cell is exact except the four sum-based tolerance cells of
//! the spec (cosine, RMSE, mean relative error, mean ULP error: 1e-6 relative).

use half::{bf16, f16};
use numprobe_tensor::Elems;
use proptest::prelude::*;
use stats_gpu::gpu::Gpu;
use testsupport::{few_workgroups, gpu};
use ulp::gpu::{Backend, Engine, PairDevice, all_metrics_gpu, all_metrics_on};
use ulp::{AllMetrics, DeviceFamily, PyVal, all_metrics};

fn exact(name: &str, g: &PyVal, c: &PyVal) {
    assert_eq!(g.type_name(), c.type_name(), "{name}: {g:?} vs {c:?}");
    assert_eq!(g.csv_text(), c.csv_text(), "{name}");
}

fn tolerant(name: &str, g: &PyVal, c: &PyVal) {
    assert_eq!(g.type_name(), c.type_name(), "{name}: {g:?} vs {c:?}");
    match (g.as_f64(), c.as_f64()) {
        (Some(a), Some(b)) if a.is_finite() && b.is_finite() => assert!(
            (a - b).abs() <= 1e-6 * a.abs().max(b.abs()),
            "{name}: {a} vs {b}"
        ),
        _ => assert_eq!(g.csv_text(), c.csv_text(), "{name}"),
    }
}

fn opt(name: &str, g: &Option<PyVal>, c: &Option<PyVal>) {
    match (g, c) {
        (Some(g), Some(c)) => exact(name, g, c),
        _ => assert_eq!(g.is_some(), c.is_some(), "{name}"),
    }
}

fn same_cells(g: &AllMetrics, c: &AllMetrics) {
    assert_eq!(g.n, c.n);
    opt("max_abs_err", &g.max_abs_err, &c.max_abs_err);
    for (name, a, b) in [
        ("hundredth", &g.hundredth, &c.hundredth),
        ("thousandth", &g.thousandth, &c.thousandth),
        ("ten_thousandth", &g.ten_thousandth, &c.ten_thousandth),
    ] {
        exact(name, &a.value, &b.value);
        assert_eq!(a.pass, b.pass, "{name}");
    }
    assert_eq!(g.benchmark.is_some(), c.benchmark.is_some());
    if let (Some(a), Some(b)) = (&g.benchmark, &c.benchmark) {
        exact(
            "small_value_err_ratio",
            &a.small_value_err_ratio,
            &b.small_value_err_ratio,
        );
        exact("max_rel_error", &a.max_rel_error, &b.max_rel_error);
        tolerant("mean_rel_error", &a.mean_rel_error, &b.mean_rel_error);
        tolerant("rmse", &a.rmse, &b.rmse);
        exact("eb", &a.eb, &b.eb);
    }
    let (a, b) = (
        g.absolute_threshold
            .as_ref()
            .expect("GPU absolute threshold"),
        c.absolute_threshold
            .as_ref()
            .expect("CPU absolute threshold"),
    );
    exact(
        "inf_nan_error_ratio",
        &a.inf_nan_error_ratio,
        &b.inf_nan_error_ratio,
    );
    exact("rel_err_ratio", &a.rel_err_ratio, &b.rel_err_ratio);
    exact("abs_err_ratio", &a.abs_err_ratio, &b.abs_err_ratio);
    let (a, b) = (
        g.accumulative.as_ref().expect("GPU accumulative"),
        c.accumulative.as_ref().expect("CPU accumulative"),
    );
    exact(
        "acc inf_nan_error_ratio",
        &a.inf_nan_error_ratio,
        &b.inf_nan_error_ratio,
    );
    exact("acc rel_err_ratio", &a.rel_err_ratio, &b.rel_err_ratio);
    exact("acc abs_err_ratio", &a.abs_err_ratio, &b.abs_err_ratio);
    exact("acc eb", &a.eb, &b.eb);
    assert_eq!(g.ulp.is_some(), c.ulp.is_some());
    if let (Some(a), Some(b)) = (&g.ulp, &c.ulp) {
        exact("max_ulp_error", &a.max_ulp_error, &b.max_ulp_error);
        tolerant("mean_ulp_error", &a.mean_ulp_error, &b.mean_ulp_error);
        exact(
            "ulp_error_proportion",
            &a.ulp_error_proportion,
            &b.ulp_error_proportion,
        );
    }
    opt(
        "binary_error_rate",
        &g.binary_error_rate,
        &c.binary_error_rate,
    );
    tolerant("cosine", &g.cosine.value, &c.cosine.value);
    assert_eq!(g.cosine.pass, c.cosine.pass, "cosine pass");
    assert_eq!(g.cosine.message, c.cosine.message, "cosine message");
}

fn bench_value() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => -100f32..100f32,
        1 => -1e-3f32..1e-3f32,
        1 => prop::sample::select(vec![
            0.0f32,
            -0.0,
            f32::from_bits(1),
            -1e-40,
            f32::MIN_POSITIVE,
            2f32.powi(-20),
            2f32.powi(-10),
            -2f32.powi(-10),
            1.0,
            -1.0,
            65504.0,
            65520.0,
            70000.0,
            f32::from_bits(0x3fff_ffff),
            f32::from_bits(0x4c7f_f800),
            1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]),
    ]
}

/// A device value near `b`: equal, relatively perturbed (often at a threshold), or special.
fn device_value(b: f32) -> impl Strategy<Value = f32> {
    prop_oneof![
        2 => Just(b),
        3 => prop::sample::select(vec![0.01f32, 0.001, 0.0001, 1e-5, -0.01, 0.5, 2f32.powi(-8)])
            .prop_map(move |r| b + r * (b.abs() + 2f32.powi(-23))),
        3 => (-40i32..40).prop_map(move |k| {
            let bits = b.to_bits() as i64 + i64::from(k) * 4096;
            f32::from_bits(bits.clamp(0, u32::MAX as i64) as u32)
        }),
        1 => prop::sample::select(vec![
            0.0f32,
            f32::from_bits(3),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-30,
            65504.0,
        ]),
        1 => -1e3f32..1e3f32,
    ]
}

fn pairs(max: usize) -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    prop::collection::vec(
        bench_value().prop_flat_map(|b| (Just(b), device_value(b))),
        0..max,
    )
    .prop_map(|v| v.into_iter().unzip())
}

fn check_f32(gpu: &Gpu, bench: &[f32], device: &[f32], chunk: usize) {
    let c = all_metrics(Elems::F32(bench), Elems::F32(device), DeviceFamily::F32).unwrap();
    let g = all_metrics_gpu(
        gpu,
        bench,
        PairDevice::F32(device),
        DeviceFamily::F32,
        chunk,
    )
    .unwrap();
    same_cells(&g, &c);
}

fn check_f16(gpu: &Gpu, bench: &[f32], device: &[f32], chunk: usize) {
    let d: Vec<f16> = device.iter().map(|&x| f16::from_f32(x)).collect();
    let c = all_metrics(Elems::F32(bench), Elems::F16(&d), DeviceFamily::F16).unwrap();
    let g = all_metrics_gpu(gpu, bench, PairDevice::F16(&d), DeviceFamily::F16, chunk).unwrap();
    same_cells(&g, &c);
}

fn check_bf16(gpu: &Gpu, bench: &[f32], device: &[f32], chunk: usize) {
    let d: Vec<bf16> = device.iter().map(|&x| bf16::from_f32(x)).collect();
    // msprobe hands a bf16 device output to numpy as float32 values.
    let d32: Vec<f32> = d.iter().map(|x| x.to_f32()).collect();
    let c = all_metrics(Elems::F32(bench), Elems::F32(&d32), DeviceFamily::BF16).unwrap();
    let g = all_metrics_gpu(gpu, bench, PairDevice::BF16(&d), DeviceFamily::BF16, chunk).unwrap();
    same_cells(&g, &c);
    let g32 =
        all_metrics_gpu(gpu, bench, PairDevice::F32(&d32), DeviceFamily::BF16, chunk).unwrap();
    same_cells(&g32, &c);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn f32_cells_match_cpu((bench, device) in pairs(900), chunk in 64usize..400) {
        let Some(gpu) = gpu(few_workgroups) else { return Ok(()) };
        check_f32(gpu, &bench, &device, chunk);
    }

    #[test]
    fn f16_cells_match_cpu((bench, device) in pairs(900), chunk in 64usize..400) {
        let Some(gpu) = gpu(few_workgroups) else { return Ok(()) };
        check_f16(gpu, &bench, &device, chunk);
    }

    #[test]
    fn bf16_cells_match_cpu((bench, device) in pairs(900), chunk in 64usize..400) {
        let Some(gpu) = gpu(few_workgroups) else { return Ok(()) };
        check_bf16(gpu, &bench, &device, chunk);
    }
}

/// Finite data with errors on both sides of every threshold, over many chunks, so the cells
/// are non-trivial numbers (the random cases are often NaN-dominated).
fn finite_pair(n: usize) -> (Vec<f32>, Vec<f32>) {
    let bench: Vec<f32> = (0..n)
        .map(|i| ((i * 37 % 1001) as f32 - 500.0) * 0.013 + (i % 5) as f32 * 1e-7)
        .collect();
    let device = bench
        .iter()
        .enumerate()
        .map(|(i, &b)| b * (1.0 + (i % 7) as f32 * 3e-4) + (i % 3) as f32 * 1e-6)
        .collect();
    (bench, device)
}

#[test]
fn finite_cells_over_many_chunks() {
    let Some(gpu) = gpu(few_workgroups) else {
        return;
    };
    let (bench, device) = finite_pair(20_000);
    check_f32(gpu, &bench, &device, 1000);
    check_f16(gpu, &bench, &device, 1000);
    check_bf16(gpu, &bench, &device, 1000);
    // The case can fail: the metrics are neither all-pass nor degenerate.
    let g = all_metrics_gpu(
        gpu,
        &bench,
        PairDevice::F32(&device),
        DeviceFamily::F32,
        1000,
    )
    .unwrap();
    let u = g.ulp.unwrap();
    let p = u.ulp_error_proportion.as_f64().unwrap();
    assert!(p > 0.0 && p < 1.0, "{p}");
    assert!(g.cosine.value.as_f64().unwrap() > 0.99);
}

#[test]
fn extreme_magnitudes_redo_the_cosine_on_the_cpu() {
    let Some(gpu) = gpu(few_workgroups) else {
        return;
    };
    // 1e30 lies outside the kernel's cosine range: the sums are redone on the CPU.
    let bench: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) * 1e28).collect();
    let device: Vec<f32> = bench.iter().map(|&b| b * 1.001).collect();
    check_f32(gpu, &bench, &device, 128);
    let tiny: Vec<f32> = bench.iter().map(|&b| b * 1e-60).collect();
    let tiny_dev: Vec<f32> = device.iter().map(|&b| b * 1e-60).collect();
    check_f32(gpu, &tiny, &tiny_dev, 128);
}

#[test]
fn repeated_calls_reuse_buffers_and_agree() {
    let Some(gpu) = gpu(few_workgroups) else {
        return;
    };
    let (bench, device) = finite_pair(5000);
    let first = all_metrics_gpu(
        gpu,
        &bench,
        PairDevice::F32(&device),
        DeviceFamily::F32,
        512,
    )
    .unwrap();
    for _ in 0..3 {
        let again = all_metrics_gpu(
            gpu,
            &bench,
            PairDevice::F32(&device),
            DeviceFamily::F32,
            512,
        )
        .unwrap();
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
    }
    // A smaller pair after a larger one runs in the same (larger) buffers.
    check_f16(gpu, &bench[..77], &device[..77], 0);
}

#[test]
fn backend_selection_routes_what_the_gpu_cannot_take_to_the_cpu() {
    let (bench, device) = finite_pair(300);
    let b64: Vec<f64> = bench.iter().map(|&x| f64::from(x)).collect();
    let gpu = gpu(few_workgroups);
    let engine = match gpu {
        Some(g) => Engine::with_gpu(g),
        None => Engine::new(),
    };
    // A float64 bench (run_ut's fp32 device) always runs on the CPU, whatever the backend.
    let backends: &[Backend] = match gpu {
        Some(_) => &[Backend::Cpu, Backend::Auto, Backend::Gpu],
        None => &[Backend::Cpu, Backend::Auto],
    };
    for &backend in backends {
        let got = all_metrics_on(
            Elems::F64(&b64),
            Elems::F32(&device),
            DeviceFamily::F32,
            false,
            &engine,
            backend,
        )
        .unwrap();
        let want = all_metrics(Elems::F64(&b64), Elems::F32(&device), DeviceFamily::F32).unwrap();
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }
    if gpu.is_none() {
        return;
    }
    let got = all_metrics_on(
        Elems::F32(&bench),
        Elems::F32(&device),
        DeviceFamily::BF16,
        false,
        &engine,
        Backend::Gpu,
    )
    .unwrap();
    let want = all_metrics(Elems::F32(&bench), Elems::F32(&device), DeviceFamily::BF16).unwrap();
    same_cells(&got, &want);
}
