//! `EucDist` equals msprobe's (`np.linalg.norm(n - b, ord=2)` with numpy 1.26.4's OpenBLAS) to
//! the last bit, on 1 and 2 OpenBLAS threads: testdata/euc_dist/euc_dist.json, made by make.py
//! beside it from the same LCG values this test rebuilds.

use compare::cell::Cell;
use compare::tensor::compare_tensors_blas;
use numprobe_tensor::TensorView;
use testsupport::testdata;

/// make.py's `lcg_f32`.
fn lcg_f32(seed: u64, n: usize, scale: f64) -> Vec<f32> {
    let mut next = testsupport::lcg(seed);
    (0..n)
        .map(|_| {
            let s = next();
            (((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale) as f32
        })
        .collect()
}

fn parse_hex(h: &str) -> f64 {
    // float.hex(): [-]0x1.<13 hex digits>p<exp>, or 0x0.0p+0.
    let (mant, exp) = h.trim_start_matches("0x").split_once('p').unwrap();
    let (int, frac) = mant.split_once('.').unwrap();
    let frac_bits = u64::from_str_radix(&format!("{frac:0<13}"), 16).unwrap();
    let exp: i32 = exp.parse().unwrap();
    if int == "0" && frac_bits == 0 {
        return 0.0;
    }
    assert_eq!(int, "1", "normal numbers only: {h}");
    f64::from_bits((((exp + 1023) as u64) << 52) | frac_bits)
}

#[test]
fn euc_dist_is_numpy_openblas_bit_for_bit() {
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(testdata().join("euc_dist/euc_dist.json")).unwrap(),
    )
    .unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 50);
    for c in cases {
        let n = c["n"].as_u64().unwrap() as usize;
        let seed = c["seed"].as_u64().unwrap();
        let threads = c["threads"].as_u64().unwrap() as usize;
        let want = parse_hex(c["euc_dist"].as_str().unwrap());
        let mut x = lcg_f32(seed, n, 3.0);
        let mut y = lcg_f32(seed + 100, n, 3.0);
        for i in (0..n).step_by(7) {
            y[i] = x[i];
        }
        if n > 20 {
            (x[5], y[5]) = (f32::INFINITY, f32::INFINITY);
            (x[9], y[9]) = (f32::NAN, f32::NAN);
        }
        let shape = [n];
        let (xv, yv) = (
            TensorView::from_slice(&shape, &x).unwrap(),
            TensorView::from_slice(&shape, &y).unwrap(),
        );
        let got = compare_tensors_blas(&xv, &yv, threads);
        assert_eq!(
            got.values[1],
            Cell::Float(want),
            "n {n} seed {seed} threads {threads}"
        );
    }
}
