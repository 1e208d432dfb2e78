//! Every case of run_ut_metrics.json and run_ut_special.json reproduced by the fused path.

mod common;

use common::*;
use ulp::{CheckOptions, DType, Output, check_output};

/// Columns (API Name first) of the cells that may differ by a relative 1e-6.
const TOLERANT_COLUMNS: [usize; 5] = [4, 10, 11, 14, 19];

fn csv_cells_match(got: &str, want: &str) -> Result<(), String> {
    let g = records(got);
    let w = records(want);
    if g.len() != 1 || w.len() != 1 || g[0].len() != w[0].len() {
        return Err(format!("{got:?} vs {want:?}"));
    }
    for (i, (a, b)) in g[0].iter().zip(&w[0]).enumerate() {
        if a == b {
            continue;
        }
        let close = TOLERANT_COLUMNS.contains(&i)
            && match (a.parse::<f64>(), b.parse::<f64>()) {
                (Ok(x), Ok(y)) => (x - y).abs() <= 1e-6 * y.abs().max(x.abs()),
                _ => false,
            };
        if !close {
            return Err(format!("column {i}: {a:?} vs {b:?}"));
        }
    }
    Ok(())
}

/// Cells that depend on BLAS or numpy's pairwise sums (clarifications: relative 1e-6).
const TOLERANT: [&str; 5] = ["cosine", "eb", "rmse", "mean_rel_error", "mean_ulp_error"];

