//! The kernel-dump compare against msprobe 26.2's graph-mode comparator on the same pairs
//! (testdata/kernel-dumps: MindSpore 2.7.1 CPU dumps; msprobe-compare/ recorded by
//! make_msprobe_compare.sh).

use std::path::{Path, PathBuf};

use compare::kernel::{COLUMNS, KernelCompareOptions, compare_kernel_dumps};

fn dir() -> PathBuf {
    testsupport::testdata().join("kernel-dumps")
}

fn read_csv(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes());
    rdr.records()
        .map(|r| r.unwrap().iter().map(str::to_owned).collect())
        .collect()
}

/// Index of the two l2norm columns: numpy takes them from a BLAS dot product whose summation
/// order depends on the CPU's kernel (numprobe sums in float64 and rounds once).
fn is_norm_column(i: usize) -> bool {
    COLUMNS[i].ends_with("l2norm")
}

fn within_ulps(a: &str, b: &str, ulps: i64) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => {
            let (x, y) = (x as f32, y as f32);
            (x.to_bits() as i64 - y.to_bits() as i64).abs() <= ulps
        }
        _ => a == b,
    }
}

fn check_pair(target: &str, golden: &str) -> usize {
    let d = dir();
    let t = dumpfmt::kernel::open(&d.join(target)).unwrap();
    let g = dumpfmt::kernel::open(&d.join(golden)).unwrap();
    let tables = compare_kernel_dumps(&t, &g, &KernelCompareOptions::default()).unwrap();
    assert_eq!(
        tables.iter().map(|t| (t.rank, t.step)).collect::<Vec<_>>(),
        [(0, 0), (0, 1)]
    );
    let mut cells = 0;
    for table in &tables {
        let want = read_csv(&d.join(format!(
            "msprobe-compare/{target}-vs-{golden}/compare_result_{}_{}.csv",
            table.rank, table.step
        )));
        let rel = |p: &Path| p.strip_prefix(&d).unwrap().display().to_string();
        let got = read_csv_text(&table.to_csv(&rel));
        assert_eq!(got[0], want[0], "header");
        assert_eq!(got.len(), want.len(), "rows of step {}", table.step);
        for (r, (g, w)) in got.iter().zip(&want).enumerate().skip(1) {
            for (i, (gc, wc)) in g.iter().zip(w).enumerate() {
                let ok = if is_norm_column(i) {
                    within_ulps(gc, wc, 2)
                } else {
                    gc == wc
                };
                assert!(
                    ok,
                    "step {} row {r} column {:?}: numprobe {gc:?}, msprobe {wc:?}\n{g:?}",
                    table.step, COLUMNS[i]
                );
                cells += 1;
            }
        }
    }
    cells
}

fn read_csv_text(text: &str) -> Vec<Vec<String>> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes());
    rdr.records()
        .map(|r| r.unwrap().iter().map(str::to_owned).collect())
        .collect()
}

#[test]
fn float32_pair_equals_msprobes_tables() {
    assert!(check_pair("net_f32_noisy", "net_f32") > 3000);
}

#[test]
fn float16_against_float32_pair_equals_msprobes_tables() {
    // Dtype mismatches (skipped rows) and kernels only the float16 net has (one-sided rows).
    assert!(check_pair("net_f16", "net_f32") > 3000);
}

#[test]
fn bfloat16_pair_is_compared_where_msprobe_fails() {
    let d = dir();
    let t = dumpfmt::kernel::open(&d.join("net_bf16")).unwrap();
    let g = dumpfmt::kernel::open(&d.join("net_f32")).unwrap();
    let tables = compare_kernel_dumps(&t, &g, &KernelCompareOptions::default()).unwrap();
    let rows = &tables[0].rows;
    let cast = rows
        .iter()
        .find(|r| {
            r.npu
                .as_ref()
                .is_some_and(|s| s.name.op_type == "Cast" && s.dtype == dumpfmt::DType::BF16)
        })
        .expect("the bfloat16 Cast");
    assert!(cast.bench.is_none(), "the float32 net has no Cast");
    assert!(cast.npu.as_ref().unwrap().max.is_some());
    // The Add ran in bfloat16 on one side, float32 on the other: a dtype mismatch row.
    let add = rows
        .iter()
        .find(|r| r.key.contains("_Add-op0") && r.key.contains(".output."))
        .unwrap();
    assert!(
        add.err_message
            .contains("Dtype of NPU and bench Tensor do not match")
    );
    // Downstream float32 kernels are compared and carry the bfloat16 rounding.
    let relu = rows
        .iter()
        .find(|r| r.key.contains("relu-ReLU_ReLU-op0") && r.key.contains(".output."))
        .unwrap();
    assert!(relu.metrics.is_some(), "{relu:?}");
}

#[test]
fn first_divergence_of_the_bfloat16_net_is_its_cast() {
    let d = dir();
    let t = dumpfmt::kernel::open(&d.join("net_bf16")).unwrap();
    let g = dumpfmt::kernel::open(&d.join("net_f32")).unwrap();
    let tables = compare_kernel_dumps(&t, &g, &KernelCompareOptions::default()).unwrap();
    let f = tables[0].first_divergence(0.0).unwrap();
    assert_eq!(f.op_type, "Cast", "{f}");
    assert_eq!(f.why, compare::kernel::Origin::OnlyInTarget);
    assert!(f.op_name.ends_with("Net_Cast-op0"), "{f}");
    assert!(f.differing_after > 5, "{f:?}");
}

#[test]
fn first_divergence_of_a_perturbed_input_is_the_input() {
    let d = dir();
    let t = dumpfmt::kernel::open(&d.join("net_f32_noisy")).unwrap();
    let g = dumpfmt::kernel::open(&d.join("net_f32")).unwrap();
    let tables = compare_kernel_dumps(&t, &g, &KernelCompareOptions::default()).unwrap();
    let f = tables[0].first_divergence(0.0).unwrap();
    // The graph input (a Parameter file, not in the execution order) is where the runs differ.
    assert_eq!(
        (f.op_type.as_str(), f.op_name.as_str()),
        ("Parameter", "inputs0"),
        "{f}"
    );
    assert_eq!(f.why, compare::kernel::Origin::GraphInput);
    // Within a 1% tolerance the noise (1e-3) does not count.
    assert_eq!(tables[0].first_divergence(0.01), None);
    // A float32 pair with itself never diverges.
    let same = compare_kernel_dumps(&g, &g, &KernelCompareOptions::default()).unwrap();
    assert!(same.iter().all(|t| t.first_divergence(0.0).is_none()));
}
