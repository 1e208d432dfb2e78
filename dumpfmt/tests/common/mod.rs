//! Shared by dumpfmt's test binaries: the Python with torch and numpy.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// `NUMPROBE_PYTHON` (default: the venv `.ci/setup` makes); fails the test when it cannot
/// import torch and numpy, so interop tests never pass without checking anything.
pub fn python() -> PathBuf {
    let py = testsupport::python();
    let ok = Command::new(&py)
        .args(["-c", "import torch, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "cannot run {} with torch and numpy; set NUMPROBE_PYTHON to a Python that has them",
        py.display()
    );
    py
}
