//! `--xlsx`: the result table as a workbook, read back with openpyxl (the engine pandas and
//! msprobe use) and checked against msprobe's own CSV of the same comparison.

use std::path::{Path, PathBuf};
use std::process::Command;

use compare::CompareOptions;
use compare::cell::Cell;
use compare::stats_diff::PandasCompat;
use testsupport::testdata;

/// Runs a Python snippet with `argv`; panics with its stderr when it fails.
fn py(script: &str, args: &[&Path]) -> String {
    let out = Command::new(testsupport::python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Compares every cell of an xlsx sheet, as openpyxl (pandas' engine) reads it, with the CSV
/// msprobe wrote: numbers within `rel`, booleans as Python prints them, empty cells for empty
/// fields, texts equal after msprobe's " inf" padding is stripped.
const SAME_TABLE: &str = r#"
import csv, math, sys
import openpyxl
wb = openpyxl.load_workbook(sys.argv[1], read_only=True)
assert wb.sheetnames == ["Sheet1"], wb.sheetnames
x = [list(r) for r in wb["Sheet1"].iter_rows(values_only=True)]
with open(sys.argv[2], encoding="utf-8-sig", newline="") as f:
    c = list(csv.reader(f))
rel = float(sys.argv[3])
assert x[0] == c[0], (x[0], c[0])
assert len(x) == len(c), (len(x), len(c))
def num(v):
    try:
        return float(v.strip())
    except ValueError:
        return None
bad = 0
for r in range(1, len(c)):
    assert len(x[r]) <= len(c[r])
    row = x[r] + [None] * (len(c[r]) - len(x[r]))
    for k, (a, b) in enumerate(zip(row, c[r])):
        if a is None:
            ok = b == ""
        elif isinstance(a, bool):
            ok = str(a) == b
        elif isinstance(a, (int, float)):
            fb = num(b)
            ok = fb is not None and (a == fb or abs(a - fb) <= rel * max(abs(a), abs(fb)))
        else:
            ok = a == b.strip() or (num(a) is not None and num(a) == num(b))
        if not ok:
            bad += 1
            print(f"row {r} {c[0][k]}: xlsx {a!r} csv {b!r}", file=sys.stderr)
assert bad == 0, f"{bad} cells differ"
print(len(c) - 1)
"#;

fn fixture(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let root = testdata().join("fixtures/msprobe-26.2.0-cpu");
    let dir = root.join(name);
    let cmd = std::fs::read_to_string(dir.join("command.txt")).unwrap();
    let args: Vec<&str> = cmd.split_whitespace().collect();
    let arg = |flag: &str| {
        let i = args.iter().position(|a| *a == flag).unwrap();
        root.join(args[i + 1])
    };
    let csv = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "csv"))
        .unwrap();
    (arg("-tp"), arg("-gp"), csv)
}

fn xlsx_matches_msprobe_csv(name: &str, rel: f64) {
    let (tp, gp, want_csv) = fixture(name);
    let out = tempfile::tempdir().unwrap();
    let opts = CompareOptions {
        target: tp,
        golden: gp,
        out_dir: out.path().to_path_buf(),
        timestamp: Some("20000101000000".into()),
        pandas: PandasCompat::V3,
        xlsx: true,
        ..Default::default()
    };
    let outcome = compare::run(&opts, &()).unwrap();
    assert_eq!(
        outcome.table_path.file_name().unwrap(),
        "compare_result_20000101000000.xlsx"
    );
    assert!(
        !out.path()
            .join("compare_result_20000101000000.csv")
            .exists()
    );
    let rows = py(
        SAME_TABLE,
        &[&outcome.table_path, &want_csv, Path::new(&rel.to_string())],
    );
    assert!(rows.trim().parse::<usize>().unwrap() > 10, "{rows}");
}

#[test]
fn statistics_table_as_xlsx() {
    xlsx_matches_msprobe_csv("compare-stat_L1_bf16_vs_f32", 0.0);
}

#[test]
fn tensor_table_as_xlsx() {
    xlsx_matches_msprobe_csv("compare-tensor_L1_bf16_vs_f32", 1e-12);
}

/// Past the row limit the table is cut into equal `part_{i}` sheets, as msprobe does.
#[test]
fn long_table_splits_into_parts() {
    let rows: Vec<Vec<Cell>> = (0..5)
        .map(|i| {
            vec![
                Cell::Str(format!("api.{i}")),
                Cell::Float(i as f64 / 3.0),
                match i {
                    0 => Cell::Float(f64::INFINITY),
                    1 => Cell::Float(f64::NAN),
                    2 => Cell::None,
                    3 => Cell::Bool(true),
                    _ => Cell::Int(-7),
                },
            ]
        })
        .collect();
    let table = compare::table::Table {
        mode: compare::model::Mode::Statistics,
        header: vec!["NPU Name".into(), "Max diff".into(), "Other".into()],
        rows,
        group: vec![String::new(); 5],
        call_index: (0..5).collect(),
        verdicts: Vec::new(),
        metric_messages: Vec::new(),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.xlsx");
    compare::xlsx::write_xlsx_sliced(&table, &path, 2).unwrap();
    let got = py(
        r#"
import sys, openpyxl
wb = openpyxl.load_workbook(sys.argv[1], read_only=True)
for name in wb.sheetnames:
    rows = [list(r) for r in wb[name].iter_rows(values_only=True)]
    print(name, rows[0], rows[1:])
"#,
        &[&path],
    );
    let want = "\
part_0 ['NPU Name', 'Max diff', 'Other'] [['api.0', 0, 'inf'], ['api.1', 0.3333333333333333, None]]
part_1 ['NPU Name', 'Max diff', 'Other'] [['api.2', 0.6666666666666666, None], ['api.3', 1, True]]
part_2 ['NPU Name', 'Max diff', 'Other'] [['api.4', 1.3333333333333333, -7]]
";
    assert_eq!(got, want);
}
