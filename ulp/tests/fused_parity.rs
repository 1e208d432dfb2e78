//! Property tests: the fused pass agrees with the plain reference implementation on random data
//! mixed with NaN, ±Inf, subnormals, signed zeros and values at every threshold.

#[path = "common/edges.rs"]
mod edges;
use half::f16;
use proptest::prelude::*;
use ulp::elem::NumpyFloat;
use ulp::fused::{DeviceFamily, Scope};
use ulp::metrics::{AllMetrics, all_metrics, metrics_in_scope};
use ulp::reference::{self, Pair};
use ulp::{DType, Elems, PyVal};

#[derive(Clone, Debug)]
enum Gen {
    Special(usize),
    Normal(f64, i32),
}

fn gen_value() -> impl Strategy<Value = Gen> {
    prop_oneof![
        1 => (0..edges::edge_values().len()).prop_map(Gen::Special),
        3 => (-1.0f64..1.0, -30i32..30).prop_map(|(m, e)| Gen::Normal(m, e)),
    ]
}

fn value(g: &Gen) -> f64 {
    match g {
        Gen::Special(i) => edges::edge_values()[*i],
        Gen::Normal(m, e) => m * 2f64.powi(*e),
    }
}

/// How the device value relates to the bench value.
fn gen_pair() -> impl Strategy<Value = (Gen, u8, f64, Gen)> {
    (gen_value(), 0u8..5, -0.02f64..0.02, gen_value())
}

fn build(pairs: &[(Gen, u8, f64, Gen)]) -> (Vec<f64>, Vec<f64>) {
    pairs
        .iter()
        .map(|(bg, mode, noise, dg)| {
            let b = value(bg);
            let d = match mode {
                0 => b,
                1 | 2 => b * (1.0 + noise),
                3 => b * (1.0 + noise * 1e-4),
                _ => value(dg),
            };
            (b, d)
        })
        .unzip()
}

fn same(what: &str, got: &PyVal, want: &PyVal, tol: f64) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        got.type_name(),
        want.type_name(),
        "{} type: {:?} vs {:?}",
        what,
        got,
        want
    );
    match (got.as_f64(), want.as_f64()) {
        (Some(g), Some(w)) => {
            let ok = g == w
                || (g.is_nan() && w.is_nan())
                || (tol > 0.0 && (g - w).abs() <= tol * w.abs());
            prop_assert!(ok, "{}: {:e} vs {:e}", what, g, w);
        }
        _ => prop_assert_eq!(got, want, "{}", what),
    }
    Ok(())
}

