//! End to end: the installed `numprobe` Python package captures the fixture model (tensor
//! mode, L1 and mix), the dump passes dumpfmt's validation with msprobe's files only (a clean
//! run removes its journal), and a journal (kept on purpose here, as a killed run leaves it) is
//! recovered into the same dump.
//!
//! Needs a Python with torch and the package installed (capture/tests/run_python_tests.sh
//! installs it; so does `.ci/setup`). Without it the test fails.

mod common;

use std::path::Path;
use std::process::Command;

fn numprobe_installed(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import numprobe.pytorch, torch"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn capture(py: &Path, fixture: &str, dir: &Path, steps: u32, keep_journal: bool) {
    let cfg_src = common::fixtures().join(fixture).join("config.json");
    let mut cfg = dumpfmt::json::parse_file(&cfg_src).unwrap();
    let dump = dir.join("dump");
    cfg.as_object_mut()
        .unwrap()
        .insert("dump_path", dump.to_str().unwrap().into());
    let cfg_path = dir.join("config.json");
    dumpfmt::json::write_file(&cfg_path, &cfg).unwrap();
    let driver = testsupport::manifest_dir().join("python_tests/drive_model.py");
    let out = Command::new(py)
        .arg(driver)
        .arg("--config")
        .arg(&cfg_path)
        .arg("--steps")
        .arg(steps.to_string())
        .env("NUMPROBE_TESTDATA", testsupport::testdata())
        // A test never starts a background build of the torch reader (it would compile one
        // into the user's cache beside the test run); one already built is used.
        .env("NUMPROBE_TORCH_SHIM", "1")
        .env(
            "NUMPROBE_KEEP_JOURNAL",
            if keep_journal { "1" } else { "0" },
        )
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{fixture}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn python_capture_validates_and_recovers() {
    let py = testsupport::python();
    // `.ci/setup` (or capture/tests/run_python_tests.sh) installs the package; without it this
    // test fails rather than pass without checking anything.
    assert!(
        numprobe_installed(&py),
        "the numprobe Python package is not installed for {} (run .ci/setup or capture/tests/run_python_tests.sh)",
        py.display()
    );
    for (fixture, steps) in [("pt_tiny_f32_tensor_L1", 1), ("pt_tiny_f32_stat_mix", 2)] {
        let tmp = tempfile::tempdir().unwrap();
        capture(&py, fixture, tmp.path(), steps, false);
        let root = tmp.path().join("dump");
        let report = dumpfmt::validate::validate(&root).unwrap();
        assert!(report.is_ok(), "{fixture}: {report}");
        assert_eq!(report.steps, steps as usize, "{fixture}");

        // Same entries as msprobe's fixture, in the same order.
        let step0 = std::fs::read_dir(root.join("step0"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let fx_step0 = std::fs::read_dir(common::fixtures().join(fixture).join("dump/step0"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let ours = dumpfmt::dump::DumpFile::open(&step0.join("dump.json")).unwrap();
        let theirs = dumpfmt::dump::DumpFile::open(&fx_step0.join("dump.json")).unwrap();
        let a: Vec<&str> = ours.entries().map(|e| e.name).collect();
        let b: Vec<&str> = theirs.entries().map(|e| e.name).collect();
        assert_eq!(a, b, "{fixture}");
        assert!(
            !step0.join(capture::journal::FILE_NAME).exists(),
            "{fixture}"
        );

        // A run that keeps its journal: the journal alone rebuilds byte-identical files.
        let tmp = tempfile::tempdir().unwrap();
        capture(&py, fixture, tmp.path(), steps, true);
        let root = tmp.path().join("dump");
        let step0 = std::fs::read_dir(root.join("step0"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        assert!(
            step0.join(capture::journal::FILE_NAME).exists(),
            "{fixture}"
        );
        let before = std::fs::read(step0.join("dump.json")).unwrap();
        std::fs::remove_file(step0.join("dump.json")).unwrap();
        std::fs::remove_file(step0.join("stack.json")).unwrap();
        capture::recover(&root).unwrap();
        assert_eq!(
            std::fs::read(step0.join("dump.json")).unwrap(),
            before,
            "{fixture}"
        );
        assert!(step0.join("stack.json").exists());
    }
}
