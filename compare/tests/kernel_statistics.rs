//! Statistics-mode kernel compares (both dumps hold `statistic.csv`, no tensor file) against
//! msprobe 26.2's graph-mode comparator on the same pairs: testdata/kernel-dumps/stat_* (made
//! by the CPU statistics task, make_statistic_dumps.py) and the tables msprobe wrote for them
//! (msprobe-compare/stat_*, make_msprobe_compare.sh).

use std::path::{Path, PathBuf};

use compare::kernel::{
    AnyKernelTable, KernelCompareOptions, Origin, STAT_COLUMNS, StatTable,
    compare_kernel_dumps_all, run_kernel_compare,
};

fn dir() -> PathBuf {
    testsupport::testdata().join("kernel-dumps")
}

fn read_csv_text(text: &str) -> Vec<Vec<String>> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes());
    rdr.records()
        .map(|r| r.unwrap().iter().map(str::to_owned).collect())
        .collect()
}

fn stat_tables(target: &str, golden: &str) -> Vec<StatTable> {
    let d = dir();
    let t = dumpfmt::kernel::open(&d.join(target)).unwrap();
    let g = dumpfmt::kernel::open(&d.join(golden)).unwrap();
    compare_kernel_dumps_all(&t, &g, &KernelCompareOptions::default())
        .unwrap()
        .into_iter()
        .map(|t| match t {
            AnyKernelTable::Statistic(t) => t,
            AnyKernelTable::Tensor(t) => panic!("rank {} step {}: tensor mode", t.rank, t.step),
        })
        .collect()
}

/// Every cell equals msprobe's: the statistics come from the CSV's text, so no summation
/// order is involved.
fn check_pair(target: &str, golden: &str) -> usize {
    let d = dir();
    let tables = stat_tables(target, golden);
    assert_eq!(
        tables.iter().map(|t| (t.rank, t.step)).collect::<Vec<_>>(),
        [(0, 0), (0, 1)]
    );
    let mut cells = 0;
    for table in &tables {
        let want = read_csv_text(
            &std::fs::read_to_string(d.join(format!(
                "msprobe-compare/{target}-vs-{golden}/compare_result_{}_{}.csv",
                table.rank, table.step
            )))
            .unwrap(),
        );
        let rel = |p: &Path| p.strip_prefix(&d).unwrap().display().to_string();
        let got = read_csv_text(&table.to_csv(&rel));
        assert_eq!(got[0], STAT_COLUMNS);
        assert_eq!(got[0], want[0], "header");
        assert_eq!(got.len(), want.len(), "rows of step {}", table.step);
        for (r, (g, w)) in got.iter().zip(&want).enumerate().skip(1) {
            for (i, (gc, wc)) in g.iter().zip(w).enumerate() {
                assert_eq!(
                    gc, wc,
                    "step {} row {r} column {:?}\n{g:?}\n{w:?}",
                    table.step, STAT_COLUMNS[i]
                );
                cells += 1;
            }
        }
    }
    cells
}

#[test]
fn float32_statistics_pair_equals_msprobes_tables() {
    assert!(check_pair("stat_f32_noisy", "stat_f32") > 3000);
}

#[test]
fn float16_against_float32_statistics_equals_msprobes_tables() {
    // Dtype mismatches and kernels only the float16 net runs (one-sided rows).
    assert!(check_pair("stat_f16", "stat_f32") > 3000);
}

#[test]
fn statistics_first_divergence_is_found() {
    let tables = stat_tables("stat_f32_noisy", "stat_f32");
    let f = tables[0].first_divergence(0.0).unwrap();
    assert_eq!(
        (f.op_type.as_str(), f.op_name.as_str(), f.why),
        ("Parameter", "inputs0", Origin::GraphInput),
        "{f}"
    );
    assert!(tables[0].first_divergence(0.01).is_none());
    let tables = stat_tables("stat_f16", "stat_f32");
    let f = tables[0].first_divergence(0.0).unwrap();
    assert_eq!(
        (f.op_type.as_str(), f.why),
        ("Cast", Origin::OnlyInTarget),
        "{f}"
    );
    let same = stat_tables("stat_f32", "stat_f32");
    assert!(same.iter().all(|t| t.first_divergence(0.0).is_none()));
    assert!(
        same.iter()
            .flat_map(|t| &t.rows)
            .all(|r| r.accuracy == "Yes" && r.err_message.is_empty())
    );
}

#[test]
fn run_writes_msprobes_files_and_names_the_first_divergence() {
    let d = dir();
    let out = tempfile::tempdir().unwrap();
    let o = run_kernel_compare(
        &d.join("stat_f16"),
        &d.join("stat_f32"),
        out.path(),
        &KernelCompareOptions::default(),
        Some("20261202013000"),
        0.0,
    )
    .unwrap();
    assert!(o.tables.is_empty());
    let names: Vec<_> = o
        .stat_tables
        .iter()
        .map(|(_, p)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "compare_result_0_0_20261202013000.csv",
            "compare_result_0_1_20261202013000.csv"
        ]
    );
    let first = std::fs::read_to_string(out.path().join(&names[0])).unwrap();
    assert!(first.starts_with(&(STAT_COLUMNS.join(",") + "\n")));
    assert!(
        o.summary_text
            .contains("First divergence: rank 0, step 0, Cast `Default_network-WithLossCell__backbone-Net_Cast-op0`"),
        "{}",
        o.summary_text
    );
    assert!(o.summary_text.contains("Statistics mode"));
}

#[test]
fn a_tensor_dump_against_a_statistics_dump_is_refused() {
    let d = dir();
    let out = tempfile::tempdir().unwrap();
    let e = run_kernel_compare(
        &d.join("net_f32"),
        &d.join("stat_f32"),
        out.path(),
        &KernelCompareOptions::default(),
        None,
        0.0,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("rank 0 step 0")
            && e.contains("tensor files (.npy)")
            && e.contains("statistic.csv only"),
        "{e}"
    );
}
