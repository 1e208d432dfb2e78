//! Real msprobe 26.2.0 compare outputs (testdata/fixtures/msprobe-26.2.0-cpu/compare-*): the
//! same dump pairs through `compare::run` must give msprobe's table.

mod common;

use std::path::PathBuf;

use common::*;
use compare::CompareOptions;
use compare::stats_diff::PandasCompat;
use testsupport::testdata;

fn fixture_pair(name: &str) -> Option<(PathBuf, PathBuf, PathBuf, Vec<String>)> {
    let root = testdata().join("fixtures/msprobe-26.2.0-cpu");
    let dir = root.join(name);
    let cmd = std::fs::read_to_string(dir.join("command.txt")).ok()?;
    let args: Vec<String> = cmd.split_whitespace().map(String::from).collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| root.join(&args[i + 1]))
    };
    let csv = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "csv")
                && p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("compare_result_")
        })?;
    Some((arg("-tp")?, arg("-gp")?, csv, args))
}

/// msprobe's built-in MindSpore -> PyTorch API table, from the msprobe install of the peer venv
/// (numprobe does not ship msprobe's table).
fn msprobe_api_table() -> PathBuf {
    let python = testsupport::python();
    let out = std::process::Command::new(&python)
        .args([
            "-c",
            "import os, msprobe; print(os.path.dirname(msprobe.__file__))",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    assert!(
        out.status.success(),
        "msprobe is not importable with {}",
        python.display()
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
        .join("core/compare/ms_to_pt_api.yaml")
}

fn check(name: &str) {
    let (tp, gp, want_csv, args) =
        fixture_pair(name).unwrap_or_else(|| panic!("fixture {name} missing"));
    let out = tempfile::tempdir().unwrap();
    let opts = CompareOptions {
        target: tp,
        golden: gp,
        out_dir: out.path().to_path_buf(),
        fuzzy_match: args.iter().any(|a| a == "-fm"),
        cell_mapping: args.iter().any(|a| a == "-cm").then_some(None),
        api_mapping: args.iter().any(|a| a == "-am").then(msprobe_api_table),
        timestamp: Some("20000101000000".into()),
        // The PyTorch compares ran in a venv with pandas 3.1.1 (MANIFEST.md), the ones with a
        // MindSpore target in the MindSpore venv with pandas 2.3.3: their statistics diffs
        // differ in the last digits.
        pandas: if name.contains("ms_") {
            PandasCompat::V2
        } else {
            PandasCompat::V3
        },
        ..Default::default()
    };
    let outcome = compare::run(&opts, &()).unwrap();
    assert_eq!(
        outcome.table_path.file_name().unwrap(),
        "compare_result_20000101000000.csv"
    );
    let got = std::fs::read_to_string(&outcome.table_path).unwrap();
    let want = std::fs::read_to_string(&want_csv).unwrap();
    // Statistics and md5 tables are exact; tensor tables allow BLAS-order differences.
    let tol = if outcome.mode == compare::model::Mode::Tensor {
        1e-12
    } else {
        0.0
    };
    assert_csv_eq(&got, &want, tol, 0.0, name);
    assert_column_exact(&got, &want, "EucDist", name);
    assert!(outcome.summary_text.contains("## First divergence"));
}

/// `column` holds the same text in every row of both tables (EucDist is reproduced to the
/// last digit; Cosine is rounded to 12 places and stays within the tolerance).
fn assert_column_exact(got: &str, want: &str, column: &str, ctx: &str) {
    let (g, w) = (parse_csv(got), parse_csv(want));
    let Some(c) = w[0].iter().position(|h| h == column) else {
        return;
    };
    let mut seen = 0;
    for (gr, wr) in g.iter().zip(&w).skip(1) {
        assert_eq!(gr[c], wr[c], "{ctx}: {} {column}", wr[0]);
        seen += wr[c].parse::<f64>().is_ok() as usize;
    }
    assert!(seen > 0, "{ctx}: no numeric {column} cell");
}

#[test]
fn stat_l1_bf16_vs_f32() {
    check("compare-stat_L1_bf16_vs_f32");
}

#[test]
fn stat_mix_bf16_vs_f32() {
    check("compare-stat_mix_bf16_vs_f32");
}

#[test]
fn md5_l1_rerun_vs_f32() {
    check("compare-md5_L1_rerun_vs_f32");
}

#[test]
fn ms_stat_l1_f16_vs_f32() {
    check("compare-ms_stat_L1_f16_vs_f32");
}

#[test]
fn tensor_l1_bf16_vs_f32() {
    check("compare-tensor_L1_bf16_vs_f32");
}

#[test]
fn xfw_stat_l1_ms_vs_pt_api_mapping() {
    check("compare-xfw_stat_L1_ms_vs_pt_am");
}

#[test]
fn xfw_stat_mix_ms_vs_pt_cell_mapping() {
    check("compare-xfw_stat_mix_ms_vs_pt_cm");
}

#[test]
fn xfw_tensor_l1_ms_vs_pt_api_mapping() {
    check("compare-xfw_tensor_L1_ms_vs_pt_am");
}

#[test]
fn dump_roots_steps_and_ranks() {
    use compare::run::locate_dump_json;
    let root = testdata().join("fixtures/msprobe-26.2.0-cpu");
    let dump = root.join("pt_tiny_f32_stat_L1/dump");
    let err = locate_dump_json(&dump, None, None).unwrap_err().to_string();
    assert!(err.contains("step0") && err.contains("--step"), "{err}");
    let f = locate_dump_json(&dump, Some(1), None).unwrap();
    assert!(f.ends_with("step1/proc23511/dump.json"), "{}", f.display());
    let f = locate_dump_json(&dump.join("step0"), None, None).unwrap();
    assert!(f.ends_with("step0/proc23511/dump.json"), "{}", f.display());
    let r = root.join("pt_tiny_f32_stat_L1_rank0/dump");
    let f = locate_dump_json(&r, Some(0), Some(0)).unwrap();
    assert!(f.ends_with("step0/rank0/dump.json"), "{}", f.display());
    assert!(locate_dump_json(&r, Some(0), Some(3)).is_err());
    assert!(locate_dump_json(&root.join("no_such_dir"), None, None).is_err());
}

/// The sample pair shipped in the repo (the README's first command) gives msprobe's table and
/// names the first divergence.
#[test]
fn shipped_sample_pair() {
    let samples = testsupport::repo_root().join("samples/tiny-bf16-vs-f32");
    let out = tempfile::tempdir().unwrap();
    let opts = CompareOptions {
        target: samples.join("target"),
        golden: samples.join("golden"),
        out_dir: out.path().to_path_buf(),
        timestamp: Some("20000101000000".into()),
        pandas: PandasCompat::V3,
        ..Default::default()
    };
    let outcome = compare::run(&opts, &()).unwrap();
    assert_eq!(outcome.mode, compare::model::Mode::Tensor);
    let got = std::fs::read_to_string(&outcome.table_path).unwrap();
    let (_, _, want_csv, _) = fixture_pair("compare-tensor_L1_bf16_vs_f32").unwrap();
    assert_csv_eq(
        &got,
        &std::fs::read_to_string(want_csv).unwrap(),
        1e-12,
        0.0,
        "sample",
    );
    let summary = std::fs::read_to_string(&outcome.summary_path).unwrap();
    assert_eq!(summary, outcome.summary_text);
    assert!(
        summary.contains("`Functional.softmax.1.backward`"),
        "{summary}"
    );
    assert!(summary.contains("| error | 312 | 108 |"), "{summary}");
}

/// Under pandas 2 (the pinned peer) msprobe writes `None` in the Dtype and Tensor Shape cells of
/// a `None` argument or output (`Torch.clamp.0.forward.input.min`, a `None` gradient,
/// `__setitem__`'s `None` output); the whole table is byte for byte msprobe's.
#[test]
fn none_cells_under_pandas_2() {
    let dump =
        testdata().join("fixtures/msprobe-26.2.0-torch-h200/l1_statistics/dump_path/step0/proc503");
    let out = tempfile::tempdir().unwrap();
    let opts = CompareOptions {
        target: dump.clone(),
        golden: dump,
        out_dir: out.path().to_path_buf(),
        timestamp: Some("20000101000000".into()),
        pandas: PandasCompat::V2,
        ..Default::default()
    };
    let outcome = compare::run(&opts, &()).unwrap();
    let got = std::fs::read_to_string(&outcome.table_path).unwrap();
    let want =
        std::fs::read_to_string(testdata().join("msprobe-compare-pandas2/l1_statistics_self.csv"))
            .unwrap();
    let none_rows = want
        .lines()
        .filter(|l| l.contains(",None,None,None,None,N/A,N/A,"))
        .count();
    assert_eq!(none_rows, 3, "the reference has the three None leaves");
    assert_eq!(got, want);
}
