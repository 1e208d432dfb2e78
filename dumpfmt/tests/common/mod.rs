//! Shared by dumpfmt's test binaries: where shared/ is, and the Python with torch and numpy.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

#[path = "../../../testsupport/paths.rs"]
mod paths;
#[allow(unused_imports)]
pub use paths::{manifest_dir, shared};

/// `NUMPROBE_PYTHON` (default: the venv `.ci/setup` makes); fails the test when it cannot
/// import torch and numpy, so interop tests never pass without checking anything.
pub fn python() -> PathBuf {
    let py = std::env::var_os("NUMPROBE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/numprobe/venv/bin/python"));
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
