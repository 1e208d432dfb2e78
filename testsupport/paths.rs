//! Where a test binary finds its crate's files and shared/. One file, included by each crate's
//! `tests/common/mod.rs` (`#[path]`): test helpers are not a crate of their own.

use std::path::PathBuf;

/// The directory of the crate under test. Read when the test runs (cargo sets it for every test
/// process), with the compile-time value as the fallback: cargo may keep a test binary built in
/// another checkout that shares the target directory, whose compile-time path is that checkout.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `../shared` beside the repository (CI lays it there), or `NUMPROBE_SHARED`.
pub fn shared() -> PathBuf {
    std::env::var_os("NUMPROBE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../shared"))
}
