//! Pages of kernel-dump and whole-run compares, made from the shipped kernel dumps and a
//! synthesised four-rank run (the run compare::run_tree's tests use: a matmul, an all_reduce
//! over every rank, a relu).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

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

fn tensor(max: f64, min: f64, mean: f64, norm: f64) -> Value {
    json!({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4],
           "Max": max, "Min": min, "Mean": mean, "Norm": norm, "requires_grad": false})
}

/// One rank's dump.json: `bump_matmul` changes this rank's matmul output (produced here),
/// `bump_reduced` the all_reduce output and the relu after it (received).
pub fn rank_dump(world: u64, rank: u64, bump_matmul: bool, bump_reduced: bool) -> Value {
    let r = rank as f64;
    let x = tensor(1.0 + r, -1.0, 0.5, 2.0 + r);
    let mm = if bump_matmul {
        tensor(3.5 + r, -2.0, 1.25, 5.5 + r)
    } else {
        tensor(3.0 + r, -2.0, 1.0, 5.0 + r)
    };
    let red = if bump_reduced {
        tensor(12.5, -8.0, 4.25, 20.5)
    } else {
        tensor(12.0, -8.0, 4.0, 20.0)
    };
    let relu = if bump_reduced {
        tensor(12.5, 0.0, 6.25, 20.5)
    } else {
        tensor(12.0, 0.0, 6.0, 20.0)
    };
    let ranks: Vec<u64> = (0..world).collect();
    let group = json!({"type": "torch.ProcessGroup", "group_ranks": ranks, "group_id": "ab12cd34"});
    let op = json!({"type": "torch.distributed.ReduceOp", "value": "RedOpType.SUM"});
    json!({
        "task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": null,
        "data": {
            "Torch.matmul.0.forward": {"input_args": [x, tensor(1.0, -1.0, 0.0, 2.0)],
                                       "input_kwargs": {}, "output": [mm]},
            "Distributed.all_reduce.0.forward": {"input_args": [mm],
                                                  "input_kwargs": {"op": op, "group": group},
                                                  "output": [red, op, group]},
            "Torch.relu.0.forward": {"input_args": [red], "input_kwargs": {}, "output": [relu]},
        }
    })
}

/// Writes `root/step{s}/rank{r}/dump.json` for each step and rank.
pub fn write_run(root: &Path, steps: &[u64], world: u64, dump: impl Fn(u64, u64) -> Value) {
    for &s in steps {
        for r in 0..world {
            let dir = root.join(format!("step{s}/rank{r}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("dump.json"),
                serde_json::to_string_pretty(&dump(s, r)).unwrap(),
            )
            .unwrap();
        }
    }
}

pub const WORLD: u64 = 4;

/// A pair's page: step, rank, path.
pub type Written = (Option<u64>, u64, PathBuf);

/// Steps 0 and 1 of four ranks; in step 1 rank 1's matmul differs and reaches the other ranks
/// through the all_reduce. Compared into `dir/out` with the reports; returns the outcome, the
/// pages written and the index.
pub fn run_compare(dir: &Path) -> (compare::run_tree::RunOutcome, Vec<Written>, PathBuf) {
    let (tp, gp, out) = (dir.join("t"), dir.join("g"), dir.join("out"));
    write_run(&gp, &[0, 1], WORLD, |_, r| {
        rank_dump(WORLD, r, false, false)
    });
    write_run(&tp, &[0, 1], WORLD, |s, r| {
        rank_dump(WORLD, r, s == 1 && r == 1, s == 1)
    });
    let t = compare::run_tree::discover(&tp).unwrap().unwrap();
    let g = compare::run_tree::discover(&gp).unwrap().unwrap();
    let opts = compare::run_tree::RunOptions {
        pair: compare::CompareOptions {
            timestamp: Some("20260101000000".into()),
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
