//! Every JSON file of the fixtures: msprobe 26.2.0's files are rewritten byte for byte, every
//! file (old upstream samples included) reads into the typed views.

use std::path::{Path, PathBuf};

use dumpfmt::construct::ConstructFile;
use dumpfmt::dump::DumpFile;
use dumpfmt::json;
use dumpfmt::stack::StackFile;

use testsupport::testdata;

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "dump_tensor_data") {
                continue;
            }
            json_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
}

/// The JSON files msprobe 26.2.0 wrote. `config.json` (msprobe's input) and `run_info.json`
/// (the fixture generator's notes) are not msprobe output.
fn msprobe_26_2_files() -> Vec<PathBuf> {
    let fx = testdata().join("fixtures");
    let mut out = Vec::new();
    for d in ["msprobe-26.2.0-cpu", "msprobe-26.2.0-torch-h200"] {
        json_files(&fx.join(d), &mut out);
    }
    out.retain(|p| {
        let n = p.file_name().unwrap().to_str().unwrap();
        n != "config.json" && n != "run_info.json"
    });
    out
}

#[test]
fn fmt_is_byte_identical_on_msprobe_26_2_files() {
    let files = msprobe_26_2_files();
    assert!(files.len() >= 200, "found only {} files", files.len());
    for f in &files {
        let original = std::fs::read(f).unwrap();
        let v = json::parse_file(f).unwrap_or_else(|e| panic!("{e}"));
        let written = json::to_python_bytes(&v);
        if written != original {
            let at = written
                .iter()
                .zip(&original)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            panic!(
                "{}: differs at byte {at}: wrote {:?}, original {:?}",
                f.display(),
                String::from_utf8_lossy(
                    &written[at.saturating_sub(40)..(at + 40).min(written.len())]
                ),
                String::from_utf8_lossy(
                    &original[at.saturating_sub(40)..(at + 40).min(original.len())]
                )
            );
        }
    }
}

fn open_typed(f: &Path) {
    let name = f.file_name().unwrap().to_str().unwrap();
    match name {
        "dump.json" | "debug.json" => {
            let d = DumpFile::open(f).unwrap_or_else(|e| panic!("{e}"));
            for e in d.entries() {
                let _ = e.tensors();
            }
        }
        "stack.json" => {
            StackFile::open(f).unwrap_or_else(|e| panic!("{e}"));
        }
        "construct.json" => {
            ConstructFile::open(f).unwrap_or_else(|e| panic!("{e}"));
        }
        _ => {
            json::parse_file(f).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn every_fixture_json_reads_into_typed_views() {
    let mut files = Vec::new();
    json_files(&testdata().join("fixtures"), &mut files);
    assert!(files.len() > 250);
    for f in &files {
        open_typed(f);
    }
}

/// Decoding each tensor record and encoding it again gives the original object (26.2 key
/// order), and every `data_name` follows the naming rule the typed walk predicts.
#[test]
fn tensor_records_round_trip_through_the_typed_model() {
    let mut records = 0;
    let mut named = 0;
    for f in msprobe_26_2_files() {
        let n = f.file_name().unwrap();
        if n != "dump.json" && n != "debug.json" {
            continue;
        }
        let d = DumpFile::open(&f).unwrap();
        let ext = d.framework().tensor_ext();
        for e in d.entries() {
            for t in e.tensors() {
                records += 1;
                assert_eq!(
                    t.record.to_value(),
                    json::Value::Object(t.value.clone()),
                    "{}: {}",
                    f.display(),
                    t.json_path
                );
                if let Some(dn) = &t.record.data_name {
                    named += 1;
                    assert_eq!(
                        *dn,
                        e.expected_data_name(&t, ext),
                        "{}: {}",
                        f.display(),
                        t.json_path
                    );
                }
            }
        }
    }
    assert!(records > 20_000, "{records}");
    assert!(named > 4_000, "{named}");
}

#[test]
fn framework_is_detected_when_the_key_is_absent() {
    let f = testdata().join("fixtures/msprobe-upstream/test/msprobe_test/pytorch_ut/api_accuracy_checker/run_ut/dump.json");
    let d = DumpFile::open(&f).unwrap();
    assert_eq!(d.declared_framework(), None);
    assert_eq!(d.framework(), dumpfmt::names::Framework::PyTorch);
    let f = testdata()
        .join("fixtures/msprobe-upstream/test/resources/layer_mapping/mindspore/dump.json");
    assert_eq!(
        DumpFile::open(&f).unwrap().framework(),
        dumpfmt::names::Framework::MindSpore
    );
}

#[test]
fn stack_formats_are_told_apart() {
    let fx = testdata().join("fixtures");
    let new = StackFile::open(
        &fx.join("msprobe-26.2.0-torch-h200/l1_statistics/dump_path/step0/proc503/stack.json"),
    )
    .unwrap();
    assert_eq!(new.format, dumpfmt::stack::StackFormat::Grouped);
    assert_eq!(new.frames_of("Torch.abs.0.forward").unwrap().len(), 2);
    assert_eq!(
        json::to_python_bytes(&new.to_value(dumpfmt::stack::StackFormat::Grouped)),
        std::fs::read(&new.path).unwrap()
    );
    let old = StackFile::open(
        &fx.join("msprobe-upstream/test/resources/layer_mapping/pytorch/stack.json"),
    )
    .unwrap();
    assert_eq!(old.format, dumpfmt::stack::StackFormat::PerName);
    assert!(old.names().count() > 0);
    let c = ConstructFile::open(
        &fx.join("msprobe-upstream/test/resources/layer_mapping/pytorch/construct.json"),
    )
    .unwrap();
    // `""` parents read as top level.
    assert!(c.nodes.iter().any(|n| n.parent.is_none()));
}