fn compare(family: DeviceFamily, bench: &[f64], device: &[f64]) -> Result<(), TestCaseError> {
    if bench.is_empty() {
        return Ok(());
    }
    // Store the arrays in the dtypes msprobe hands to numpy for this device dtype.
    let (bk, dk) = match family {
        DeviceFamily::F16 => (DType::F32, DType::F16),
        DeviceFamily::BF16 | DeviceFamily::F32 if family == DeviceFamily::BF16 => {
            (DType::F32, DType::F32)
        }
        DeviceFamily::F32 => (DType::F64, DType::F32),
        _ => (DType::F64, DType::F64),
    };
    let bench: Vec<f64> = bench.iter().map(|&x| bk.round(x)).collect();
    let device: Vec<f64> = device
        .iter()
        .map(|&x| {
            let x = dk.round(x);
            if family == DeviceFamily::BF16 {
                half::bf16::from_f64(x).to_f64()
            } else {
                x
            }
        })
        .collect();
    let b32: Vec<f32> = bench.iter().map(|&x| x as f32).collect();
    let d32: Vec<f32> = device.iter().map(|&x| x as f32).collect();
    let d16: Vec<f16> = device.iter().map(|&x| f16::from_f64(x)).collect();
    let bdata = if bk == DType::F32 {
        Elems::F32(&b32)
    } else {
        Elems::F64(&bench)
    };
    let ddata = match dk {
        DType::F16 => Elems::F16(&d16),
        DType::F32 => Elems::F32(&d32),
        _ => Elems::F64(&device),
    };
    let m = all_metrics(bdata, ddata, family).unwrap();
    // The benchmark-only pass (run_ut's default routing) gives the same bits for what it
    // gathers and nothing for the other standards.
    let narrow = metrics_in_scope(bdata, ddata, family, false, Scope::Benchmark).unwrap();
    let want = AllMetrics {
        absolute_threshold: None,
        accumulative: None,
        ulp: None,
        binary_error_rate: None,
        ..m.clone()
    };
    prop_assert_eq!(format!("{narrow:?}"), format!("{want:?}"));
    let p = Pair {
        bench: &bench,
        bench_dtype: bk,
        device: &device,
        device_dtype: dk,
        family,
    };
    // Beyond one numpy block a float64 mean is summed plainly (within 1e-15 of numpy's).
    let mean_tol = if bench.len() > 8192 && bk == DType::F64 {
        1e-13
    } else {
        0.0
    };
    let rb = reference::benchmark(&p);
    let fb = m.benchmark.as_ref().unwrap();
    same(
        "small_value_err_ratio",
        &fb.small_value_err_ratio,
        &rb.small_value_err_ratio,
        0.0,
    )?;
    same("max_rel_error", &fb.max_rel_error, &rb.max_rel_error, 0.0)?;
    same(
        "mean_rel_error",
        &fb.mean_rel_error,
        &rb.mean_rel_error,
        mean_tol,
    )?;
    same("rmse", &fb.rmse, &rb.rmse, 0.0)?;
    same("eb", &fb.eb, &rb.eb, 0.0)?;
    let ra = reference::absolute_threshold(&p);
    let (fa, fc) = (
        m.absolute_threshold.as_ref().unwrap(),
        m.accumulative.as_ref().unwrap(),
    );
    same(
        "inf_nan_error_ratio",
        &fa.inf_nan_error_ratio,
        &ra.inf_nan_error_ratio,
        0.0,
    )?;
    same("rel_err_ratio", &fa.rel_err_ratio, &ra.rel_err_ratio, 0.0)?;
    same("abs_err_ratio", &fa.abs_err_ratio, &ra.abs_err_ratio, 0.0)?;
    let rc = reference::accumulative(&p);
    same(
        "acc inf_nan",
        &fc.inf_nan_error_ratio,
        &rc.inf_nan_error_ratio,
        0.0,
    )?;
    same("acc rel", &fc.rel_err_ratio, &rc.rel_err_ratio, 0.0)?;
    same("acc abs", &fc.abs_err_ratio, &rc.abs_err_ratio, 0.0)?;
    same("acc eb", &fc.eb, &rc.eb, 0.0)?;
    match (reference::ulp(&p), &m.ulp) {
        (Some(r), Some(f)) => {
            same("max_ulp_error", &f.max_ulp_error, &r.max_ulp_error, 0.0)?;
            same("mean_ulp_error", &f.mean_ulp_error, &r.mean_ulp_error, 0.0)?;
            same(
                "ulp_error_proportion",
                &f.ulp_error_proportion,
                &r.ulp_error_proportion,
                0.0,
            )?;
        }
        (None, None) => {}
        (r, f) => prop_assert!(false, "ulp presence differs: {:?} vs {:?}", r, f),
    }
    for (t, got) in [
        (0.01, &m.hundredth),
        (0.001, &m.thousandth),
        (0.0001, &m.ten_thousandth),
    ] {
        let (v, pass) = reference::rel_err_ratio(&p, t);
        same("dual ratio", &got.value, &v, 0.0)?;
        prop_assert_eq!(got.pass, pass);
    }
    same(
        "max_abs_err",
        m.max_abs_err.as_ref().unwrap(),
        &reference::max_abs_err(&p),
        0.0,
    )?;
    Ok(())
}

