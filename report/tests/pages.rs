//! Pages of kernel-dump and whole-run compares, generated from the shipped kernel dumps
//! (testdata/kernel-dumps) and a synthesised four-rank run: the kernel tree follows the
//! kernels' scopes, execution order and first divergence come from compare::kernel, each run
//! pair gets its page beside its table and the run's index lists them under the origin.

mod common;

use common::runs::{WORLD, compare_runs, kernel_compare, page_data, run_compare};
use serde_json::Value;

fn labels(items: &Value) -> Vec<(String, u64)> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|it| (it[0].as_str().unwrap().to_string(), it[2].as_u64().unwrap()))
        .collect()
}

/// The path of labels from the root to item `i` (items are in pre-order with depths).
fn path_to(items: &[(String, u64)], i: usize) -> Vec<String> {
    let mut path = vec![items[i].0.clone()];
    let mut depth = items[i].1;
    for j in (0..i).rev() {
        if items[j].1 + 1 == depth {
            path.push(items[j].0.clone());
            depth -= 1;
        }
    }
    path.reverse();
    path
}

#[test]
fn kernel_report_groups_kernels_by_scope_in_execution_order() {
    let out = tempfile::tempdir().unwrap();
    let (outcome, written) = kernel_compare("net_f32_noisy", "net_f32", Some(vec![0]), out.path());
    assert_eq!(outcome.tables.len(), 1);
    assert_eq!(written.html, out.path().join("report.html"));
    let d = page_data(&written.html);
    assert_eq!(d["tree"], "scope");
    let items = labels(&d["items"]);
    let calls = d["calls"].as_array().unwrap();

    // The forward MatMul sits under its scope, as MindSpore's execution order names it.
    let key = "Default/network-WithLossCell/_backbone-Net/fc-Dense/MatMul-op0";
    let c = calls
        .iter()
        .position(|c| c[0] == key)
        .expect("the MatMul kernel");
    let item = calls[c][9].as_u64().unwrap() as usize;
    assert_eq!(
        path_to(&items, item),
        key.split('/').collect::<Vec<_>>(),
        "{items:?}"
    );
    // `_loss_fn-MSELoss` keeps its own underscore: scopes come from the execution order, not
    // from the file name's `_`.
    assert!(
        calls
            .iter()
            .any(|c| c[0] == "Default/network-WithLossCell/_loss_fn-MSELoss/Sub-op0")
    );
    // Gradient kernels are backward (shaded on the plot), the rest forward.
    for c in calls {
        let backward = c[0].as_str().unwrap().starts_with("Gradients/");
        assert_eq!(c[1].as_u64().unwrap() == 1, backward, "{c}");
    }

    // Execution order: the target's first timestamps ascend along the calls.
    let (table, _) = &outcome.tables[0];
    let mut first_ts = std::collections::HashMap::new();
    for r in &table.rows {
        if let Some(s) = &r.npu {
            let e = first_ts
                .entry((s.name.op_name.clone(), r.occurrence))
                .or_insert(u64::MAX);
            *e = (*e).min(s.name.timestamp);
        }
    }
    let scope_of = |op: &str| {
        calls
            .iter()
            .map(|c| c[0].as_str().unwrap())
            .find(|k| k.replace('/', "_") == op)
            .map(str::to_string)
    };
    let mut by_ts: Vec<(u64, String)> = first_ts
        .iter()
        .filter(|((_, occ), _)| *occ == 0)
        .filter_map(|((op, _), ts)| scope_of(op).map(|k| (*ts, k)))
        .collect();
    by_ts.sort();
    let order: Vec<&str> = calls.iter().map(|c| c[0].as_str().unwrap()).collect();
    let positions: Vec<usize> = by_ts
        .iter()
        .map(|(_, k)| order.iter().position(|o| o == k).unwrap())
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "{by_ts:?} vs {order:?}"
    );

    // The first divergence is compare::kernel's.
    let first = table
        .first_divergence(0.0)
        .expect("the noisy input diverges");
    let p = d["div"]["producer"].as_u64().expect("a producer") as usize;
    // (A graph input sits under `Parameters`.)
    assert!(
        calls[p][0]
            .as_str()
            .unwrap()
            .replace('/', "_")
            .ends_with(&first.op_name),
        "{first}"
    );
    assert!(!d["div"]["figures"].as_array().unwrap().is_empty());
    // Other differing kernels either carry the difference or start one anew.
    let later: Vec<u64> = d["div"]["propagators"]
        .as_array()
        .unwrap()
        .iter()
        .chain(d["div"]["others"].as_array().unwrap())
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(later.iter().all(|&c| c as usize != p), "{later:?}");
    assert!(!later.is_empty());
    // Each row of the table is on the page once.
    assert_eq!(d["rows"].as_array().unwrap().len(), table.rows.len());
}

