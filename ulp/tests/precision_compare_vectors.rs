//! api_precision_compare.json: ratios, verdict functions, roll-up and whole runs.

mod common;

use common::*;
use ulp::Routing;
use ulp::precision_compare::{
    Cell, api_checker_result, calc_ratio, compare_texts, record_verdict, run,
};
use ulp::routing::Standard;

#[test]
fn calc_ratio_cases() {
    let v = vectors("api_precision_compare.json");
    for c in v["calc_ratio"].as_array().unwrap() {
        let got = calc_ratio(num(&c["npu"]), num(&c["gpu"]), c["dtype"].as_str().unwrap());
        assert_eq!(got, num(&c["ratio"]["v"]), "{c}");
    }
}

#[test]
fn rollup_cases() {
    let v = vectors("api_precision_compare.json");
    for c in v["rollup"].as_array().unwrap() {
        let statuses: Vec<&str> = c["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(
            api_checker_result(&statuses),
            c["result"].as_str().unwrap(),
            "{c}"
        );
    }
}

#[test]
fn legacy_record_functions() {
    let v = vectors("api_precision_compare.json");
    for c in v["legacy_record_functions"].as_array().unwrap() {
        let standard = match c["kind"].as_str().unwrap() {
            "absolute_threshold" => Standard::AbsoluteThreshold,
            "thousandth" => Standard::Thousandth,
            "binary" => Standard::BinaryConsistency,
            "accumulative_error" => Standard::AccumulativeError,
            "ulp" => Standard::Ulp,
            other => panic!("kind {other}"),
        };
        let cells = |obj: &serde_json::Value| -> Vec<(String, Cell)> {
            obj.as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), Cell::Str(v.as_str().unwrap().to_string())))
                .collect()
        };
        let npu = cells(&c["npu_cells"]);
        let gpu = cells(&c["gpu_cells"]);
        let npu_ref: Vec<(&str, Cell)> = npu.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let gpu_ref: Vec<(&str, Cell)> = gpu.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let (status, mut row) = record_verdict(
            standard,
            &npu_ref,
            &gpu_ref,
            c["dtype"].as_str().unwrap(),
            "x",
        )
        .unwrap();
        assert_eq!(status, c["status"].as_str().unwrap(), "{c}");
        row[0] = ulp::PyVal::Str("Torch.x.0.forward.output.0".into());
        let want = c["details_row"].as_array().unwrap();
        for (i, (g, w)) in row.iter().zip(want).enumerate() {
            cell_matches(g, w, 0.0).unwrap_or_else(|e| panic!("{} cell {i}: {e}", c["kind"]));
        }
    }
}

#[test]
fn end_to_end_runs() {
    let v = vectors("api_precision_compare.json");
    for c in v["e2e"].as_array().unwrap() {
        let id = c["id"].as_str().unwrap();
        let out = compare_texts(
            c["npu_csv"].as_str().unwrap(),
            c["gpu_csv"].as_str().unwrap(),
            Routing::V26_2,
        )
        .unwrap();
        assert_eq!(
            out.result_csv,
            c["expected_result_csv"].as_str().unwrap(),
            "{id} result"
        );
        assert_eq!(
            out.details_csv,
            c["expected_details_csv"].as_str().unwrap(),
            "{id} details"
        );
        assert_eq!(
            out.aborted.is_some(),
            id.contains("duplicate"),
            "{id}: {:?}",
            out.aborted
        );
    }
}

#[test]
fn run_writes_bom_files_and_reads_bom_input() {
    let v = vectors("api_precision_compare.json");
    let c = &v["e2e"][0];
    let dir = tempfile::tempdir().unwrap();
    let npu = dir.path().join("npu.csv");
    let gpu = dir.path().join("gpu.csv");
    std::fs::write(&npu, format!("\u{feff}{}", c["npu_csv"].as_str().unwrap())).unwrap();
    std::fs::write(&gpu, c["gpu_csv"].as_str().unwrap()).unwrap();
    let out = run(&npu, &gpu, &dir.path().join("out"), "20240101000000").unwrap();
    assert!(
        out.result_csv
            .ends_with("api_precision_compare_result_20240101000000.csv")
    );
    let details = std::fs::read_to_string(&out.details_csv).unwrap();
    assert_eq!(
        details,
        format!("\u{feff}{}", c["expected_details_csv"].as_str().unwrap())
    );
    let result = std::fs::read_to_string(&out.result_csv).unwrap();
    assert_eq!(
        result,
        format!("\u{feff}{}", c["expected_result_csv"].as_str().unwrap())
    );
}

#[test]
fn missing_columns_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let npu = dir.path().join("npu.csv");
    std::fs::write(
        &npu,
        "API Name,DEVICE Dtype\nTorch.a.0.forward.output.0,torch.float16\n",
    )
    .unwrap();
    let err = run(&npu, &npu, dir.path(), "20240101000000").unwrap_err();
    assert!(err.to_string().contains("小值域错误占比"), "{err}");
    assert!(
        !dir.path()
            .join("api_precision_compare_result_20240101000000.csv")
            .exists()
    );
    // A timestamp that is not 14 digits never becomes part of a file name.
    let err = run(&npu, &npu, dir.path(), "../x").unwrap_err();
    assert!(err.to_string().contains("14 digits"), "{err}");
}
