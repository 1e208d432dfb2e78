//! `validate` on damaged copies of a real dump: each damage is reported once, as a problem
//! (or a warning) that names the file and the JSON path or byte offset.

use std::path::{Path, PathBuf};

use dumpfmt::json::{self, Map, Value};
use dumpfmt::validate::{Report, validate};

use testsupport::testdata;

/// A copy of a small PyTorch tensor-mode rank dir (12 `.pt` files) under `root/step0/proc1`.
fn copy_rank() -> (tempfile::TempDir, PathBuf) {
    let src = testdata()
        .join("fixtures/msprobe-26.2.0-cpu/pt_tiny_f32_tensor_L1_list/dump/step0/proc26804");
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join("step0/proc1");
    std::fs::create_dir_all(dst.join("dump_tensor_data")).unwrap();
    for f in ["dump.json", "stack.json", "construct.json"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    for e in std::fs::read_dir(src.join("dump_tensor_data")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join("dump_tensor_data").join(e.file_name())).unwrap();
    }
    (tmp, dst)
}

/// Rewrites the `data` map of the rank's dump.json with `edit`.
fn edit_data<T>(rank: &Path, edit: impl FnOnce(&mut Map) -> T) -> T {
    let path = rank.join("dump.json");
    let mut v = json::parse_file(&path).unwrap();
    let data = v
        .as_object_mut()
        .unwrap()
        .get_mut("data")
        .unwrap()
        .as_object_mut()
        .unwrap();
    let out = edit(data);
    json::write_file(&path, &v).unwrap();
    out
}

/// Applies `edit` to the first tensor record that has a data_name; returns its JSON path.
fn edit_first_file_record(rank: &Path, edit: impl FnOnce(&mut Map)) -> String {
    edit_data(rank, |data| first_file_record(data, edit))
}

fn first_file_record(data: &mut Map, edit: impl FnOnce(&mut Map)) -> String {
    let (name, entry) = data.iter_mut().next().unwrap();
    let name = name.to_string();
    let rec = entry
        .as_object_mut()
        .unwrap()
        .get_mut("input_args")
        .unwrap();
    let Value::Array(a) = rec else { panic!() };
    let Value::Object(m) = &mut a[0] else {
        panic!()
    };
    assert!(m.contains_key("data_name"));
    edit(m);
    format!("$.data[\"{name}\"].input_args[0]")
}

fn only_problem(r: &Report) -> &dumpfmt::validate::Problem {
    assert_eq!(r.problems.len(), 1, "{r}");
    &r.problems[0]
}

#[test]
fn the_copy_is_clean() {
    let (tmp, _) = copy_rank();
    let r = validate(tmp.path()).unwrap();
    assert!(r.is_ok() && r.warnings.is_empty(), "{r}");
    assert_eq!((r.tensor_files, r.file_records), (12, 12), "{r}");
}

#[test]
fn missing_tensor_file() {
    let (tmp, rank) = copy_rank();
    let mut name = String::new();
    let jp = edit_first_file_record(&rank, |m| {
        name = m.get("data_name").unwrap().as_str().unwrap().to_string()
    });
    std::fs::remove_file(rank.join("dump_tensor_data").join(&name)).unwrap();
    let r = validate(tmp.path()).unwrap();
    let p = only_problem(&r);
    assert_eq!(p.file, rank.join("dump.json"));
    assert_eq!(p.location, format!("{jp}.data_name"));
    assert!(p.message.contains("no such file"), "{p}");
}

#[test]
fn shape_disagreeing_with_the_file() {
    let (tmp, rank) = copy_rank();
    let jp = edit_first_file_record(&rank, |m| {
        m.insert("shape", Value::Array(vec![Value::Int(7), Value::Int(7)]));
    });
    let r = validate(&tmp.path().join("step0")).unwrap();
    let p = only_problem(&r);
    assert_eq!(p.location, format!("{jp}.shape"));
    assert!(p.message.contains("[7, 7]"), "{p}");
    assert!(p.to_string().contains("dump.json"), "{p}");
}

#[test]
fn dtype_disagreeing_with_the_file() {
    let (tmp, rank) = copy_rank();
    let jp = edit_first_file_record(&rank, |m| {
        m.insert("dtype", Value::from("torch.bfloat16"));
    });
    let r = validate(&rank).unwrap();
    let p = only_problem(&r);
    assert_eq!(p.location, format!("{jp}.dtype"));
    drop(tmp);
}

#[test]
fn unknown_dtype_and_wrong_types() {
    let (tmp, rank) = copy_rank();
    let jp = edit_first_file_record(&rank, |m| {
        m.insert("dtype", Value::from("torch.float99"));
        m.insert("requires_grad", Value::from("yes"));
    });
    let r = validate(tmp.path()).unwrap();
    let p = only_problem(&r);
    assert_eq!(p.location, format!("{jp}.dtype"));
    assert!(p.message.contains("unknown dtype"), "{p}");
    // The record is unreadable, so its file is now unreferenced.
    assert_eq!(r.warnings.len(), 1, "{r}");
}