#[test]
fn run_ut_metrics_detail_rows() {
    let v = vectors("run_ut_metrics.json");
    let keys: Vec<String> = v["detail_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    let mut failures = Vec::new();
    let mut exact_lines = 0;
    let cases = v["cases"].as_array().unwrap();
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let (b, bshape) = array(&case["inputs"]["bench"]);
        let (d, dshape) = array(&case["inputs"]["device"]);
        let ddtype = DType::from_numpy_name(case["device_dtype"].as_str().unwrap()).unwrap();
        let bench = Output::new(b.view(&bshape));
        let device = Output::with_dtype(d.view(&dshape), ddtype);
        let api = case["api_name"].as_str().unwrap();
        let row = check_output(api, bench, device, CheckOptions::default())
            .unwrap()
            .row;
        let detail = &case["run_ut"]["detail"];
        for (key, cell) in keys.iter().zip(row.cells()) {
            let tol = if TOLERANT.contains(&key.as_str()) {
                1e-6
            } else {
                0.0
            };
            if let Err(e) = cell_matches(&cell, &detail[key.as_str()], tol) {
                failures.push(format!("{id} {key}: {e}"));
            }
        }
        let line = row.csv_line(&format!("Torch.{api}.0.forward.output.0"));
        let want = case["run_ut"]["csv_line"].as_str().unwrap();
        if line == want {
            exact_lines += 1;
        } else if let Err(e) = csv_cells_match(&line, want) {
            failures.push(format!("{id} csv_line: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{exact_lines}/{} csv lines byte-identical", cases.len());
    // Only BLAS-order digits may differ; nearly every line is identical byte for byte.
    assert!(
        exact_lines * 10 >= cases.len() * 9,
        "only {exact_lines} byte-identical lines"
    );
}

fn special_row(api: &str, case: &serde_json::Value) -> ulp::DetailRow {
    let (b, bshape) = array(&case["bench"]);
    let (d, dshape) = array(&case["device"]);
    let bench = Output::new(b.view(&bshape));
    let device = Output::new(d.view(&dshape));
    check_output(api, bench, device, CheckOptions::default())
        .unwrap()
        .row
}

#[test]
fn binary_and_quantization_outputs() {
    let v = vectors("run_ut_special.json");
    let keys = ulp::check::DETAIL_KEYS;
    let mut n = 0;
    for (group, api_default) in [("binary", "eq"), ("quantization", "")] {
        for case in v[group].as_array().unwrap() {
            let api = case
                .get("api_name")
                .and_then(|a| a.as_str())
                .unwrap_or(api_default);
            let row = special_row(api, &case["inputs"]);
            let detail = &case["run_ut"]["detail"];
            for (key, cell) in keys.iter().zip(row.cells()) {
                cell_matches(&cell, &detail[*key], 0.0)
                    .unwrap_or_else(|e| panic!("{} {key}: {e}", case["id"]));
            }
            assert_eq!(row.status, case["run_ut"]["status"].as_str().unwrap());
            if let Some(line) = case["run_ut"].get("csv_line").and_then(|l| l.as_str()) {
                let name = line.split(',').next().unwrap();
                assert_eq!(row.csv_line(name), line, "{}", case["id"]);
            }
            n += 1;
        }
    }
    assert_eq!(n, 22);
}

#[test]
fn json_export_carries_detail_keys_types_and_line() {
    let v = vectors("run_ut_metrics.json");
    let case = &v["cases"][0];
    let (b, bshape) = array(&case["inputs"]["bench"]);
    let (d, dshape) = array(&case["inputs"]["device"]);
    let dtype = DType::from_numpy_name(case["device_dtype"].as_str().unwrap()).unwrap();
    let row = check_output(
        "add",
        Output::new(b.view(&bshape)),
        Output::with_dtype(d.view(&dshape), dtype),
        CheckOptions::default(),
    )
    .unwrap()
    .row;
    let j = row.to_json("Torch.add.0.forward.output.0");
    let detail = &case["run_ut"]["detail"];
    for key in ulp::check::DETAIL_KEYS {
        assert_eq!(j["types"][key], detail[key]["t"], "{key}");
    }
    assert_eq!(j["shape"], detail["shape"]["v"]);
    assert_eq!(j["status"], detail["status"]["v"]);
    assert_eq!(j["eb"].as_f64(), detail["eb"]["v"].as_f64());
    assert_eq!(j["csv_line"], case["run_ut"]["csv_line"]);
}

#[test]
fn multi_output_rollup() {
    let v = vectors("run_ut_special.json");
    for case in v["rollup"].as_array().unwrap() {
        let statuses: Vec<String> = case["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| special_row("add", pair).status)
            .collect();
        let want: Vec<&str> = case["per_output_status"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(statuses, want, "{}", case["id"]);
        assert_eq!(
            ulp::rollup_statuses(&statuses),
            case["final_status"].as_str().unwrap(),
            "{}",
            case["id"]
        );
    }
}

#[test]
fn fp8_ulp_elementwise() {
    let v = vectors("run_ut_special.json");
    for case in v["fp8_ulp"].as_array().unwrap() {
        let (b, _) = array(&case["inputs"]["bench"]);
        let (d, _) = array(&case["inputs"]["device"]);
        let got = ulp::fp8_ulp_errors(&b.as_f64(), &d.as_f64());
        let want = case["ulp_err_elementwise"]["data"].as_array().unwrap();
        for (g, w) in got.iter().zip(want) {
            let w = num(w);
            assert!(
                *g == w || (g.is_nan() && w.is_nan()),
                "{}: {g} vs {w}",
                case["id"]
            );
        }
    }
}

#[test]
fn standard_routing() {
    let v = vectors("standard_routing.json");
    for case in v["cases"].as_array().unwrap() {
        let got = ulp::standard_for(
            case["api_name"].as_str().unwrap(),
            case["out_dtype"].as_str().unwrap(),
            case["in_dtype"].as_str().unwrap(),
            ulp::Routing::V26_2,
        );
        assert_eq!(got.as_str(), case["standard"].as_str().unwrap(), "{case}");
    }
    // The older routing lets the lists decide for floating outputs too.
    assert_eq!(
        ulp::standard_for(
            "matmul",
            "torch.float16",
            "torch.float32",
            ulp::Routing::ListDriven
        ),
        ulp::Standard::Ulp
    );
    assert_eq!(
        ulp::standard_for(
            "conv2d",
            "torch.float32",
            "torch.float32",
            ulp::Routing::ListDriven
        ),
        ulp::Standard::Thousandth
    );
    assert_eq!(
        ulp::standard_for(
            "gelu",
            "torch.bfloat16",
            "torch.float32",
            ulp::Routing::ListDriven
        ),
        ulp::Standard::Benchmark
    );
    assert_eq!(
        ulp::standard_for(
            "matmul",
            "torch.float16",
            "torch.float32",
            ulp::Routing::V26_2
        ),
        ulp::Standard::Benchmark
    );
}

/// The fields of each record of a CSV text (line numbers dropped).
fn records(text: &str) -> Vec<Vec<String>> {
    ulp::precision_compare::parse_csv(text)
        .expect("well-formed CSV")
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}
