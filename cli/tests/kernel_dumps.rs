//! `validate`, `inspect` and `stats` on MindSpore kernel-level dumps (testdata/kernel-dumps,
//! made by MindSpore 2.7.1's own dump on CPU).

mod common;
use common::*;
use std::path::{Path, PathBuf};

fn case(name: &str) -> PathBuf {
    testdata().join("kernel-dumps").join(name)
}

fn step_file(case_name: &str, prefix: &str, suffix: &str) -> PathBuf {
    let dir = case(case_name).join("rank_0/Net/0/0");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(prefix) && n.ends_with(suffix))
        .collect();
    names.sort();
    dir.join(names.first().expect("a matching file"))
}

#[test]
fn validate_a_kernel_dump_tree() {
    for name in ["net_f32", "net_bf16", "jit_f32"] {
        let o = numprobe([Path::new("validate"), &case(name)]);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        assert!(
            stdout(&o).contains("MindSpore kernel dump: 2 step folder(s)"),
            "{}",
            stdout(&o)
        );
    }
    // A rank folder alone is a kernel dump too.
    let o = numprobe([Path::new("validate"), &case("net_f32").join("rank_0")]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn inspect_and_stats_read_mindspores_bfloat16_files() {
    let f = step_file("net_bf16", "Cast.", ".output.0.DefaultFormat.BFloat16.npy");
    let o = numprobe([Path::new("inspect"), &f]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["mindspore_dtype"], "BFloat16");
    assert_eq!(v["shape"], serde_json::json!([2, 4]));

    // The statistics of the bfloat16 Cast equal those of its float32 input rounded to bfloat16.
    let x = step_file("net_bf16", "Parameter.inputs0.", ".npy");
    let xs = dumpfmt::tensor::read_tensor(&x).unwrap();
    let rounded: Vec<f32> = bytemuck::cast_slice::<u8, f32>(xs.bytes())
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_f32())
        .collect();
    let max = rounded.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let min = rounded.iter().cloned().fold(f32::INFINITY, f32::min);
    let o = numprobe([
        Path::new("stats"),
        &f,
        Path::new("--device"),
        Path::new("cpu"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["Max"].as_f64().unwrap(), max as f64);
    assert_eq!(v["Min"].as_f64().unwrap(), min as f64);
}

#[test]
fn raw_kernel_files_validate_inspect_stats_and_compare() {
    // The bfloat16 net as Ascend's raw files (no header), with a statistic.csv naming shapes.
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw");
    testsupport::kernel_raw::raw_copy(&case("net_bf16"), &raw, true, None);
    let o = numprobe([Path::new("validate"), &raw]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let npy = step_file("net_bf16", "Cast.", ".output.0.DefaultFormat.BFloat16.npy");
    let f = raw.join("rank_0/Net/0/0").join(npy.file_stem().unwrap());
    let o = numprobe([Path::new("inspect"), &f]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["mindspore_dtype"], "BFloat16");
    assert_eq!(v["shape"], serde_json::json!([2, 4]));
    let stats = |p: &Path| {
        let o = numprobe([
            Path::new("stats"),
            p,
            Path::new("--device"),
            Path::new("cpu"),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(stats(&f), stats(&npy));
    // compare of the raw tree against the .npy one: every cell but the file names equals the
    // compare of the .npy tree against itself.
    let tables = |target: &Path, out: &Path| -> Vec<Vec<Vec<String>>> {
        let o = numprobe([
            Path::new("compare"),
            target,
            &case("net_bf16"),
            Path::new("--out"),
            out,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        let mut files: Vec<PathBuf> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "csv"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                csv::ReaderBuilder::new()
                    .has_headers(false)
                    .from_path(f)
                    .unwrap()
                    .records()
                    .map(|r| r.unwrap().iter().skip(2).map(str::to_owned).collect())
                    .collect()
            })
            .collect()
    };
    let got = tables(&raw, &dir.path().join("out"));
    assert_eq!(got.len(), 2, "a table per step");
    assert!(got.iter().all(|t| t.len() > 10));
    assert_eq!(got, tables(&case("net_bf16"), &dir.path().join("out_npy")));
}

#[test]
fn compare_two_kernel_dumps_writes_msprobes_tables_and_names_the_origin() {
    let out = tempfile::tempdir().unwrap();
    let o = numprobe([
        Path::new("compare"),
        &case("net_bf16"),
        &case("net_f32"),
        Path::new("--out"),
        out.path(),
        Path::new("--timestamp"),
        Path::new("20261201120000"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let mut files: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "compare_result_0_0_20261201120000.csv",
            "compare_result_0_1_20261201120000.csv",
            "report.html",
            "report_rank0_step0.html",
            "report_rank0_step1.html",
            "summary.md"
        ]
    );
    // Two tables: a page each, and report.html listing them (the path the command prints).
    let index = out.path().join("report.html");
    assert!(
        stdout(&o).contains(&format!("report:       {}", index.display())),
        "{}",
        stdout(&o)
    );
    let index = std::fs::read_to_string(index).unwrap();
    assert!(
        index.contains("href=\"report_rank0_step0.html\""),
        "{index}"
    );
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(
        summary.contains("First divergence: rank 0, step 0, Cast `Default_network-WithLossCell__backbone-Net_Cast-op0`"),
        "{summary}"
    );
    let csv =
        std::fs::read_to_string(out.path().join("compare_result_0_0_20261201120000.csv")).unwrap();
    assert!(csv.starts_with("NPU Name,Bench Name,NPU Dtype,"), "{csv}");
    assert!(csv.contains(",bfloat16,"), "bfloat16 kernels are compared");

    // --step picks one table; a step neither dump has is an error (exit 2), not an empty pass.
    let out2 = tempfile::tempdir().unwrap();
    let o = numprobe([
        Path::new("compare"),
        &case("net_bf16"),
        &case("net_f32"),
        Path::new("--out"),
        out2.path(),
        Path::new("--step"),
        Path::new("7"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("share no (rank, iteration)"),
        "{}",
        stderr(&o)
    );
}