#[test]
fn truncated_dump_json() {
    let (tmp, rank) = copy_rank();
    let path = rank.join("dump.json");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let r = validate(tmp.path()).unwrap();
    let p = only_problem(&r);
    assert_eq!(p.file, path);
    assert!(
        p.location
            .starts_with(&format!("byte {} ", bytes.len() - 10)),
        "{p}"
    );
    assert!(p.message.starts_with("invalid JSON"), "{p}");
    // Every tensor file is now unreferenced.
    assert_eq!(r.warnings.len(), 12, "{r}");
}

#[test]
fn orphan_file_and_foreign_stack_name() {
    let (tmp, rank) = copy_rank();
    std::fs::write(
        rank.join("dump_tensor_data/Torch.zzz.0.forward.input.0.pt"),
        b"x",
    )
    .unwrap();
    let stack = rank.join("stack.json");
    let mut v = json::parse_file(&stack).unwrap();
    let m = v.as_object_mut().unwrap();
    m.insert(
        m.len().to_string(),
        Value::Array(vec![
            Value::Array(vec!["Torch.nothere.0.forward".into()]),
            Value::Array(vec![]),
        ]),
    );
    json::write_file(&stack, &v).unwrap();
    let r = validate(tmp.path()).unwrap();
    let p = only_problem(&r);
    assert_eq!(p.file, stack);
    assert!(p.message.contains("Torch.nothere.0.forward"), "{p}");
    assert_eq!(r.warnings.len(), 1, "{r}");
    assert!(
        r.warnings[0]
            .file
            .ends_with("Torch.zzz.0.forward.input.0.pt")
    );
}

#[test]
fn mindspore_bf16_records_are_saved_as_float32() {
    let src =
        testdata().join("fixtures/msprobe-26.2.0-cpu/ms_tiny_f32_tensor_L1/dump/step0/proc2856");
    let tmp = tempfile::tempdir().unwrap();
    let rank = tmp.path().join("rank0");
    std::fs::create_dir_all(rank.join("dump_tensor_data")).unwrap();
    let v = json::parse_file(&src.join("dump.json")).unwrap();
    // Keep the first entry only, and the files it names.
    let data = v.get("data").unwrap().as_object().unwrap();
    let (name, entry) = data.iter().next().unwrap();
    let mut entry = entry.clone();
    let mut dtype_paths = 0;
    if let Value::Object(e) = &mut entry {
        for (_, section) in e.iter_mut() {
            if let Value::Array(a) = section {
                for rec in a.iter_mut() {
                    if let Value::Object(r) = rec
                        && let Some(dn) = r.get("data_name").and_then(Value::as_str)
                    {
                        std::fs::copy(
                            src.join("dump_tensor_data").join(dn),
                            rank.join("dump_tensor_data").join(dn),
                        )
                        .unwrap();
                        r.insert("dtype", Value::from("BFloat16"));
                        dtype_paths += 1;
                    }
                }
            }
        }
    }
    assert!(dtype_paths > 0);
    let mut top = v.as_object().unwrap().clone();
    top.insert(
        "data",
        Value::Object(Map::new().with(&name.to_string(), entry)),
    );
    json::write_file(&rank.join("dump.json"), &Value::Object(top)).unwrap();
    let r = validate(&rank).unwrap();
    assert!(r.is_ok() && r.warnings.is_empty(), "{r}");
    assert_eq!(r.file_records, dtype_paths);
}

#[test]
fn not_a_dump() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(matches!(
        validate(tmp.path()),
        Err(dumpfmt::Error::Layout { .. })
    ));
}

/// A `data_mode` without forward: dump.json has no forward entry while stack.json still lists
/// the forward calls (msprobe writes them so). That is a warning, not a problem.
#[test]
fn forward_stacks_without_forward_entries_only_warn() {
    let (tmp, rank) = copy_rank();
    edit_data(&rank, |data| {
        let forward: Vec<String> = data
            .keys()
            .map(|k| k.to_string())
            .filter(|k| k.contains(".forward"))
            .collect();
        assert!(!forward.is_empty());
        for k in &forward {
            data.remove(k.as_str());
        }
    });
    // Their tensor files go too, so only the stack names remain to be judged.
    for e in std::fs::read_dir(rank.join("dump_tensor_data")).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().contains(".forward.") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let r = validate(tmp.path()).unwrap();
    assert!(r.problems.is_empty(), "{r}");
    assert!(
        r.warnings
            .iter()
            .any(|w| w.message.contains("is not an entry of dump.json")),
        "{r}"
    );
}

/// A capture journal left in a rank directory is a run that ended before a clean stop()/step():
/// one problem on the journal that points at `numprobe recover`.
#[test]
fn stray_capture_journal_is_an_unfinished_run() {
    let (_t, rank) = copy_rank();
    std::fs::write(rank.join("numprobe_journal.bin"), b"NPJ").unwrap();
    let r = validate(rank.parent().unwrap().parent().unwrap()).unwrap();
    let p = only_problem(&r);
    assert!(p.file.ends_with("step0/proc1/numprobe_journal.bin"), "{p}");
    assert!(p.message.contains("unfinished run"), "{p}");
    assert!(p.message.contains("numprobe recover"), "{p}");
}
