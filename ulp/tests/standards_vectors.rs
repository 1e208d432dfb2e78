//! run_ut_metrics.json `standards` and `primitives`: every standard and primitive msprobe
//! computed directly on each pair, checked against the fused pass and the plain reference.

mod common;

use common::*;
use serde_json::Value;
use ulp::fused::DeviceFamily;
use ulp::metrics::{AllMetrics, all_metrics_shaped};
use ulp::reference::{self, Pair};
use ulp::{DType, PyVal};

fn family(dtype: &str) -> DeviceFamily {
    match dtype {
        "float16" => DeviceFamily::F16,
        "bfloat16" => DeviceFamily::BF16,
        "float32" => DeviceFamily::F32,
        _ => DeviceFamily::Other,
    }
}

const TOLERANT: [&str; 4] = ["eb", "rmse", "mean_rel_error", "mean_ulp_error"];

fn check(
    failures: &mut Vec<String>,
    id: &str,
    what: &str,
    key: &str,
    got: Option<&PyVal>,
    want: &Value,
) {
    if want.get("raises").is_some() {
        return;
    }
    let Some(got) = got else {
        failures.push(format!("{id} {what}.{key}: not computed"));
        return;
    };
    let tol = if TOLERANT.contains(&key) || what == "cosine" {
        1e-6
    } else {
        0.0
    };
    if let Err(e) = cell_matches(got, want, tol) {
        failures.push(format!("{id} {what}.{key}: {e}"));
    }
}

fn standard_cells(m: &AllMetrics, standard: &str, key: &str) -> Option<PyVal> {
    match (standard, key) {
        ("benchmark", k) => m.benchmark.as_ref().map(|b| match k {
            "small_value_err_ratio" => b.small_value_err_ratio.clone(),
            "max_rel_error" => b.max_rel_error.clone(),
            "mean_rel_error" => b.mean_rel_error.clone(),
            "rmse" => b.rmse.clone(),
            _ => b.eb.clone(),
        }),
        ("absolute_threshold", k) => m.absolute_threshold.as_ref().map(|a| match k {
            "inf_nan_error_ratio" => a.inf_nan_error_ratio.clone(),
            "rel_err_ratio" => a.rel_err_ratio.clone(),
            _ => a.abs_err_ratio.clone(),
        }),
        ("accumulative_error", k) => m.accumulative.as_ref().map(|a| match k {
            "inf_nan_error_ratio" => a.inf_nan_error_ratio.clone(),
            "rel_err_ratio" => a.rel_err_ratio.clone(),
            "abs_err_ratio" => a.abs_err_ratio.clone(),
            _ => a.eb.clone(),
        }),
        ("ulp", k) => m.ulp.as_ref().map(|u| match k {
            "max_ulp_error" => u.max_ulp_error.clone(),
            "mean_ulp_error" => u.mean_ulp_error.clone(),
            _ => u.ulp_error_proportion.clone(),
        }),
        ("thousandth", _) => Some(m.thousandth.value.clone()),
        ("binary_consistency", _) => m.binary_error_rate.clone(),
        _ => None,
    }
}

fn reference_cells(p: &Pair<'_>, standard: &str, key: &str) -> Option<PyVal> {
    match standard {
        "benchmark" => {
            let b = reference::benchmark(p);
            Some(match key {
                "small_value_err_ratio" => b.small_value_err_ratio,
                "max_rel_error" => b.max_rel_error,
                "mean_rel_error" => b.mean_rel_error,
                "rmse" => b.rmse,
                _ => b.eb,
            })
        }
        "absolute_threshold" => {
            let a = reference::absolute_threshold(p);
            Some(match key {
                "inf_nan_error_ratio" => a.inf_nan_error_ratio,
                "rel_err_ratio" => a.rel_err_ratio,
                _ => a.abs_err_ratio,
            })
        }
        "accumulative_error" => {
            let a = reference::accumulative(p);
            Some(match key {
                "inf_nan_error_ratio" => a.inf_nan_error_ratio,
                "rel_err_ratio" => a.rel_err_ratio,
                "abs_err_ratio" => a.abs_err_ratio,
                _ => a.eb,
            })
        }
        "ulp" => reference::ulp(p).map(|u| match key {
            "max_ulp_error" => u.max_ulp_error,
            "mean_ulp_error" => u.mean_ulp_error,
            _ => u.ulp_error_proportion,
        }),
        "thousandth" => Some(reference::rel_err_ratio(p, 0.001).0),
        _ => None,
    }
}

