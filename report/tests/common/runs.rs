//! Pages of kernel-dump and whole-run compares, made from the shipped kernel dumps and a
//! synthesised four-rank run (the run compare::run_tree's tests use: a matmul, an all_reduce
//! over every rank, a relu).

use std::path::{Path, PathBuf};

use serde_json::Value;
pub use testsupport::runs::{rank_dump, write_run};

/// The data block of a report page.
pub fn page_data(html: &Path) -> Value {
    let text = std::fs::read_to_string(html).unwrap();
    let start = text
        .find(r#"<script id="data" type="application/json">"#)
        .expect("a data block")
        + r#"<script id="data" type="application/json">"#.len();
    let end = start + text[start..].find("</script>").unwrap();
    serde_json::from_str(&text[start..end]).unwrap()
}

pub fn kernel_dumps() -> PathBuf {
    testsupport::testdata().join("kernel-dumps")
}

/// Compares two shipped kernel dumps (the given steps, else all) into `out` and writes their
/// pages.
pub fn kernel_compare(
    target: &str,
    golden: &str,
    steps: Option<Vec<u64>>,
    out: &Path,
) -> (
    compare::kernel::KernelCompareOutcome,
    report::kernel::KernelWritten,
) {
    let (t, g) = (kernel_dumps().join(target), kernel_dumps().join(golden));
    let outcome = compare::kernel::run_kernel_compare(
        &t,
        &g,
        out,
        &compare::kernel::KernelCompareOptions { ranks: None, steps },
        Some("20260101000000"),
        0.0,
    )
    .unwrap();
    let written = report::kernel::write_beside(&outcome, &t, &g, out, 0.0).unwrap();
    (outcome, written)
}

pub const WORLD: u64 = 4;

/// A pair's page: step, rank, path.
pub type Written = (Option<u64>, u64, PathBuf);

/// Steps 0 and 1 of four ranks; in step 1 rank 1's matmul differs and reaches the other ranks
/// through the all_reduce. Compared into `dir/out` with the reports; returns the outcome, the
/// pages written and the index.
pub fn run_compare(dir: &Path) -> (compare::run_tree::RunOutcome, Vec<Written>, PathBuf) {
    let (tp, gp) = (dir.join("t"), dir.join("g"));
    write_run(&gp, &[0, 1], WORLD, |_, r| {
        rank_dump(WORLD, r, false, false)
    });
    write_run(&tp, &[0, 1], WORLD, |s, r| {
        rank_dump(WORLD, r, s == 1 && r == 1, s == 1)
    });
    compare_runs(dir, false)
}

/// Compares the runs `run_compare` wrote in `dir` again, `--resume` or not.
pub fn compare_runs(
    dir: &Path,
    resume: bool,
) -> (compare::run_tree::RunOutcome, Vec<Written>, PathBuf) {
    let (tp, gp, out) = (dir.join("t"), dir.join("g"), dir.join("out"));
    let t = compare::run_tree::discover(&tp).unwrap().unwrap();
    let g = compare::run_tree::discover(&gp).unwrap().unwrap();
    let opts = compare::run_tree::RunOptions {
        pair: compare::CompareOptions {
            timestamp: Some("20260101000000".into()),
            resume,
            ..Default::default()
        },
        target: tp.clone(),
        golden: gp.clone(),
        out_dir: out.clone(),
        workers: 2,
        ..Default::default()
    };
    let reports = report::run::RunReports::default();
    let outcome = compare::run_tree::run_tree_with(&opts, &t, &g, &(), Some(&reports)).unwrap();
    assert!(reports.errors().is_empty(), "{:?}", reports.errors());
    let index = report::run::write_index(&outcome, &tp, &gp, &out).unwrap();
    (outcome, reports.written(), index)
}
