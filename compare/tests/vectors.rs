//! msprobe-computed reference vectors (testdata/vectors/accuracy): tensor metrics, statistics
//! diffs, judgement rules and whole compare runs.

mod common;

use std::collections::HashMap;

use common::*;
use compare::cell::Cell;
use compare::judge::{Columns, group_level, judge_group};
use compare::matching::MatchOptions;
use compare::model::Mode;
use compare::run::compare_dumps;
use compare::stats_diff::PandasCompat;
use compare::stats_diff::stat_diff;
use compare::table::TableOptions;
use compare::table::to_csv;
use compare::tensor::compare_tensors;
use dumpfmt::TensorView;
use serde_json::Value as J;

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= rel * b.abs()
}

#[test]
fn offline_compare_tensor() {
    let v = vectors("offline_compare_tensor.json");
    let columns: Vec<&str> = v["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let mut checked = 0;
    for case in v["cases"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        let (nd, ns, nb) = array(&case["inputs"]["npu"]);
        let (bd, bs, bb) = array(&case["inputs"]["bench"]);
        let got = compare_tensors(
            &TensorView::new(nd, &ns, &nb).unwrap(),
            &TensorView::new(bd, &bs, &bb).unwrap(),
        );
        let p = &case["pipeline"];
        for (i, col) in columns.iter().enumerate() {
            let want = typed(&p["results"][*col]);
            let ok = match (&got.values[i], &want) {
                // Cosine and EucDist come from BLAS dot products.
                (Cell::Float(a), Cell::Float(b)) if i <= 1 => close(*a, *b, 1e-12),
                (a, b) => a == b,
            };
            assert!(ok, "{id} {col}: got {:?}, want {want:?}", got.values[i]);
        }
        assert_eq!(got.err_msg, p["err_msg"].as_str().unwrap(), "{id} err_msg");
        assert_eq!(
            got.error_flag,
            p["error_flag"].as_bool().unwrap(),
            "{id} error_flag"
        );
        checked += 1;
    }
    assert_eq!(checked, 85);
}

#[test]
fn offline_compare_stats() {
    let v = vectors("offline_compare_stats.json");
    let mut n = 0;
    for group in ["object_columns", "float64_columns"] {
        for case in v[group].as_array().unwrap() {
            let (a, b) = (typed(&case["npu"]), typed(&case["bench"]));
            let (d, r) = stat_diff(&a, &b, &a.py_str(), &b.py_str(), false, PandasCompat::V2);
            for (got, want) in [(&d, &case["diff"]), (&r, &case["rel"])] {
                let want = want["v"].as_str().unwrap();
                let ok = got == want
                    || match (
                        got.trim_end_matches('%').parse::<f64>(),
                        want.trim_end_matches('%').parse::<f64>(),
                    ) {
                        (Ok(x), Ok(y)) => {
                            got.ends_with('%') == want.ends_with('%') && close(x, y, 1e-15)
                        }
                        _ => false,
                    };
                assert!(ok, "{group} {a:?} vs {b:?}: got {got:?}, want {want:?}");
            }
            n += 1;
        }
    }
    assert_eq!(n, 68);
}

#[test]
fn compare_result_rules() {
    let v = vectors("compare_result_rules.json");
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 32);
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let mode = match case["mode"].as_str().unwrap() {
            "summary" => Mode::Statistics,
            "all" => Mode::Tensor,
            "md5" => Mode::Md5,
            m => panic!("{m}"),
        };
        let header: Vec<String> = case["header"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_string())
            .collect();
        let rows: Vec<Vec<Cell>> = case["rows_in"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(typed).collect())
            .collect();
        let refs: Vec<&[Cell]> = rows.iter().map(|r| r.as_slice()).collect();
        let verdicts = judge_group(mode, &Columns::new(&header), &refs);
        for (i, (got, want)) in verdicts
            .iter()
            .zip(case["rows_out"].as_array().unwrap())
            .enumerate()
        {
            assert_eq!(
                got.level.as_str(),
                want["Result"]["v"].as_str().unwrap(),
                "{id} row {i} Result"
            );
            assert_eq!(
                got.err_message(),
                want["Err_message"]["v"].as_str().unwrap(),
                "{id} row {i} Err_message"
            );
        }
        assert_eq!(
            group_level(&verdicts).as_str(),
            case["final"].as_str().unwrap(),
            "{id} final"
        );
    }
}

fn parse(text: &str) -> dumpfmt::json::Value {
    dumpfmt::json::parse(text.as_bytes(), std::path::Path::new("vector")).unwrap()
}

fn run_e2e(file: &str, expect: usize) {
    let v = vectors(file);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), expect);
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let npu = parse(case["npu_dump_json"].as_str().unwrap());
        let bench = parse(case["bench_dump_json"].as_str().unwrap());
        let stack = case.get("npu_stack_json").and_then(J::as_str).map(parse);
        let opts = &case["options"];
        let mopts = MatchOptions {
            fuzzy: opts
                .get("fuzzy_match")
                .and_then(J::as_bool)
                .unwrap_or(false),
            data_mapping: opts.get("data_mapping").and_then(J::as_object).map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect()
            }),
            ..Default::default()
        };
        let mut tensors = HashMap::new();
        if let Some(t) = case.get("tensors") {
            for (side, npu_side) in [("npu", true), ("bench", false)] {
                for (name, a) in t[side].as_object().unwrap() {
                    tensors.insert((npu_side, name.clone()), array(a));
                }
            }
        }
        let src = MapSource(tensors);
        let cmp = compare_dumps(
            &npu,
            &bench,
            stack.as_ref(),
            &mopts,
            &TableOptions {
                source: Some(&src),
                ..Default::default()
            },
            &(),
        )
        .unwrap();
        let csv = to_csv(&cmp.table);
        // Statistics cells are exact (pandas' parser is reproduced); tensor cells carry
        // BLAS-order differences in Cosine/EucDist.
        let tol = if cmp.mode == Mode::Tensor { 1e-12 } else { 0.0 };
        assert_csv_eq(&csv, case["result_csv"].as_str().unwrap(), tol, 0.0, id);
    }
}

#[test]
fn compare_e2e_statistics() {
    run_e2e("compare_e2e_statistics.json", 9);
}

#[test]
fn compare_e2e_tensor() {
    run_e2e("compare_e2e_tensor.json", 2);
}