fn elementwise_matches(
    failures: &mut Vec<String>,
    id: &str,
    what: &str,
    got: &[f64],
    want: &Value,
    kind: &str,
) {
    let data = want["data"].as_array().unwrap();
    assert_eq!(want["dtype"].as_str().unwrap(), kind, "{id} {what} dtype");
    for (i, (g, w)) in got.iter().zip(data).enumerate() {
        let w = num(w);
        if !(g == &w || (g.is_nan() && w.is_nan())) {
            failures.push(format!("{id} {what}[{i}]: {g:e} vs {w:e}"));
        }
    }
}

#[test]
fn standards_and_primitives() {
    let v = vectors("run_ut_metrics.json");
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in v["cases"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        let (b, _) = array(&case["inputs"]["bench"]);
        let (d, shape) = array(&case["inputs"]["device"]);
        let fam = family(case["device_dtype"].as_str().unwrap());
        let zero_d = shape.is_empty();
        let m = all_metrics_shaped(b.elems(), d.elems(), fam, zero_d).unwrap();
        let (bv, dv) = (b.as_f64(), d.as_f64());
        let pair = Pair {
            bench: &bv,
            bench_dtype: b.elems().dtype(),
            device: &dv,
            device_dtype: d.elems().dtype(),
            family: fam,
        };
        if let Some(standards) = case.get("standards").and_then(Value::as_object) {
            for (standard, metrics) in standards {
                for (key, want) in metrics.as_object().unwrap() {
                    let got = standard_cells(&m, standard, key);
                    check(&mut failures, id, standard, key, got.as_ref(), want);
                    if !zero_d && !bv.is_empty() && standard != "binary_consistency" {
                        let r = reference_cells(&pair, standard, key);
                        check(
                            &mut failures,
                            id,
                            &format!("reference {standard}"),
                            key,
                            r.as_ref(),
                            want,
                        );
                    }
                    checked += 1;
                }
            }
        }
        let prim = &case["primitives"];
        if let Some(c) = prim.get("cosine_sim") {
            check(
                &mut failures,
                id,
                "cosine",
                "value",
                Some(&m.cosine.value),
                &c["value"],
            );
            if c["pass"].as_bool() != Some(m.cosine.pass)
                || c["message"].as_str() != Some(m.cosine.message)
            {
                failures.push(format!("{id} cosine pass/message: {:?}", m.cosine));
            }
        }
        if let Some(c) = prim.get("max_abs_err") {
            check(
                &mut failures,
                id,
                "max_abs_err",
                "value",
                m.max_abs_err.as_ref(),
                &c["value"],
            );
        }
        for (name, r, t) in [
            ("rel_err_ratio_hundredth", &m.hundredth, 0.01),
            ("rel_err_ratio_thousandth", &m.thousandth, 0.001),
            ("rel_err_ratio_ten_thousandth", &m.ten_thousandth, 0.0001),
        ] {
            if let Some(c) = prim.get(name) {
                check(
                    &mut failures,
                    id,
                    name,
                    "value",
                    Some(&r.value),
                    &c["value"],
                );
                if c["pass"].as_bool() != Some(r.pass) {
                    failures.push(format!("{id} {name} pass"));
                }
                if !zero_d {
                    let (rv, rp) = reference::rel_err_ratio(&pair, t);
                    check(
                        &mut failures,
                        id,
                        &format!("reference {name}"),
                        "value",
                        Some(&rv),
                        &c["value"],
                    );
                    assert_eq!(rp, r.pass, "{id} {name}");
                }
            }
        }
        let w_kind = if b.elems().dtype() == DType::F64 || d.elems().dtype() == DType::F64 {
            "float64"
        } else {
            "float32"
        };
        if let Some(e) = prim.get("abs_err_elementwise") {
            elementwise_matches(
                &mut failures,
                id,
                "abs_err",
                &reference::abs_err(&pair),
                e,
                w_kind,
            );
        }
        if let Some(e) = prim
            .get("rel_err_origin_elementwise")
            .filter(|_| !(zero_d && fam == DeviceFamily::BF16))
        {
            elementwise_matches(
                &mut failures,
                id,
                "rel_err_origin",
                &reference::rel_err_origin(&pair),
                e,
                w_kind,
            );
        }
        if let Some(e) = prim
            .get("ulp_err_elementwise")
            .filter(|e| e.get("raises").is_none())
        {
            let u_kind = if fam == DeviceFamily::F32 {
                "float64"
            } else {
                "float32"
            };
            elementwise_matches(
                &mut failures,
                id,
                "ulp_err",
                &reference::ulp_errors(&pair).unwrap(),
                e,
                u_kind,
            );
        }
    }
    assert!(checked > 1000, "only {checked} standard cells checked");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
