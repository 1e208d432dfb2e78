//! The statistics-mode kernel dumps in testdata/kernel-dumps/stat_* are what the CPU
//! statistics task makes of the recorded MindSpore tensor dumps: each iteration folder's
//! tensors summarized into MindSpore's `statistic.csv` (max, min, avg, l2norm) and removed.
//! Regenerate with testdata/kernel-dumps/make_statistic_dumps.py.

use std::path::{Path, PathBuf};

use capture::kernel_stats::{SummaryMode, md5_hex, summarize_step_dir};
use dumpfmt::kernel;

fn dumps() -> PathBuf {
    testsupport::testdata().join("kernel-dumps")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// The tensor dump `case` copied to a temporary folder and summarized step by step.
fn summarized(case: &str, mode: SummaryMode) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&dumps().join(case), tmp.path());
    let engine = stats_gpu::Engine::new();
    let dump = kernel::open(tmp.path()).unwrap();
    for step in dump.steps() {
        assert!(summarize_step_dir(&step.dir, &engine, mode).unwrap() > 0);
        let c = step.contents().unwrap();
        assert!(c.tensors.is_empty(), "staged tensors removed");
    }
    tmp
}

fn close(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x == y || (x - y).abs() <= 1e-6 * x.abs().max(y.abs()),
        _ => a == b,
    }
}

#[test]
fn recorded_statistic_dumps_are_the_tasks_output() {
    for (case, recorded) in [
        ("net_f32", "stat_f32"),
        ("net_f32_noisy", "stat_f32_noisy"),
        ("net_f16", "stat_f16"),
    ] {
        let made = summarized(case, SummaryMode::Statistics);
        let want = kernel::open(&dumps().join(recorded)).unwrap();
        let got = kernel::open(made.path()).unwrap();
        assert_eq!(
            want.steps().count(),
            got.steps().count(),
            "{recorded}: step folders"
        );
        for (w, g) in want.steps().zip(got.steps()) {
            let (wc, gc) = (w.contents().unwrap(), g.contents().unwrap());
            assert!(wc.tensors.is_empty(), "{}: no tensor file", w.dir.display());
            let (wr, gr) = (wc.statistics.unwrap(), gc.statistics.unwrap());
            assert_eq!(wr.len(), gr.len(), "{}", w.dir.display());
            for (a, b) in wr.iter().zip(&gr) {
                assert_eq!(
                    (
                        &a.op_name,
                        a.timestamp,
                        a.io,
                        a.slot,
                        &a.shape_text,
                        &a.data_type
                    ),
                    (
                        &b.op_name,
                        b.timestamp,
                        b.io,
                        b.slot,
                        &b.shape_text,
                        &b.data_type
                    )
                );
                // Means and norms may differ in the last digit where the statistics ran on
                // another engine (a GPU); everything else is exact.
                for (col, v) in &a.values {
                    assert!(
                        close(v, &b.values[col]),
                        "{} line {} {col}: recorded {v}, made {}",
                        w.dir.display(),
                        a.line,
                        b.values[col]
                    );
                }
            }
        }
    }
}

#[test]
fn statistics_equal_those_of_the_tensor_files() {
    // Independent of the recorded tables: every row's max and min are the tensor's own.
    let made = summarized("net_f32", SummaryMode::Statistics);
    let tensors = kernel::open(&dumps().join("net_f32")).unwrap();
    let stats = kernel::open(made.path()).unwrap();
    for (t, s) in tensors.steps().zip(stats.steps()) {
        let files = t.contents().unwrap().tensors;
        let rows = s.contents().unwrap().statistics.unwrap();
        assert_eq!(files.len(), rows.len());
        for (f, r) in files.iter().zip(&rows) {
            assert_eq!(f.name.compare_key(), r.compare_key());
            let tensor = dumpfmt::tensor::read_tensor(&f.path).unwrap();
            assert_eq!(r.data_size, tensor.bytes().len() as u64);
            assert_eq!(r.shape, tensor.shape());
            if tensor.dtype() == dumpfmt::DType::F32 && !tensor.bytes().is_empty() {
                let v: Vec<f32> = tensor
                    .bytes()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let min = v.iter().copied().fold(f32::INFINITY, f32::min);
                assert_eq!(
                    r.value("Max Value"),
                    Some(max as f64),
                    "{}",
                    f.path.display()
                );
                assert_eq!(
                    r.value("Min Value"),
                    Some(min as f64),
                    "{}",
                    f.path.display()
                );
            }
        }
    }
}

#[test]
fn md5_mode_writes_the_md5_of_each_tensors_bytes() {
    // A known answer: MD5 of the little-endian float32 bytes of [1.5, -2.0, 0.25, 3.0]
    // (Python: hashlib.md5(struct.pack('<4f', 1.5, -2.0, 0.25, 3.0)).hexdigest()).
    let vals: [f32; 4] = [1.5, -2.0, 0.25, 3.0];
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(md5_hex(&bytes), "3c3798add3c7d12fc3ac40356a1c2e71");
    assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");

    let made = summarized("net_bf16", SummaryMode::Md5);
    let tensors = kernel::open(&dumps().join("net_bf16")).unwrap();
    let stats = kernel::open(made.path()).unwrap();
    let mut bf16_rows = 0;
    for (t, s) in tensors.steps().zip(stats.steps()) {
        let csv = std::fs::read_to_string(s.dir.join("statistic.csv")).unwrap();
        assert!(
            csv.starts_with(
                "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,MD5\n"
            ),
            "{csv}"
        );
        let files = t.contents().unwrap().tensors;
        let rows = s.contents().unwrap().statistics.unwrap();
        assert_eq!(files.len(), rows.len());
        for (f, r) in files.iter().zip(&rows) {
            let tensor = dumpfmt::tensor::read_tensor(&f.path).unwrap();
            assert_eq!(r.values.keys().collect::<Vec<_>>(), ["MD5"]);
            assert_eq!(r.values["MD5"], md5_hex(tensor.bytes()));
            bf16_rows += usize::from(r.data_type == "bfloat16");
        }
    }
    assert!(bf16_rows > 0, "bfloat16 tensors hashed too");
    // A folder summarized once per mode keeps one kind of table.
    let engine = stats_gpu::Engine::new();
    let step = stats.steps().next().unwrap().clone();
    std::fs::copy(
        tensors.steps().next().unwrap().contents().unwrap().tensors[0]
            .path
            .clone(),
        step.dir.join(
            tensors.steps().next().unwrap().contents().unwrap().tensors[0]
                .path
                .file_name()
                .unwrap(),
        ),
    )
    .unwrap();
    let e = summarize_step_dir(&step.dir, &engine, SummaryMode::Statistics)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("statistic.csv") && e.contains("other statistics"),
        "{e}"
    );
}
