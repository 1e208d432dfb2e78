//! Raw kernel-dump files (no header: Ascend's `file_format: "bin"`, or a dtype npy cannot hold),
//! made from the shipped MindSpore 2.7.1 `.npy` trees: listed, read with the shape of their
//! `statistic.csv` row (one dimension without one), inspected and validated; bad sizes and
//! dtypes no reader knows are errors naming the file.

use dumpfmt::kernel;
use dumpfmt::tensor::{self, FileInfo};

fn raw_tree(
    statistic_csv: bool,
    no_row_for: Option<&str>,
) -> (tempfile::TempDir, kernel::KernelDump) {
    let dir = tempfile::tempdir().unwrap();
    let src = testsupport::testdata().join("kernel-dumps/net_f32");
    testsupport::kernel_raw::raw_copy(&src, dir.path(), statistic_csv, no_row_for);
    let dump = kernel::open(dir.path()).unwrap();
    (dir, dump)
}

#[test]
fn raw_files_read_as_their_npy_originals() {
    let npy = kernel::open(&testsupport::testdata().join("kernel-dumps/net_f32")).unwrap();
    // One tensor without a statistic.csv row: read as one dimension.
    let (_dir, raw) = raw_tree(true, Some("MatMul-op0.0.0."));
    let mut flat = 0;
    for (a, b) in npy.steps().zip(raw.steps()) {
        let (a, b) = (a.contents().unwrap(), b.contents().unwrap());
        assert!(b.unparsed.is_empty(), "{:?}", b.unparsed);
        assert_eq!(a.tensors.len(), b.tensors.len());
        for (x, y) in a.tensors.iter().zip(&b.tensors) {
            assert!(!x.raw && y.raw);
            assert_eq!(x.name, y.name);
            let (tx, ty) = (x.read().unwrap(), y.read().unwrap());
            assert_eq!(tx.dtype(), ty.dtype());
            assert_eq!(tx.bytes(), ty.bytes());
            if y.name.op_name.contains("MatMul-op0") && y.name.task_id == 0 {
                assert_eq!(ty.shape(), [tx.numel()], "{}", y.path.display());
                flat += 1;
            } else {
                assert_eq!(tx.shape(), ty.shape(), "{}", y.path.display());
                // Found alone, the file takes its shape from the statistic.csv beside it.
                let alone = tensor::read_tensor(&y.path).unwrap();
                assert_eq!(alone.shape(), tx.shape());
                let Ok(FileInfo::Tensor(info)) = tensor::inspect(&y.path) else {
                    panic!("{}", y.path.display())
                };
                assert_eq!((info.dtype, &info.shape[..]), (tx.dtype(), tx.shape()));
            }
        }
    }
    assert!(flat > 0, "the test's row-less tensors exist");
    let report = dumpfmt::validate::validate(raw.root.as_path()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn without_statistic_csv_raw_files_are_one_dimension() {
    let (_dir, raw) = raw_tree(false, None);
    let step = &raw.ranks[0].steps[0];
    let c = step.contents().unwrap();
    assert!(c.statistics.is_none());
    for t in &c.tensors {
        let x = t.read().unwrap();
        assert_eq!(x.shape().len(), 1, "{}", t.path.display());
        assert_eq!(x.bytes().len(), x.numel() * x.dtype().size());
    }
}

#[test]
fn bad_sizes_and_unknown_dtypes_are_errors_naming_the_file() {
    let (dir, raw) = raw_tree(false, None);
    let step = &raw.ranks[0].steps[0];
    let c = step.contents().unwrap();
    let f32_file = c
        .tensors
        .iter()
        .find(|t| t.name.dtype_name.as_deref() == Some("Float32"))
        .unwrap();
    let mut bytes = std::fs::read(&f32_file.path).unwrap();
    bytes.push(0);
    std::fs::write(&f32_file.path, &bytes).unwrap();
    let e = f32_file.read().unwrap_err().to_string();
    assert!(e.contains(&f32_file.path.display().to_string()), "{e}");
    assert!(e.contains("not a whole number of"), "{e}");
    // An INT4 file: named like a tensor, but its packing is stated nowhere.
    let int4 = step
        .dir
        .join("Cast.Default_Cast-op9.0.0.1796163346974000.output.0.DefaultFormat.INT4");
    std::fs::write(&int4, [0u8; 8]).unwrap();
    let c = step.contents().unwrap();
    assert_eq!(c.unparsed, std::slice::from_ref(&int4));
    let report = dumpfmt::validate::validate(dir.path()).unwrap();
    let text = format!("{:?}", report.problems);
    assert!(text.contains("INT4"), "{text}");
    assert!(text.contains("not a whole number of"), "{text}");
}

#[test]
fn ascend_dtype_names_are_known() {
    let n = kernel::KernelFileName::parse_raw(
        "MatMul.Default_MatMul-op1.2.3.1700000000000000.output.0.FRACTAL_NZ.BF16",
    )
    .unwrap();
    assert_eq!(n.dtype(), Some(dumpfmt::DType::BF16));
    assert_eq!(n.format, "FRACTAL_NZ");
    for (name, d) in [
        ("FLOAT", dumpfmt::DType::F32),
        ("FLOAT16", dumpfmt::DType::F16),
        ("DOUBLE", dumpfmt::DType::F64),
        ("INT64", dumpfmt::DType::I64),
        ("BOOL", dumpfmt::DType::Bool),
    ] {
        assert_eq!(kernel::ms_dtype(name), Some(d));
    }
    // Not raw names: .npy, CSVs, a missing or unknown dtype field.
    for bad in [
        "MatMul.op.0.0.1.input.0.DefaultFormat.Float32.npy",
        "statistic.csv",
        "MatMul.op.0.0.1.input.0.DefaultFormat",
        "MatMul.op.0.0.1.input.0.DefaultFormat.INT4",
    ] {
        assert_eq!(kernel::KernelFileName::parse_raw(bad), None, "{bad}");
    }
}