fn family() -> impl Strategy<Value = DeviceFamily> {
    prop_oneof![
        Just(DeviceFamily::F16),
        Just(DeviceFamily::BF16),
        Just(DeviceFamily::F32),
        Just(DeviceFamily::Other)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fused_matches_reference_small(fam in family(), pairs in prop::collection::vec(gen_pair(), 1..400)) {
        let (b, d) = build(&pairs);
        compare(fam, &b, &d)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Several numpy blocks: the block-ordered sums must still match numpy's exactly.
    #[test]
    fn fused_matches_reference_multi_block(fam in family(), pairs in prop::collection::vec(gen_pair(), 1..64), len in prop_oneof![Just(8192usize), 8193usize..30000, 65536usize..70000]) {
        let (b, d) = build(&pairs);
        let b: Vec<f64> = (0..len).map(|i| b[i % b.len()] * (1.0 + (i as f64) * 1e-7)).collect();
        let d: Vec<f64> = (0..len).map(|i| d[i % d.len()] * (1.0 + (i as f64) * 1e-7)).collect();
        compare(fam, &b, &d)?;
    }
}

/// Many windows of the multi-block pass (32 blocks each on one thread) and a stretch of blocks
/// whose relative errors are mostly masked, so the float32 mean's re-blocking of the valid
/// errors crosses block, leaf and window edges unevenly.
#[test]
fn fused_matches_reference_across_windows() {
    let sp = edges::edge_values();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let unit = |r: u64| (r >> 11) as f64 / (1u64 << 53) as f64;
    let len = 70 * 8192 + 333;
    let (mut b, mut d) = (Vec::with_capacity(len), Vec::with_capacity(len));
    for i in 0..len {
        let r = next();
        let x = if r % 97 == 0 {
            sp[(r >> 8) as usize % sp.len()]
        } else {
            (unit(r) - 0.5) * 4.0
        };
        // Blocks 20..30: mostly benchmark values below every small-value threshold.
        let x = if (20 * 8192..30 * 8192).contains(&i) && r % 16 != 0 {
            x * 1e-9
        } else {
            x
        };
        let y = if r % 89 == 1 {
            sp[(r >> 20) as usize % sp.len()]
        } else {
            x * (1.0 + (unit(next()) - 0.5) * 1e-3)
        };
        b.push(x);
        d.push(y);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool");
    for fam in [
        DeviceFamily::F16,
        DeviceFamily::BF16,
        DeviceFamily::F32,
        DeviceFamily::Other,
    ] {
        if let Err(e) = pool.install(|| compare(fam, &b, &d)) {
            panic!("{fam:?}: {e}");
        }
    }
}

/// The fused statistics of one f32 pair under each instruction-set cap, as text (every field,
/// bit-exact through `{:?}` of the floats).
fn per_simd(fam: DeviceFamily, b: &[f32], d: &[f32]) -> Vec<String> {
    use ulp::fused::{FusedStats, Params, Simd, fused_stats};
    [Simd::Baseline, Simd::Avx2, Simd::Avx512]
        .into_iter()
        .map(|simd| {
            let p = Params::new(fam, DType::F32, DType::F32).with_simd(simd);
            let s: FusedStats<f32, f64> = fused_stats(b, d, &p);
            format!("{s:?}")
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The portable, AVX2 and AVX-512 kernels give the same bits (on a CPU without a level,
    /// that level runs the widest one the CPU has, so the check still holds).
    #[test]
    fn every_simd_cap_gives_the_same_bits(fam in family(), pairs in prop::collection::vec(gen_pair(), 1..64), len in prop_oneof![1usize..300, Just(8192usize), 8193usize..20000]) {
        let (b, d) = build(&pairs);
        let b: Vec<f32> = (0..len).map(|i| (b[i % b.len()] * (1.0 + (i as f64) * 1e-7)) as f32).collect();
        let d: Vec<f32> = (0..len).map(|i| (d[i % d.len()] * (1.0 + (i as f64) * 1e-7)) as f32).collect();
        let got = per_simd(fam, &b, &d);
        prop_assert_eq!(&got[0], &got[1], "baseline vs avx2");
        prop_assert_eq!(&got[1], &got[2], "avx2 vs avx512");
    }
}
