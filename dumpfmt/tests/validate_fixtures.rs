//! `validate` accepts every dump msprobe wrote for the fixtures and the upstream samples.

use std::path::PathBuf;

use dumpfmt::validate::validate;

use testsupport::testdata;

fn dump_roots() -> Vec<PathBuf> {
    let fx = testdata().join("fixtures");
    let mut roots = Vec::new();
    for d in ["msprobe-26.2.0-cpu", "msprobe-26.2.0-torch-h200"] {
        let mut scen: Vec<_> = std::fs::read_dir(fx.join(d))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        scen.sort();
        for s in scen {
            for root in ["dump", "dump_path"] {
                if s.join(root).is_dir() {
                    roots.push(s.join(root));
                }
            }
        }
    }
    roots
}

#[test]
fn every_26_2_dump_root_validates_cleanly() {
    let roots = dump_roots();
    assert!(roots.len() >= 40, "{}", roots.len());
    let mut tensor_files = 0;
    for root in roots {
        let r = validate(&root).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.is_ok(), "{r}");
        assert!(r.warnings.is_empty(), "{r}");
        assert!(r.steps >= 1 && r.ranks >= 1 && r.json_files >= 1, "{r}");
        assert_eq!(r.file_records, r.tensor_files, "{r}");
        tensor_files += r.tensor_files;
    }
    assert!(tensor_files > 3000, "{tensor_files}");
}

#[test]
fn counts_of_one_scenario() {
    let r = validate(&testdata().join("fixtures/msprobe-26.2.0-torch-h200/l1_tensor/dump_path"))
        .unwrap();
    assert_eq!((r.steps, r.ranks, r.json_files), (1, 1, 3));
    assert_eq!(r.tensor_files, 86, "{r}");
    assert_eq!(r.file_records, 86, "{r}");
    assert!(r.api_entries > 30 && r.module_entries == 0, "{r}");
    assert!(r.summary().contains("86 tensor files"), "{}", r.summary());
}

#[test]
fn upstream_samples_validate() {
    let up = testdata().join("fixtures/msprobe-upstream");
    for p in [
        "examples/quick_start/gpu_dump",
        "examples/quick_start/gpu_dump/step1",
        "examples/quick_start/gpu_dump/step0/proc2016",
        "test/resources/layer_mapping/pytorch",
        "test/resources/layer_mapping/mindspore",
        "test/msprobe_test/mindspore_ut/compare/dump_file/pytorch_data",
        "test/msprobe_test/mindspore_ut/compare/dump_file/mindspore_data",
        "test/msprobe_test/pytorch_ut/api_accuracy_checker/run_ut",
        "test/msprobe_test/pytorch_ut/api_accuracy_checker/run_ut/dump.json",
    ] {
        let r = validate(&up.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(r.is_ok(), "{r}");
        assert!(r.entries > 0, "{r}");
    }
    let r = validate(&up.join("examples/quick_start/gpu_dump")).unwrap();
    assert_eq!((r.steps, r.ranks, r.json_files), (2, 2, 6), "{r}");
}

#[test]
fn single_files_validate() {
    let dir =
        testdata().join("fixtures/msprobe-26.2.0-torch-h200/l1_tensor/dump_path/step0/proc505");
    let r = validate(&dir.join("dump.json")).unwrap();
    assert!(r.is_ok() && r.file_records == 86, "{r}");
    let r = validate(&dir.join("stack.json")).unwrap();
    assert!(r.is_ok() && r.json_files == 1, "{r}");
    let r = validate(&dir.join("dump_tensor_data/Torch.abs.0.forward.input.0.pt")).unwrap();
    assert!(r.is_ok() && r.tensor_files == 1, "{r}");
}
