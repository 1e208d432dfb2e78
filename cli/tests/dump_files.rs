//! `validate`, `fmt` and `inspect` end to end: what a user at the terminal relies on.

mod common;
use common::*;
use std::path::{Path, PathBuf};

fn sample_rank_dir(side: &str) -> PathBuf {
    let step = repo_root()
        .join("samples/tiny-bf16-vs-f32")
        .join(side)
        .join("step0");
    std::fs::read_dir(&step)
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .expect("a rank directory")
}

#[test]
fn validate_accepts_the_shipped_sample_and_every_fixture_root() {
    let target = repo_root().join("samples/tiny-bf16-vs-f32/target");
    let o = numprobe([Path::new("validate"), &target]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("313 tensor files: 0 problem(s)"), "{text}");

    for root in [
        "msprobe-26.2.0-cpu/pt_tiny_f32_tensor_mix/dump",
        "msprobe-26.2.0-cpu/ms_tiny_f32_tensor_L1/dump",
        "msprobe-26.2.0-torch-h200/l1_tensor/dump_path",
    ] {
        let o = numprobe([
            Path::new("validate"),
            &testdata().join("fixtures").join(root),
        ]);
        assert!(o.status.success(), "{root}: {}{}", stdout(&o), stderr(&o));
    }
}

#[test]
fn validate_reports_each_corruption_and_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let rank = tmp.path().join("rank");
    copy_tree(&sample_rank_dir("target"), &rank);
    let data = rank.join("dump_tensor_data");

    // A truncated tensor file, a missing one, and a dtype that disagrees with its file.
    let pt = data.join("Functional.linear.0.forward.input.0.pt");
    let bytes = std::fs::read(&pt).unwrap();
    std::fs::write(&pt, &bytes[..bytes.len() / 2]).unwrap();
    std::fs::remove_file(data.join("Functional.linear.0.forward.output.0.pt")).unwrap();
    let dump = rank.join("dump.json");
    let text = std::fs::read_to_string(&dump).unwrap();
    let input1 = text.find("Functional.linear.0.forward.input.1.pt").unwrap();
    let first_bf16 = text[..input1].rfind("\"torch.bfloat16\"").unwrap();
    let mut changed = text.clone();
    changed.replace_range(first_bf16..first_bf16 + 16, "\"torch.float64\" ");
    std::fs::write(&dump, changed).unwrap();

    let o = numprobe([Path::new("validate"), &rank]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("Functional.linear.0.forward.input.0.pt"),
        "{out}"
    );
    assert!(
        out.contains("Functional.linear.0.forward.output.0.pt"),
        "{out}"
    );
    assert!(
        out.contains("$.data[\"Functional.linear.0.forward\"]"),
        "{out}"
    );
    assert!(
        out.lines().filter(|l| l.starts_with("error: ")).count() >= 3,
        "{out}"
    );

    // Truncated JSON: a clear message with a byte offset, exit 1, no panic.
    std::fs::write(&dump, &text.as_bytes()[..text.len() / 3]).unwrap();
    let o = numprobe([Path::new("validate"), &dump]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("invalid JSON"), "{}", stdout(&o));
    assert!(!stderr(&o).contains("panicked"));
}

#[test]
fn validate_of_a_missing_path_is_an_error() {
    let o = numprobe(["validate", "/nonexistent/numprobe/dump"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("/nonexistent/numprobe/dump"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn fmt_reproduces_msprobe_files_byte_for_byte() {
    let root = testdata().join("fixtures/msprobe-26.2.0-cpu/pt_tiny_f32_stat_mix/dump/step0");
    let rank = std::fs::read_dir(&root)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let tmp = tempfile::tempdir().unwrap();
    for name in ["dump.json", "stack.json", "construct.json"] {
        let src = rank.join(name);
        // To stdout...
        let o = numprobe([Path::new("fmt"), &src]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            o.stdout == std::fs::read(&src).unwrap(),
            "{name} differs on stdout"
        );
        // ...and to a file.
        let out = tmp.path().join(name);
        let o = numprobe([Path::new("fmt"), &src, Path::new("-o"), &out]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(&src).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn fmt_rejects_malformed_json_and_keeps_the_old_output() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("dump.json");
    std::fs::write(
        &bad,
        "{\n \"task\": \"statistics\",\n \"data\": {\n  \"x\": [1, 2,, 3]\n }\n}",
    )
    .unwrap();
    let out = tmp.path().join("out.json");
    std::fs::write(&out, "previous content").unwrap();
    let o = numprobe([Path::new("fmt"), &bad, Path::new("-o"), &out]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("dump.json") && err.contains("line 4"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous content");
}

#[test]
fn inspect_prints_dtype_shape_and_bytes() {
    let pt =
        sample_rank_dir("target").join("dump_tensor_data/Functional.linear.0.forward.input.0.pt");
    let o = numprobe([Path::new("inspect"), &pt]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["torch_dtype"], "torch.bfloat16");
    assert_eq!(v["shape"], serde_json::json!([4, 8, 16]));
    assert_eq!(v["nbytes"], 4 * 8 * 16 * 2);

    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("x.pt");
    std::fs::write(&broken, &std::fs::read(&pt).unwrap()[..100]).unwrap();
    let o = numprobe([Path::new("inspect"), &broken]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("x.pt"), "{}", stderr(&o));
}