#[test]
fn kernel_report_of_a_float16_run_marks_the_drift() {
    let out = tempfile::tempdir().unwrap();
    let (outcome, written) = kernel_compare("net_f16", "net_f32", Some(vec![0]), out.path());
    let d = page_data(&written.html);
    let (table, _) = &outcome.tables[0];
    let first = table.first_divergence(0.0).unwrap();
    let p = d["div"]["producer"].as_u64().unwrap() as usize;
    let calls = d["calls"].as_array().unwrap();
    assert!(
        calls[p][0]
            .as_str()
            .unwrap()
            .replace('/', "_")
            .ends_with(&first.op_name),
        "{first}"
    );
    // Every kernel is placed under a scope of the execution order (or is a parameter).
    for c in calls {
        let k = c[0].as_str().unwrap();
        assert!(
            k.starts_with("Default/")
                || k.starts_with("Gradients/")
                || k.starts_with("Parameters/"),
            "{k}"
        );
    }
    // Kernels only one run has (the float16 casts) are unmatched; values that differ but
    // that msprobe does not judge (different dtypes) are warnings, not passes.
    let verdicts: Vec<i64> = calls.iter().filter_map(|c| c[2].as_i64()).collect();
    assert!(verdicts.contains(&-1), "{verdicts:?}");
    assert!(verdicts.contains(&1), "{verdicts:?}");
    // The plot has a value difference for the compared kernels.
    assert!(calls.iter().any(|c| c[6].as_f64().is_some_and(|v| v > 0.0)));
}

#[test]
fn kernel_compare_with_several_tables_gets_an_index() {
    let out = tempfile::tempdir().unwrap();
    let (outcome, written) = kernel_compare("net_f16", "net_f32", None, out.path());
    assert!(outcome.tables.len() >= 2, "{}", outcome.tables.len());
    let index = std::fs::read_to_string(&written.html).unwrap();
    for (rank, step, path) in &written.tables {
        assert_eq!(
            path,
            &out.path()
                .join(format!("report_rank{rank}_step{step}.html"))
        );
        let d = page_data(path);
        assert!(
            !d["div"]["producer"].is_null(),
            "float16 drifts in every step"
        );
        assert_eq!(d["up"][1], "report.html");
        assert!(index.contains(&format!("href=\"report_rank{rank}_step{step}.html\"")));
    }
}

#[test]
fn whole_run_writes_a_page_per_pair_and_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let (outcome, written, index) = run_compare(dir.path());
    let out = dir.path().join("out");
    assert_eq!(index, out.join("report.html"));
    assert_eq!(written.len(), 2 * WORLD as usize);
    for s in 0..2 {
        for r in 0..WORLD {
            let page = out.join(format!("step{s}/report_rank{r}.html"));
            assert!(written.contains(&(Some(s), r, page.clone())), "{written:?}");
            // Beside its table.
            assert!(
                out.join(format!("step{s}/compare_result_rank{r}_20260101000000.csv"))
                    .is_file()
            );
            let d = page_data(&page);
            assert_eq!(d["up"][1], "../report.html");
            let producer = &d["div"]["producer"];
            if s == 1 {
                let p = producer.as_u64().expect("step 1 diverges on every rank") as usize;
                let expect = if r == 1 {
                    "Torch.matmul.0.forward"
                } else {
                    "Distributed.all_reduce.0.forward"
                };
                assert_eq!(d["calls"][p][0], expect, "rank {r}");
            } else {
                assert!(producer.is_null(), "step 0 agrees");
            }
        }
    }
    let html = std::fs::read_to_string(&index).unwrap();
    let origin = compare::run_tree_json::origin_line(&outcome.steps);
    assert_eq!(origin, "Origin: rank 1, API Torch.matmul.0.forward");
    assert!(html.contains(&origin), "{html}");
    // One line per pair, each linking its page and table; the origin's line is marked.
    assert_eq!(html.matches("<tr class=").count(), 2 * WORLD as usize);
    for s in 0..2 {
        for r in 0..WORLD {
            assert!(html.contains(&format!("href=\"step{s}/report_rank{r}.html\"")));
            assert!(html.contains(&format!(
                "href=\"step{s}/compare_result_rank{r}_20260101000000.csv\""
            )));
        }
    }
    assert_eq!(html.matches(" org\">").count(), 1, "{html}");
    assert!(html.contains("<b>origin</b>: Torch.matmul.0.forward"));
    assert!(html.contains("Distributed.all_reduce.0.forward: received"));
}

#[test]
fn resumed_run_writes_again_a_page_that_is_missing_and_only_that_pair() {
    let dir = tempfile::tempdir().unwrap();
    run_compare(dir.path());
    let out = dir.path().join("out");
    let lost = out.join("step1/report_rank2.html");
    std::fs::remove_file(&lost).unwrap();
    let (outcome, written, _) = compare_runs(dir.path(), true);
    assert!(outcome.pairs.iter().all(|p| p.result.is_ok()));
    // The pair whose page was lost is compared again and its page written; the others are
    // taken from their records.
    assert_eq!(written, vec![(Some(1), 2, lost.clone())], "{written:?}");
    assert_eq!(page_data(&lost)["up"][1], "../report.html");
    // A second resume has nothing left to do.
    let (_, again, _) = compare_runs(dir.path(), true);
    assert!(again.is_empty(), "{again:?}");
}
