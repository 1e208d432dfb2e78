//! compare reads a dump's tensor files only inside its `dump_tensor_data/`: a link out of it, a
//! FIFO (which would block the read forever) or a name that is not a plain file name is an
//! error for that row, never opened.

use compare::run::DumpDirSource;
use compare::table::TensorSource;
use dumpfmt::{DType, TensorView, pt};

#[cfg(unix)]
#[test]
fn links_out_fifos_and_paths_are_refused() {
    use std::os::unix::fs::symlink;

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dump_tensor_data");
    std::fs::create_dir(&dir).unwrap();
    let bytes = 1.5f32.to_le_bytes();
    let view = TensorView::new(DType::F32, &[1], &bytes).unwrap();
    pt::write(&dir.join("ok.pt"), view, "cpu").unwrap();
    pt::write(&tmp.path().join("outside.pt"), view, "cpu").unwrap();
    symlink(tmp.path().join("outside.pt"), dir.join("evil.pt")).unwrap();
    let fifo = dir.join("fifo.pt");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success())
    );
    let src = DumpDirSource {
        npu_dir: dir.clone(),
        bench_dir: dir.clone(),
    };
    assert_eq!(src.load(true, "ok.pt").unwrap().dtype(), DType::F32);
    for (name, why) in [
        ("evil.pt", "outside the tensor directory"),
        ("fifo.pt", "not a regular file"),
        ("../outside.pt", "not a file name"),
    ] {
        let e = src.load(false, name).unwrap_err();
        assert!(e.contains(why), "{name}: {e}");
    }
}

fn parse(text: &str) -> dumpfmt::json::Value {
    dumpfmt::json::parse(text.as_bytes(), std::path::Path::new("mem")).unwrap()
}

/// A dump.json whose structure is broken fails the comparison, naming the side and the JSON
/// path, instead of comparing to an empty table that "agrees".
#[test]
fn malformed_dumps_are_errors_naming_side_and_path() {
    use compare::matching::MatchOptions;
    use compare::table::TableOptions;
    let good = parse(r#"{"task": "statistics", "data": {}}"#);
    for (bad, want) in [
        (r#"{"task": "statistics"}"#, "$.data: missing"),
        (
            r#"{"task": "statistics", "data": [1]}"#,
            "$.data: expected an object, found array",
        ),
        (r#"{"data": {}}"#, "$.task: missing"),
        (r#"[]"#, "$: top level is not an object"),
        (
            r#"{"task": "tensor", "data": {"A.b.0.forward": {"output": [{"type": "torch.Tensor", "shape": [1], "data_name": "x.pt"}]}}}"#,
            r#"$.data["A.b.0.forward"].output[0]: tensor record without "dtype""#,
        ),
    ] {
        let bad = parse(bad);
        let e = compare::run::compare_named(
            (&bad, "target t/dump.json"),
            (&good, "golden g/dump.json"),
            None,
            &MatchOptions::default(),
            &TableOptions::default(),
            &(),
        )
        .err()
        .expect("an error")
        .to_string();
        assert!(e.starts_with(&format!("target t/dump.json: {want}")), "{e}");
        let e = compare::compare_dumps(
            &good,
            &bad,
            None,
            &MatchOptions::default(),
            &TableOptions::default(),
            &(),
        )
        .err()
        .expect("an error")
        .to_string();
        assert!(e.starts_with("golden dump.json: "), "{e}");
    }
}

/// A tensor that cannot be read is an `error` row with msprobe's message and the reason.
#[test]
fn unreadable_tensor_rows_are_errors() {
    use compare::judge::Level;
    use compare::matching::MatchOptions;
    use compare::table::TableOptions;
    let rec = |n: &str| {
        format!(
            r#"{{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1], "Max": 1.0, "Min": 1.0, "Mean": 1.0, "Norm": 1.0, "requires_grad": false, "data_name": "{n}"}}"#
        )
    };
    let dump = parse(&format!(
        r#"{{"task": "tensor", "data": {{"Torch.abs.0.forward": {{"input_args": [{}], "output": [{}]}}}}}}"#,
        rec("in.pt"),
        rec("../out.pt")
    ));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dump_tensor_data");
    std::fs::create_dir(&dir).unwrap();
    let bytes = 1.0f32.to_le_bytes();
    pt::write(
        &dir.join("in.pt"),
        TensorView::new(DType::F32, &[1], &bytes).unwrap(),
        "cpu",
    )
    .unwrap();
    let src = DumpDirSource {
        npu_dir: dir.clone(),
        bench_dir: dir,
    };
    let cmp = compare::compare_dumps(
        &dump,
        &dump,
        None,
        &MatchOptions::default(),
        &TableOptions {
            source: Some(&src),
            ..Default::default()
        },
        &(),
    )
    .unwrap();
    let levels: Vec<Level> = cmp.table.verdicts.iter().map(|v| v.level).collect();
    assert_eq!(levels, [Level::Pass, Level::Error]);
    let msg = cmp.table.verdicts[1].err_message();
    assert!(
        msg.contains("Dump file: ../out.pt not found or read failed."),
        "{msg}"
    );
    assert!(msg.contains("not a file name"), "{msg}");
    let s = compare::divergence::summarize(&cmp.table, &cmp.npu, 0.0);
    assert_eq!(s.row_levels, [1, 0, 1]);
    assert_eq!(s.unreadable.len(), 1);
    let md = s.to_markdown("t", "g", "x.csv");
    assert!(md.contains("1 rows could not be compared"), "{md}");
    assert!(!md.contains("every matched API agrees"), "{md}");
}
