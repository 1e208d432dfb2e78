//! Kernel dumps of raw files (Ascend's `file_format: "bin"`: no header, the dtype in the name,
//! the shape in `statistic.csv`), made from the shipped MindSpore 2.7.1 `.npy` trees: compared
//! against `.npy` trees, every cell but the file names equals the `.npy`-only compare.

use std::path::Path;

use compare::kernel::{KernelCompareOptions, compare_kernel_dumps};

fn table_csv(target: &Path, golden: &Path) -> Vec<String> {
    let t = dumpfmt::kernel::open(target).unwrap();
    let g = dumpfmt::kernel::open(golden).unwrap();
    let tables = compare_kernel_dumps(&t, &g, &KernelCompareOptions::default()).unwrap();
    assert_eq!(tables.len(), 2, "two steps");
    // File names without the folder and without `.npy`: a raw file's name is the `.npy` one's
    // stem.
    let name = |p: &Path| {
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        n.strip_suffix(".npy").map(str::to_owned).unwrap_or(n)
    };
    tables.iter().map(|t| t.to_csv(&name)).collect()
}

#[test]
fn raw_tree_compares_as_its_npy_original() {
    let d = testsupport::testdata().join("kernel-dumps");
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw");
    testsupport::kernel_raw::raw_copy(&d.join("net_f32_noisy"), &raw, true, None);
    let want = table_csv(&d.join("net_f32_noisy"), &d.join("net_f32"));
    let got = table_csv(&raw, &d.join("net_f32"));
    assert_eq!(got, want);
    // Every tensor was read and measured (a failed read would show as an error row).
    assert!(
        want.iter()
            .all(|t| t.lines().count() > 10 && t.contains(",Yes,"))
    );
}

#[test]
fn raw_float16_tree_against_float32_npy() {
    let d = testsupport::testdata().join("kernel-dumps");
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw16");
    testsupport::kernel_raw::raw_copy(&d.join("net_f16"), &raw, true, None);
    assert_eq!(
        table_csv(&raw, &d.join("net_f32")),
        table_csv(&d.join("net_f16"), &d.join("net_f32"))
    );
}
